#!/usr/bin/env bash
# Builds btk, serves it on a temporary database and runs the graphql-http
# audit suite against it (audit.mjs). Needs node and npm; .ci/run calls it
# only when both are installed. The npm packages are pinned in
# package-lock.json and installed here, never committed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/btk" ./cmd/btk
(cd "$here" && npm ci --no-audit --no-fund --silent)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
password="audit-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
BTK_BOOTSTRAP_EMAIL=audit@localhost BTK_BOOTSTRAP_PASSWORD="$password" \
  "$tmp/btk" serve --addr "127.0.0.1:$port" --db "$tmp/audit.db" >"$tmp/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS --max-time 1 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
BTK_AUDIT_EMAIL=audit@localhost BTK_AUDIT_PASSWORD="$password" \
  timeout 120 node "$here/audit.mjs" "http://127.0.0.1:$port/graphql"
