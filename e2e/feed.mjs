// The scenario both client scripts run against a live server: subscribe
// with a cursor, receive what mutations produce, lose the connection,
// resume with the last cursor, and check that a bad token is refused.
// It prints one JSON object on stdout (the Go test TestE2E* reads it) and
// exits 1 with {"error": …} when something does not happen in time.

const FILTER = { types: ['doc.created'], entity: 'sales_orders' };
const SUBSCRIPTION = `subscription($filter: EventFilter, $after: String) {
  eventProcessed(filter: $filter, after: $after) { id type entityId cursor payload }
}`;
const TIMEOUT_MS = 15000;

/** endpoints derives the HTTP and websocket URLs from either form. */
export function endpoints(url) {
  const u = new URL(url);
  const secure = u.protocol === 'https:' || u.protocol === 'wss:';
  const path = u.pathname === '/' ? '/graphql' : u.pathname;
  return {
    http: `${secure ? 'https' : 'http'}://${u.host}${path}`,
    ws: `${secure ? 'wss' : 'ws'}://${u.host}${path}`,
  };
}

/** gql posts one GraphQL request and returns its data, throwing on errors. */
async function gql(httpURL, token, query, variables) {
  const res = await fetch(httpURL, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  if (body.errors?.length) throw new Error(`${query.split('(')[0]}: ${body.errors[0].message}`);
  return body.data;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * inbox collects the events of one subscription; take(n) waits for n more.
 */
function inbox() {
  const events = [];
  let waiter = null;
  let failure = null;
  return {
    push(ev) {
      events.push(ev);
      waiter?.();
    },
    fail(err) {
      failure = err;
      waiter?.();
    },
    async take(n, what) {
      const deadline = Date.now() + TIMEOUT_MS;
      while (events.length < n) {
        if (failure) throw new Error(`${what}: ${failure}`);
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`${what}: got ${events.length} of ${n} events in ${TIMEOUT_MS} ms`);
        await new Promise((r) => {
          waiter = r;
          setTimeout(r, left);
        });
        waiter = null;
      }
      return events.splice(0, n);
    },
    size: () => events.length,
  };
}

/**
 * run drives the scenario with a client adapter:
 *   connect(wsURL, token) -> { subscribe(variables, box) -> stop(), close(), closed: Promise<code> }
 */
export async function run(name, connect) {
  const [url, token] = process.argv.slice(2);
  if (!url || !token) {
    console.error(`usage: node ${name}.mjs <graphql url> <token>`);
    process.exit(2);
  }
  const ep = endpoints(url);
  const out = { client: name };
  try {
    const sku = `E2E-${name}-${Date.now()}`;
    await gql(ep.http, token, `mutation($in: ItemInput!) { createItem(input: $in) { id } }`,
      { in: { sku, name: 'Стол e2e', unit: 'шт' } });
    const order = async (customer) => {
      const d = await gql(ep.http, token,
        `mutation($in: SalesOrderInput!) { createSalesOrder(input: $in) { id number } }`,
        { in: { customer, lines: [{ sku, quantity: '1' }] } });
      return d.createSalesOrder.id;
    };

    // A processed event to start from: then nothing is missed, however
    // long the subscription takes to start.
    const first = await order(`${name} старт`);
    let start = null;
    for (const deadline = Date.now() + TIMEOUT_MS; !start && Date.now() < deadline; await sleep(50)) {
      const d = await gql(ep.http, token,
        `query($f: EventFilter) { events(filter: $f, first: 5) { edges { node { entityId cursor } } } }`,
        { f: { ...FILTER, processed: true } });
      start = d.events.edges.find((e) => e.node.entityId === first)?.node.cursor ?? null;
    }
    if (!start) throw new Error('the first order was not processed in time');
    out.startCursor = start;

    // 1. Subscribe after it and receive what five mutations produce.
    let conn = await connect(ep.ws, token);
    let box = inbox();
    conn.subscribe({ filter: FILTER, after: start }, box);
    out.liveOrders = [];
    for (let i = 0; i < 5; i++) out.liveOrders.push(await order(`${name} ${i}`));
    out.live = await box.take(5, 'live');

    // 2. The connection goes; three orders are made meanwhile.
    await conn.close();
    out.offlineOrders = [];
    for (let i = 0; i < 3; i++) out.offlineOrders.push(await order(`${name} offline ${i}`));

    // 3. Resume with the last cursor: the three, then live again.
    conn = await connect(ep.ws, token);
    box = inbox();
    conn.subscribe({ filter: FILTER, after: out.live.at(-1).cursor }, box);
    out.resumed = await box.take(3, 'resumed');
    out.afterResumeOrders = [await order(`${name} после`)];
    out.afterResume = await box.take(1, 'live after resume');
    await sleep(300);
    out.extra = box.size();
    await conn.close();

    // 4. A bad token is refused.
    const bad = await connect(ep.ws, 'erp_wrong');
    bad.subscribe({ filter: FILTER }, inbox());
    out.badTokenClose = await Promise.race([bad.closed, sleep(TIMEOUT_MS).then(() => 'timeout')]);
    await bad.close();
  } catch (err) {
    out.error = String(err?.stack ?? err);
    console.log(JSON.stringify(out));
    process.exit(1);
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

export { SUBSCRIPTION };
