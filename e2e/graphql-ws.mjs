// End-to-end run of the live feed with the graphql-ws client (subprotocol
// graphql-transport-ws). Usage: node graphql-ws.mjs <graphql url> <token>
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { run, SUBSCRIPTION } from './feed.mjs';

await run('graphql-ws', async (url, token) => {
  let closedWith;
  const closed = new Promise((resolve) => (closedWith = resolve));
  const client = createClient({
    url,
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${token}` },
    retryAttempts: 0,
    on: { closed: (ev) => closedWith(ev?.code) },
  });
  return {
    subscribe(variables, box) {
      return client.subscribe(
        { query: SUBSCRIPTION, variables },
        {
          next: (r) => (r.errors ? box.fail(JSON.stringify(r.errors)) : box.push(r.data.eventProcessed)),
          error: (e) => box.fail(e?.code ? `closed ${e.code} ${e.reason}` : String(e)),
          complete: () => {},
        },
      );
    },
    close: () => client.dispose(),
    closed,
  };
});
