// Takes the README's picture of the events page (docs/events-page.png):
// signs in to a running server with Debian's Chromium and shoots the page
// once the journal is shown and the live feed connected. On a scratch
// server with the demo's day in it:
//
//	DATA_DIR=/tmp/erp-shot ADDR=:18080 make run   # in another terminal
//	DATA_DIR=/tmp/erp-shot DEMO_URL=http://localhost:18080/graphql make demo
//	npm ci --prefix e2e/browser
//	node e2e/browser/screenshot.mjs http://localhost:18080 "$(cat /tmp/erp-shot/admin-token)" docs/events-page.png

import { chromium } from 'playwright-core';

const [baseURL, token, out] = process.argv.slice(2);
if (!baseURL || !token || !out) {
  console.error('usage: node screenshot.mjs <baseURL> <token> <out.png>');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 }, locale: 'ru-RU' });
  await page.goto(`${baseURL}/`);
  await page.fill('#sign-in input[name=token]', token);
  await page.click('#sign-in button[type=submit]');
  await page.waitForSelector('table.events tbody tr');
  await page.waitForSelector('#live[data-state=live]');
  await page.screenshot({ path: out });
} finally {
  await browser.close();
}
