// End-to-end run of the live feed with the legacy subscriptions-transport-ws
// client (subprotocol graphql-ws). Usage:
// node subscriptions-transport-ws.mjs <graphql url> <token>
import stws from 'subscriptions-transport-ws';
import WebSocket from 'ws';
import { run, SUBSCRIPTION } from './feed.mjs';

const { SubscriptionClient } = stws;

await run('subscriptions-transport-ws', async (url, token) => {
  const client = new SubscriptionClient(
    url,
    { reconnect: false, connectionParams: { Authorization: `Bearer ${token}` } },
    WebSocket,
  );
  // The client hides close codes; the socket it made tells them.
  const closed = new Promise((resolve) => client.client.on('close', (code) => resolve(code)));
  return {
    subscribe(variables, box) {
      const sub = client.request({ query: SUBSCRIPTION, variables }).subscribe({
        next: (r) => (r.errors ? box.fail(JSON.stringify(r.errors)) : box.push(r.data.eventProcessed)),
        error: (e) => box.fail(JSON.stringify(e)),
      });
      return () => sub.unsubscribe();
    },
    close: async () => {
      client.close();
    },
    closed,
  };
});
