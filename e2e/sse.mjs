// End-to-end run of the live feed with the graphql-sse client over
// Server-Sent Events, distinct connections mode (one POST with Accept:
// text/event-stream per subscription). Usage: node sse.mjs <graphql url> <token>
import { createClient } from 'graphql-sse';
import { endpoints, run, SUBSCRIPTION } from './feed.mjs';

await run('graphql-sse', async (url, token) => {
  let closedWith;
  const closed = new Promise((resolve) => (closedWith = resolve));
  const client = createClient({
    url: endpoints(url).http,
    headers: { Authorization: `Bearer ${token}` },
    singleConnection: false,
    // A stream the server cuts is resumed by the scenario with after, not
    // retried with the first request's variables.
    retryAttempts: 0,
  });
  return {
    subscribe(variables, box) {
      return client.subscribe(
        { query: SUBSCRIPTION, variables },
        {
          next: (r) => (r.errors ? box.fail(JSON.stringify(r.errors)) : box.push(r.data.eventProcessed)),
          error: (e) => {
            // A refused stream is a response that is not one: its status.
            closedWith(e?.response?.status ?? String(e));
            box.fail(String(e));
          },
          complete: () => {},
        },
      );
    },
    close: () => client.dispose(),
    closed,
  };
});
