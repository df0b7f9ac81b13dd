// Validates an AsyncAPI document with the AsyncAPI project's own parser:
// node asyncapi.mjs <url> [token] reads it from url (with the bearer
// token), node asyncapi.mjs - from stdin. Prints the diagnostics as JSON
// and exits 1 when one has severity error (0).
import { Parser } from '@asyncapi/parser';

const [src, token] = process.argv.slice(2);
let doc;
if (!src || src === '-') {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  doc = Buffer.concat(chunks).toString('utf8');
} else {
  const res = await fetch(src, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  if (!res.ok) {
    console.error(`GET ${src}: ${res.status} ${await res.text()}`);
    process.exit(2);
  }
  doc = await res.text();
}
const { document, diagnostics } = await new Parser().parse(doc);
const errors = diagnostics.filter((d) => d.severity === 0);
console.log(JSON.stringify({ parsed: document !== undefined, errors: errors.length, diagnostics }, null, 2));
process.exit(errors.length > 0 || document === undefined ? 1 : 0);
