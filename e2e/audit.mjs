// Runs the GraphQL-over-HTTP audits of the graphql-http package
// (serverAudits) against a running server and prints one JSON line:
// {"total": N, "results": [{"id", "name", "status", "reason"}]} with every
// audit that did not pass ("warn" or "error").
//
// Usage: node audit.mjs <graphql url> <token>
import { serverAudits } from 'graphql-http';

const [url, token] = process.argv.slice(2);
const audits = serverAudits({
  url,
  fetchFn: (input, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('Authorization', `Bearer ${token}`);
    return fetch(input, { ...init, headers });
  },
});
const results = [];
for (const audit of audits) {
  const r = await audit.fn();
  if (r.status !== 'ok') {
    results.push({ id: audit.id, name: audit.name, status: r.status, reason: r.reason });
  }
}
console.log(JSON.stringify({ total: audits.length, results }));
