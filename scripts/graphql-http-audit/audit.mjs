// Runs the graphql-http audit suite (https://github.com/graphql/graphql-http)
// against a running btk server and fails on any MUST failure (ERROR) or
// SHOULD warning (WARN); MAY notices are printed only (btk serves GraphQL
// over POST alone, so the GET notices stay).
//
// Usage: BTK_AUDIT_EMAIL=... BTK_AUDIT_PASSWORD=... node audit.mjs http://127.0.0.1:8080/graphql
//
// The suite introspects (__type), which btk allows logged-in users only:
// the script logs in with the given account and sends its bearer token.
// .ci/run starts a server and runs this when node is installed; go test
// never needs node.
import { auditServer } from 'graphql-http';

const url = process.argv[2];
if (!url) {
  console.error('usage: node audit.mjs URL');
  process.exit(2);
}
const login = await fetch(url, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    query: 'mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}',
    variables: { e: process.env.BTK_AUDIT_EMAIL, p: process.env.BTK_AUDIT_PASSWORD },
  }),
});
const session = await login.json();
const token = session?.data?.login?.accessToken;
if (!token) {
  console.error('login failed:', JSON.stringify(session));
  process.exit(1);
}
const fetchFn = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const results = await auditServer({ url, fetchFn });
let bad = 0;
for (const r of results) {
  if (r.status === 'ok') continue;
  if (r.status !== 'notice') bad++;
  const body = r.response ? await r.response.text().catch(() => '') : '';
  console.log(`${r.status.toUpperCase()} ${r.id} ${r.name}: ${r.reason}` + (body ? `\n    body: ${body.slice(0, 300)}` : ''));
}
console.log(`graphql-http ${results.length} checks: ${bad} MUST failures or SHOULD warnings`);
process.exit(bad === 0 ? 0 : 1);
