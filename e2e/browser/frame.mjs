// Loads a page that frames other pages in Debian's Chromium and prints, as
// one JSON object on stdout, what each of its iframes shows: the frame's
// URL (chrome-error://… when the browser refused to show it), its title,
// whether it has GraphiQL's root (#graphiql) and the start of its text,
// and the console messages (Chromium explains each refusal there).
// browser_test.go runs it; by hand:
//
//	node e2e/browser/frame.mjs http://127.0.0.1:9999/framer.html
//
// Every request to a host other than localhost is aborted.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [framerURL] = process.argv.slice(2);
if (!framerURL) {
  console.error('usage: node frame.mjs <url of a page with iframes>');
  process.exit(2);
}

const result = { frames: [], console: [], blocked: [] };
const profile = mkdtempSync(join(tmpdir(), 'erp-chromium-'));
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) return route.continue();
    result.blocked.push(url.href);
    return route.abort('blockedbyclient');
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('console', (msg) => result.console.push(msg.text()));
  // "load" waits for every iframe's load, a refused one's error page too.
  await page.goto(framerURL, { waitUntil: 'load', timeout: 60_000 });
  // Give a frame that did load a moment to run its script.
  await page.waitForTimeout(500);
  for (const frame of page.frames()) {
    if (frame === page.mainFrame()) continue;
    const el = await frame.frameElement();
    const id = await el.getAttribute('id');
    let seen = { title: '', graphiql: false, text: '' };
    try {
      seen = await frame.evaluate(() => ({
        title: document.title,
        graphiql: !!document.querySelector('#graphiql'),
        text: (document.body?.innerText ?? '').slice(0, 200),
      }));
    } catch (err) {
      seen.error = String(err.message ?? err).split('\n')[0];
    }
    result.frames.push({ id, url: frame.url(), ...seen });
  }
  result.ok = true;
} catch (err) {
  result.ok = false;
  result.error = String(err.stack ?? err);
} finally {
  await context?.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
