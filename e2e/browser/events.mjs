// Drives Debian's Chromium through the events page and the playground of a
// running erp server, and prints what it saw as one JSON object on stdout
// (progress goes to stderr). browser_test.go runs it against an in-process
// server after the demo replay; by hand:
//
//	node e2e/browser/events.mjs http://localhost:8080 "$(cat .data/admin-token)" /tmp/events.png
//
// Environment (both optional):
//
//	E2E_API_URL      where the script itself posts GraphQL (default: the base URL)
//	E2E_NET_CONTROL  a switch in front of the base URL: POST /down cuts the
//	                 browser's connections and refuses new ones, POST /up
//	                 restores them; with it the script checks that the live
//	                 feed resumes without gaps after a network drop
//
// Every request of the browser to a host other than localhost is aborted
// and listed in "blocked": the pages must not need the internet.

import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [baseURL, token, screenshot] = process.argv.slice(2);
if (!baseURL || !token || !screenshot) {
  console.error('usage: node events.mjs <baseURL> <token> <screenshot.png>');
  process.exit(2);
}
const apiURL = process.env.E2E_API_URL || baseURL;
const netControl = process.env.E2E_NET_CONTROL;
const screenshotBase = screenshot.replace(/\.png$/, '');
const STEP_TIMEOUT = 15_000;
// GraphiQL's editor bundle (several MB of JavaScript) is parsed on first
// load; on a CI machine busy with the other test packages that alone has
// taken over 15 s. The wait is for the page to render, not a promise about
// its speed.
const EDITOR_LOAD_TIMEOUT = 60_000;

const result = { steps: [], blocked: [], pageErrors: [], screenshots: [] };
const log = (...args) => console.error('[e2e]', ...args);

/** Runs one GraphQL operation as the admin, straight to the server. */
async function api(query, variables = {}) {
  const res = await fetch(`${apiURL}/graphql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  if (body.errors?.length) throw new Error(`api: ${JSON.stringify(body.errors)}`);
  return body.data;
}

/** Takes an order from the "web shop" and returns its id once both its events are processed. */
// receiveShopOrder sends a shop order for the fittings kit, which has no bill
// of materials: no production order follows, so the order's own events stay
// at the top of the page.
async function receiveShopOrder() {
  const syncID = `shop-e2e-${Math.random().toString(16).slice(2, 14)}`;
  const data = await api(
    `mutation($in: ReceiveOrderInput!) { receiveOrder(input: $in) { order { id number } duplicate } }`,
    { in: { source: 'SHOP', externalId: syncID, customer: 'ООО «Браузер»', lines: [{ sku: 'МАТ-ФУРН', quantity: '1' }] } },
  );
  return { id: data.receiveOrder.order.id, number: data.receiveOrder.order.number, syncID };
}

async function waitProcessed(orderID) {
  const deadline = Date.now() + STEP_TIMEOUT;
  for (;;) {
    const data = await api(
      `query($id: ID!) { events(filter: { entity: "sales_orders", entityId: $id }) { edges { node { id processedAt } } } }`,
      { id: orderID },
    );
    const evs = data.events.edges.map((e) => e.node);
    if (evs.length >= 2 && evs.every((e) => e.processedAt)) return evs.map((e) => e.id);
    if (Date.now() > deadline) throw new Error(`order ${orderID}: events not processed in time`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const CANCEL_REASON = 'клиент передумал';

/** Waits until sales order id is in status and returns it with its version. */
async function waitStatus(id, status) {
  const deadline = Date.now() + STEP_TIMEOUT;
  for (;;) {
    const { salesOrder } = await api(`query($id: ID!) { salesOrder(id: $id) { status version } }`, { id });
    if (salesOrder.status === status) return salesOrder;
    if (Date.now() > deadline) throw new Error(`order ${id}: still ${salesOrder.status}, not ${status}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function allEvents(filter = {}) {
  const data = await api(`query($f: EventFilter) { events(filter: $f, first: 500) { edges { node { id type } } } }`, { f: filter });
  return data.events.edges.map((e) => e.node);
}

async function net(state) {
  const res = await fetch(`${netControl}/${state}`, { method: 'POST' });
  if (!res.ok) throw new Error(`net ${state}: ${res.status}`);
}

async function step(name, fn) {
  const started = Date.now();
  log(name);
  const detail = await fn();
  result.steps.push({ name, ms: Date.now() - started, ...detail });
  return detail;
}

/** The table as the reader sees it: one object per row, cells by header. */
async function tableRows(page) {
  return page.$$eval('table.events tbody tr', (trs) =>
    trs.map((tr) => {
      const td = [...tr.cells].map((c) => c.querySelector('summary')?.textContent ?? c.textContent.trim());
      return {
        id: td[0],
        type: td[1],
        object: td[2],
        payload: td[3],
        created: td[4],
        processed: tr.cells[5].firstChild?.textContent?.trim() ?? '',
        actor: td[6],
      };
    }),
  );
}

/** Text of a Monaco editor inside root (GraphiQL 5), with its non-breaking spaces made plain. */
async function editorText(page, root) {
  return page.$$eval(`${root} .view-lines`, (els) => els.map((el) => el.innerText.replace(/\u00a0/g, ' ')).join('\n'));
}

/** Waits until a Monaco editor inside root shows text. */
async function waitEditorText(page, root, text) {
  await page.waitForFunction(
    ([root, text]) => [...document.querySelectorAll(`${root} .view-lines`)].some((el) => el.textContent.replace(/\u00a0/g, ' ').includes(text)),
    [root, text],
  );
}

const profile = mkdtempSync(join(tmpdir(), 'erp-chromium-'));
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1440, height: 1000 },
    locale: 'ru-RU',
  });
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) return route.continue();
    result.blocked.push(url.href);
    return route.abort('blockedbyclient');
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_TIMEOUT);
  page.on('pageerror', (err) => result.pageErrors.push(err.message));
  page.on('console', (msg) => {
    if (msg.type() === 'error') log('console:', msg.text());
  });

  await step('sign in', async () => {
    await page.goto(`${baseURL}/`);
    const redirectedTo = new URL(page.url()).pathname;
    await page.fill('#sign-in input[name=token]', 'not-a-token');
    await page.click('#sign-in button[type=submit]');
    const refused = await page.textContent('#sign-in .error:not(:empty)');
    await page.fill('#sign-in input[name=token]', token);
    await page.click('#sign-in button[type=submit]');
    await page.waitForSelector('table.events tbody tr');
    await page.waitForSelector('#live[data-state=live]');
    const stored = await page.evaluate(() => ({
      session: sessionStorage.getItem('erp.token'),
      local: JSON.stringify({ ...localStorage }),
      cookies: document.cookie,
    }));
    return {
      redirectedTo,
      refused,
      tokenInSession: stored.session === token,
      tokenElsewhere: stored.local.includes(token) || stored.cookies.includes(token),
    };
  });

  await step('rows', async () => {
    const header = await page.$$eval('table.events thead th', (ths) => ths.map((th) => th.textContent.trim()));
    const rows = await tableRows(page);
    const apiEvents = await allEvents();
    await page.screenshot({ path: screenshot });
    result.screenshots.push(screenshot);
    return {
      header,
      rowCount: rows.length,
      journalCount: apiEvents.length,
      firstRows: rows.slice(0, 3),
      topIDsMatch: rows.slice(0, 10).map((r) => r.id).join() === apiEvents.slice(0, 10).map((e) => e.id).join(),
      timeZone: await page.evaluate(() => document.documentElement.dataset.timeZone),
    };
  });

  const { order: liveOrder } = await step('live order', async () => {
    const started = Date.now();
    const order = await receiveShopOrder();
    const want = `sales_orders #${order.id}`;
    await page.waitForFunction(
      (want) => {
        // The order's events, processed, at the top — in any order:
        // different subscribers take them, so either may finish first, and
        // order_acceptance's doc.status_changed joins them.
        const top = [...document.querySelectorAll('table.events tbody tr')].slice(0, 3);
        const types = top.filter((tr) => tr.cells[2].textContent.trim() === want && tr.cells[5].textContent.trim() !== '—').map((tr) => tr.cells[1].textContent);
        return types.includes('order.received') && types.includes('doc.created');
      },
      want,
    );
    const rows = await tableRows(page);
    return { order, seenAfterMs: Date.now() - started, top: rows.slice(0, 3).filter((r) => r.object === want) };
  });

  await step('status history', async () => {
    // The live order, accepted by the system, is cancelled by the admin
    // while the page is open: the cancellation comes live, and the order's
    // dialog lists its creation and both changes, oldest first.
    const so = await waitStatus(liveOrder.id, 'accepted');
    await api(
      `mutation($id: ID!, $v: Int!, $r: String!) { cancelSalesOrder(id: $id, version: $v, reason: $r) { status } }`,
      { id: liveOrder.id, v: so.version, r: CANCEL_REASON },
    );
    const data = await api(
      `query($id: ID!) { events(filter: { types: ["doc.created", "doc.status_changed"], entity: "sales_orders", entityId: $id }, first: 500) {
        edges { node { id type payload createdAt actor { displayName } } } } }`,
      { id: liveOrder.id },
    );
    const journal = data.events.edges.map(({ node: e }) => ({
      id: e.id,
      type: e.type,
      from: e.payload.from ?? '',
      to: e.payload.to ?? '',
      reason: e.payload.reason ?? '',
      actor: e.actor?.displayName ?? '',
      createdAt: e.createdAt,
    })).reverse();
    const cancel = journal.at(-1);
    const row = page.locator(`table.events tbody tr[data-id="${cancel.id}"]`);
    await row.waitFor();
    const summary = (await row.locator('summary').textContent()).trim();
    await row.locator('td.object button').click();
    await page.waitForSelector('#details[open] table.history tbody tr');
    const history = await page.$$eval('#details table.history tbody tr', (trs) =>
      trs.map((tr) => {
        const td = [...tr.cells].map((c) => c.textContent.trim());
        return { id: tr.dataset.id, from: td[0], to: td[1], reason: td[2], actor: td[3], when: td[4] };
      }),
    );
    const statusShown = await page.$eval('#details dl', (dl) =>
      [...dl.querySelectorAll('dt')].find((dt) => dt.textContent === 'Статус')?.nextElementSibling?.textContent ?? '',
    );
    await page.screenshot({ path: `${screenshotBase}-history.png` });
    result.screenshots.push(`${screenshotBase}-history.png`);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#details').open);
    return { order: liveOrder, reason: CANCEL_REASON, summary, statusShown, history, journal };
  });

  await step('dead delivery', async () => {
    // A webhook that refuses everything (422: permanent) takes the next
    // order.received: its delivery goes dead and the row says so.
    const refuser = createServer((req, res) => {
      res.writeHead(422, { 'Content-Type': 'text/plain' });
      res.end('refused by the browser test');
    });
    await new Promise((r) => refuser.listen(0, '127.0.0.1', r));
    try {
      const { createWebhookSubscriber: hook } = await api(
        `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id name } }`,
        { in: { name: 'e2e-refuser', url: `http://127.0.0.1:${refuser.address().port}/hook`, eventTypes: ['order.received'], maxAttempts: 1 } },
      );
      const order = await receiveShopOrder();
      const want = `sales_orders #${order.id}`;
      // The order's order.received row (its doc.status_changed may be
      // above it) says the delivery is dead.
      const deadOf = (want) => {
        const tr = [...document.querySelectorAll('table.events tbody tr')].slice(0, 3)
          .find((tr) => tr.cells[2].textContent.trim() === want && tr.cells[1].textContent.trim() === 'order.received');
        return tr?.querySelector('ul.deliveries li.dead')?.textContent.trim();
      };
      await page.waitForFunction(deadOf, want);
      const shown = await page.evaluate(deadOf, want);
      // The subscribers panel (refreshed every 10 s) counts the dead letter.
      await page.waitForFunction(
        () => document.querySelector('#subscribers tr[data-subscriber="e2e-refuser"]')?.cells[4].textContent === '1',
        null,
        { timeout: 20000 },
      );
      const lagDead = await page.textContent('#subscribers tr[data-subscriber="e2e-refuser"] td:nth-child(5)');
      await page.screenshot({ path: `${screenshotBase}-dead-delivery.png` });
      result.screenshots.push(`${screenshotBase}-dead-delivery.png`);
      // Later orders are none of its business.
      await api(`mutation($id: ID!) { updateWebhookSubscriber(id: $id, input: { condition: "false" }) { id } }`, { id: hook.id });
      return { order, shown, lagDead };
    } finally {
      refuser.close();
    }
  });

  if (netControl) {
    await step('network drop', async () => {
      await net('down');
      await page.waitForSelector('#live[data-state=down]');
      // Made and processed while the browser is cut off: only the resumed
      // subscription (after: <last cursor>) can bring it.
      const order = await receiveShopOrder();
      const eventIDs = await waitProcessed(order.id);
      await new Promise((r) => setTimeout(r, 500));
      const missingWhileDown = !(await page.$(`table.events tbody tr[data-id="${eventIDs[0]}"]`));
      await net('up');
      const started = Date.now();
      for (const id of eventIDs) await page.waitForSelector(`table.events tbody tr[data-id="${id}"]`);
      await page.waitForSelector('#live[data-state=live]');
      const rows = await tableRows(page);
      const ids = rows.map((r) => r.id);
      return {
        order,
        eventIDs,
        missingWhileDown,
        resumedAfterMs: Date.now() - started,
        duplicates: ids.length - new Set(ids).size,
        newestFirst: ids.every((id, i) => i === 0 || Number(ids[i - 1]) > Number(id)),
      };
    });
  }

  await step('payload', async () => {
    const first = page.locator('table.events tbody tr').first();
    const collapsed = await first.locator('details').evaluate((d) => !d.open);
    await first.locator('summary').click();
    const pre = await first.locator('details pre').textContent();
    const id = await first.getAttribute('data-id');
    const data = await api(`query($id: ID!) { event(id: $id) { payload } }`, { id });
    return { collapsed, expandedMatches: JSON.stringify(JSON.parse(pre)) === JSON.stringify(data.event.payload) };
  });

  await step('filter order.received', async () => {
    await page.selectOption('#filters select[name=type]', 'order.received');
    await page.waitForURL(/[?&]type=order\.received/);
    const want = (await allEvents({ types: ['order.received'] })).map((e) => e.id);
    await page.waitForFunction(
      (n) => document.querySelectorAll('table.events tbody tr').length === n && document.querySelector('#end:not([hidden])'),
      want.length,
    );
    const rows = await tableRows(page);
    // The filter lives in the URL: a reload shows the same rows.
    await page.reload();
    await page.waitForFunction((n) => document.querySelectorAll('table.events tbody tr').length === n, want.length);
    const afterReload = await tableRows(page);
    const selected = await page.$eval('#filters select[name=type]', (s) => s.value);
    await page.screenshot({ path: `${screenshotBase}-order-received.png` });
    result.screenshots.push(`${screenshotBase}-order-received.png`);
    return {
      url: page.url(),
      rowCount: rows.length,
      types: [...new Set(rows.map((r) => r.type))],
      idsMatch: rows.map((r) => r.id).join() === want.join(),
      afterReload: afterReload.map((r) => r.id).join() === want.join(),
      selected,
    };
  });

  await step('open object', async () => {
    const first = page.locator('table.events tbody tr').first();
    const object = (await first.locator('td.object button').textContent()).trim();
    const id = object.split('#')[1];
    await first.locator('td.object button').click();
    await page.waitForSelector('#details[open] .doc-number');
    const shown = (await page.textContent('#details .doc-number')).trim();
    const lines = await page.$$eval('#details table.lines tbody tr', (trs) => trs.length);
    const data = await api(`query($id: ID!) { salesOrder(id: $id) { number lines { sku } } }`, { id });
    await page.screenshot({ path: `${screenshotBase}-details.png` });
    result.screenshots.push(`${screenshotBase}-details.png`);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#details').open);
    return { object, shown, want: data.salesOrder.number, lines, wantLines: data.salesOrder.lines.length };
  });

  await step('unprocessed', async () => {
    // A paused built-in subscriber holds the next order.received (a webhook
    // never holds an event): unprocessed, it is listed under
    // "необработанные" with "—", and leaves that list live once the
    // subscriber resumes and the event is processed.
    const { subscribers } = await api(`{ subscribers { id name } }`);
    const acceptance = subscribers.find((s) => s.name === 'order_acceptance');
    await api(`mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, { id: acceptance.id });
    try {
      const order = await receiveShopOrder();
      // The page lists what the journal holds when it loads: wait until the
      // dispatch has written the held delivery record, so that the row
      // shows what the event waits for.
      for (let tries = 0; ; tries++) {
        const { events } = await api(
          `query($id: ID!) { events(filter: { types: ["order.received"], entity: "sales_orders", entityId: $id }) { edges { node { deliveries { subscriber { name } } } } } }`,
          { id: order.id },
        );
        const held = events.edges.some((e) => e.node.deliveries.some((d) => d.subscriber.name === 'order_acceptance'));
        if (held) break;
        if (tries > 200) throw new Error(`order.received of sales order ${order.id} has no delivery to order_acceptance after 10 s`);
        await new Promise((r) => setTimeout(r, 50));
      }
      await page.selectOption('#filters select[name=type]', '');
      await page.selectOption('#filters select[name=processed]', 'false');
      await page.waitForURL((url) => url.search === '?processed=false');
      const want = `sales_orders #${order.id}`;
      await page.waitForFunction((want) => [...document.querySelectorAll('table.events td.object')].some((td) => td.textContent.trim() === want), want);
      const rows = await tableRows(page);
      const held = rows.find((r) => r.object === want);
      held.waitsFor = (await page.textContent(`table.events tbody tr[data-id="${held.id}"] ul.deliveries li.pending`)).trim();
      await page.screenshot({ path: `${screenshotBase}-unprocessed.png` });
      result.screenshots.push(`${screenshotBase}-unprocessed.png`);
      await api(`mutation($id: ID!) { resumeSubscriber(id: $id) { id } }`, { id: acceptance.id });
      await page.waitForSelector(`table.events tbody tr[data-id="${held.id}"]`, { state: 'detached' });
      return { order, held, rowsWhilePaused: rows.length, allUnprocessed: rows.every((r) => r.processed === '—') };
    } finally {
      await api(`mutation($id: ID!) { resumeSubscriber(id: $id) { id } }`, { id: acceptance.id });
    }
  });

  await step('more', async () => {
    await page.selectOption('#filters select[name=type]', '');
    await page.selectOption('#filters select[name=processed]', '');
    await page.waitForURL((url) => url.search === '');
    const total = (await allEvents()).length;
    await page.waitForSelector('table.events tbody tr');
    const firstPage = (await tableRows(page)).length;
    // Scrolling to the end loads the next pages.
    // The "more" control may hide itself between the check and the scroll
    // (the last page just arrived), so scroll the window, not the control.
    for (let i = 0; i < 40; i++) {
      if (await page.$('#end:not([hidden])')) break;
      await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
      await page.waitForTimeout(200);
    }
    await page.waitForSelector('#end:not([hidden])');
    const ids = (await tableRows(page)).map((r) => r.id);
    return {
      firstPage,
      rowCount: ids.length,
      total,
      duplicates: ids.length - new Set(ids).size,
      newestFirst: ids.every((id, i) => i === 0 || Number(ids[i - 1]) > Number(id)),
    };
  });

  await step('playground query', async () => {
    const query = '{ events(first: 3) { edges { node { id type object } } } }';
    await page.goto(`${baseURL}/playground?query=${encodeURIComponent(query)}`);
    await page.waitForSelector('.graphiql-container .graphiql-query-editor .view-lines', { timeout: EDITOR_LOAD_TIMEOUT });
    await waitEditorText(page, '.graphiql-editor-tool', 'Bearer');
    const headers = await editorText(page, '.graphiql-editor-tool');
    await page.click('.graphiql-execute-button');
    const want = (await allEvents()).slice(0, 3);
    await waitEditorText(page, '.graphiql-response', `"${want[0].id}"`);
    const response = await editorText(page, '.graphiql-response');
    return {
      headerHasToken: headers.includes(`Bearer ${token}`),
      responseHasEvents: want.every((e) => response.includes(`"${e.id}"`) && response.includes(e.type)),
    };
  });

  await step('playground subscription', async () => {
    // Resume after the newest processed event, so the order below is
    // delivered whether the socket opens before or after it is processed.
    const head = await api('{ events(first: 1, filter: { processed: true }) { edges { cursor } } }');
    const query = `subscription { eventProcessed(after: "${head.events.edges[0].cursor}") { id type object processedAt } }`;
    await page.goto(`${baseURL}/playground?query=${encodeURIComponent(query)}`);
    await page.waitForSelector('.graphiql-container .graphiql-query-editor .view-lines', { timeout: EDITOR_LOAD_TIMEOUT });
    await waitEditorText(page, '.graphiql-editor-tool', 'Bearer');
    await page.click('.graphiql-execute-button');
    const order = await receiveShopOrder();
    await waitEditorText(page, '.graphiql-response', `sales_orders #${order.id}`);
    const response = await editorText(page, '.graphiql-response');
    await page.screenshot({ path: `${screenshotBase}-playground.png` });
    result.screenshots.push(`${screenshotBase}-playground.png`);
    const local = await page.evaluate(() => JSON.stringify({ ...localStorage }));
    return { order, responseHasOrder: response.includes(`sales_orders #${order.id}`), tokenInLocalStorage: local.includes(token) };
  });

  result.ok = true;
} catch (err) {
  result.ok = false;
  result.error = String(err?.stack ?? err);
  log(result.error);
} finally {
  await context?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(result)}\n`);
