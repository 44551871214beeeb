#!/usr/bin/env bash
# bench/hotpath.sh — the request hot path of `btk serve`, measured against the
# budgets of docs/design.md#budgets. See bench/README.md for what it prints and the figures.
#
#   bench/hotpath.sh            # from the repository root (or anywhere inside it)
#
# It builds btk into a temporary directory, starts `btk serve` on a fresh
# database on 127.0.0.1 with limits high enough never to answer 429, logs in,
# creates API keys (and a pool of 10,000), starts btk's reverse proxy
# listener, a tiny upstream and a bare httputil.ReverseProxy to it
# (bench/proxybench), then:
#   1. throughput: wrk, 32 connections, 2 threads, ROUNDS rounds, each running
#      in turn for DURATION seconds: GET /healthz; GET /v1/authorize with
#      X-Api-Key; POST /graphql {tenantInfo{id name}} with X-Api-Key; GET
#      through btk's proxy with X-Api-Key; GET through the bare proxy; and for
#      KEYS_DURATION seconds the GraphQL query with one key, then with a key
#      drawn at random from 10,000 per request. Prints requests/s, p50, p99
#      and server CPU per request of each run, then the ratios against the
#      targets: authorize/healthz >= 0.85, graphql/healthz >= 0.6,
#      proxy/bare >= 0.85 (req/s), and 10,000 keys / one key <= 1.2 (server
#      CPU per request, the usage flush included);
#   2. latency: vegeta v12.13.0 at a constant RATE req/s for LAT_DURATION
#      seconds against the authenticated query; prints p50, p99 (target
#      p99 < 5 ms).
# The server is stopped on exit, whatever happens. All traffic stays on
# 127.0.0.1.
#
# Needs: go, curl, jq, wrk (installed with apt-get when missing and running as
# root), and network access to the Go module proxy for vegeta (built once into
# the temporary directory; set VEGETA=/path/to/vegeta to use another binary).
#
# Environment knobs (defaults in brackets):
#   ROUNDS [3] DURATION [10] CONNECTIONS [32] THREADS [2]
#   KEYS_DURATION [30]  POOL [10000] (keys of the spread run)
#   COOLDOWN [32]  seconds of idle after each spread run (see bench/README.md)
#   RATE [10000] LAT_DURATION [10] (0: no latency part)
#   PIN [0]    1: pin the server to CPU 0 and wrk/vegeta to CPU 1 (taskset)
#   PORT [18080]  (btk; the proxy listener is PORT+1, the upstream PORT+10,
#                  the bare proxy PORT+11)
#   SERVER_GOGC  GOGC for the server only (default: Go's default, 100)
#   SCOPED [1]  1: the keys of the runs hold a scope and btk serve runs with
#               an --access-rules file of RULES [10] rules (docs/access.md);
#               /v1/authorize is asked with X-Forwarded-Method / -Uri, so the
#               authorize run pays for the rules. 0: unscoped keys, no rules.
#   BTK_BIN      a btk binary to measure instead of building this checkout
#
# Each run also prints the server's CPU time per request (srv-us/req, from
# /proc: less sensitive than req/s to the machine's other load), how many
# CPUs other processes of this machine kept busy meanwhile (other-cpu) and
# how many the hypervisor took away for other machines (steal, from
# /proc/stat): a run with either well above 0 was disturbed.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
RATE=${RATE:-10000}
LAT_DURATION=${LAT_DURATION:-10}
KEYS_DURATION=${KEYS_DURATION:-30}
POOL=${POOL:-10000}
COOLDOWN=${COOLDOWN:-32}
PIN=${PIN:-0}
PORT=${PORT:-18080}
SERVER_GOGC=${SERVER_GOGC:-}
SCOPED=${SCOPED:-1}
RULES=${RULES:-10}
BASE="http://127.0.0.1:${PORT}"
PROXY="http://127.0.0.1:$((PORT + 1))"
UPSTREAM="http://127.0.0.1:$((PORT + 10))"
BARE="http://127.0.0.1:$((PORT + 11))"
EMAIL="bench@example.com"
PASSWORD="bench-password-not-secret"

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/btk-bench.XXXXXX")
server_pid="" upstream_pid="" bare_pid=""

stop_pid() {
	local pid=$1
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
}
cleanup() {
	stop_pid "$server_pid"
	stop_pid "$bare_pid"
	stop_pid "$upstream_pid"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "hotpath.sh: $*" >&2; exit 1; }

for tool in go curl jq; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
if ! command -v wrk >/dev/null; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "# installing wrk from Debian (apt-get install -y wrk)" >&2
		apt-get update -qq >/dev/null && apt-get install -y -qq wrk >/dev/null
	fi
	command -v wrk >/dev/null || die "wrk is required (apt-get install wrk)"
fi

server_cpu=() load_cpu=()
if [[ "$PIN" == 1 ]]; then
	command -v taskset >/dev/null || die "PIN=1 needs taskset"
	server_cpu=(taskset -c 0) load_cpu=(taskset -c 1)
fi

echo "# building btk, proxybench and vegeta" >&2
if [[ -n "${BTK_BIN:-}" ]]; then
	cp "$BTK_BIN" "$work/btk"
else
	(cd "$repo" && go build -o "$work/btk" ./cmd/btk)
fi
(cd "$repo" && go build -o "$work/proxybench" ./bench/proxybench)
vegeta=${VEGETA:-}
if [[ -z "$vegeta" && "$LAT_DURATION" != 0 ]]; then
	# A throwaway module pinning vegeta v12.13.0 (`go run pkg@version` would
	# also work where the proxy answers the module's version list).
	mkdir -p "$work/vegeta"
	cat >"$work/vegeta/go.mod" <<-'EOF'
		module btkbench/vegeta

		go 1.22

		require github.com/tsenart/vegeta/v12 v12.13.0
	EOF
	printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/tsenart/vegeta/v12"\n' >"$work/vegeta/tools.go"
	(cd "$work/vegeta" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 && go build -o "$work/vegeta-bin" github.com/tsenart/vegeta/v12) ||
		die "could not build vegeta v12.13.0 (module proxy unreachable?)"
	vegeta="$work/vegeta-bin"
fi

wait_ready() { # wait_ready URL PID NAME
	for _ in $(seq 100); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || { cat "$work/server.log" >&2; die "$3 exited"; }
		sleep 0.1
	done
	die "$3 not ready after 10 s"
}

echo "# starting the upstream, the bare proxy and btk serve on ${BASE} (proxy ${PROXY})" >&2
"${server_cpu[@]}" "$work/proxybench" -upstream "127.0.0.1:$((PORT + 10))" >"$work/upstream.log" 2>&1 &
upstream_pid=$!
"${server_cpu[@]}" "$work/proxybench" -bare "127.0.0.1:$((PORT + 11))" -to "$UPSTREAM" >"$work/bare.log" 2>&1 &
bare_pid=$!
server_env=(BTK_BOOTSTRAP_EMAIL="$EMAIL" BTK_BOOTSTRAP_PASSWORD="$PASSWORD")
rules_flag=()
key_scopes=""
if [[ "$SCOPED" == 1 ]]; then
	# RULES rules in the shapes operators write; the benchmark's requests
	# match the last two, so a scan would try every rule first.
	{
		echo "rules:"
		for ((i = 0; i < RULES - 2; i++)); do
			printf '  - path: /svc%d/items/*/**\n    methods: [GET]\n    scopes: [svc%d:read]\n' "$i" "$i"
		done
		printf '  - path: /orders/*/lines/**\n    scopes: [orders:read]\n'
		printf '  - path: /\n    scopes: [orders:read]\n'
	} >"$work/rules.yaml"
	rules_flag=(--access-rules "$work/rules.yaml")
	key_scopes=',scopes:["orders:read"]'
fi
[[ -n "$SERVER_GOGC" ]] && server_env+=(GOGC="$SERVER_GOGC")
env "${server_env[@]}" "${server_cpu[@]}" "$work/btk" serve --addr "127.0.0.1:${PORT}" --db "$work/btk.db" \
	--proxy-addr "127.0.0.1:$((PORT + 1))" --upstream "$UPSTREAM" \
	--rate-per-minute 1000000 --rate-per-day 100000000 --log-level warn "${rules_flag[@]}" \
	>"$work/server.log" 2>&1 &
server_pid=$!
wait_ready "$UPSTREAM/" "$upstream_pid" "the upstream"
wait_ready "$BARE/" "$bare_pid" "the bare proxy"
wait_ready "$BASE/readyz" "$server_pid" "btk serve"

gql() { # gql TOKEN_OR_EMPTY QUERY VARIABLES_JSON
	local auth=()
	[[ -n "$1" ]] && auth=(-H "Authorization: Bearer $1")
	jq -nc --arg q "$2" --argjson v "$3" '{query:$q,variables:$v}' |
		curl -fsS "$BASE/graphql" -H 'Content-Type: application/json' "${auth[@]}" --data-binary @-
}

token=$(gql "" 'mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}' \
	"$(jq -nc --arg e "$EMAIL" --arg p "$PASSWORD" '{e:$e,p:$p}')" | jq -er '.data.login.accessToken') ||
	die "login failed"
# The keys are made impersonating the workspace: a platform admin's changes
# from outside it spend none of its change budget (600 a minute,
# docs/security.md#what-a-client-can-make-the-server-hold), which thousands
# of keys would wait for.
ws=$(gql "$token" '{tenantInfo{id}}' '{}' | jq -er '.data.tenantInfo.id') || die "tenantInfo failed"
token=$(gql "$token" 'mutation($w:ID!){impersonate(workspaceId:$w){accessToken}}' "$(jq -nc --arg w "$ws" '{w:$w}')" |
	jq -er '.data.impersonate.accessToken') || die "impersonate failed"

# make_keys PREFIX N FILE: N new keys, one plaintext a line, 10 per request
# (an operation makes at most 10 mutations, docs/design.md#graphql).
make_keys() {
	local prefix=$1 n=$2 file=$3 i j doc
	: >"$file"
	for ((i = 0; i < n; i += 10)); do
		doc="mutation{"
		for ((j = i; j < n && j < i + 10; j++)); do
			doc+="k$j:createApiKey(input:{name:\"$prefix-$j\"$key_scopes}){plaintextKey} "
		done
		doc+="}"
		gql "$token" "$doc" '{}' | jq -er '.data | to_entries[] | .value.plaintextKey' >>"$file" ||
			die "createApiKey failed"
	done
}

# One key per wrk thread, round and key-checked target, and one for vegeta:
# each stays far below its own limits (1,000,000/min with a burst of as many).
echo "# creating keys (and a pool of $POOL)" >&2
per_target=$((ROUNDS * THREADS))
targets_with_key=(authorize graphql proxy)
make_keys bench $((per_target * ${#targets_with_key[@]} + ROUNDS + 1)) "$work/keys.txt"
mapfile -t keys <"$work/keys.txt"
nkeys=${#keys[@]}
make_keys pool "$POOL" "$work/pool.txt"

body='{"query":"{tenantInfo{id name}}"}'
check=$(curl -fsS "$BASE/graphql" -H 'Content-Type: application/json' -H "X-Api-Key: ${keys[0]}" --data-binary "$body")
jq -e '.data.tenantInfo.id' <<<"$check" >/dev/null || die "probe failed: $check"
hdrs=$(curl -fsS -D - -o /dev/null "$BASE/v1/authorize" -H "X-Api-Key: ${keys[0]}" \
	-H "X-Forwarded-Method: GET" -H "X-Forwarded-Uri: /orders/42/lines/7")
grep -qi '^x-tenant-id:' <<<"$hdrs" || die "authorize probe failed: $hdrs"
[[ $(curl -fsS "$PROXY/" -H "X-Api-Key: ${keys[0]}") == ok ]] || die "proxy probe failed"
[[ $(curl -fsS "$BARE/") == ok ]] || die "bare proxy probe failed"

# fixed.lua: each thread takes its own key (setup runs in the main Lua state,
# init in the thread's, before the request is formatted); WRK_METHOD and
# WRK_BODY say what to send.
cat >"$work/fixed.lua" <<EOF
local keys = {$(printf '"%s",' "${keys[@]}")}
local base = tonumber(os.getenv("KEYBASE") or "0")
local n = 0
function setup(thread)
  n = n + 1
  thread:set("apikey", keys[base + n])
end
function init(args)
  wrk.method = os.getenv("WRK_METHOD") or "GET"
  local body = os.getenv("WRK_BODY") or ""
  if body ~= "" then
    wrk.body = body
    wrk.headers["Content-Type"] = "application/json"
  end
  wrk.headers["X-Api-Key"] = apikey
  -- The original request, as a forward-auth gateway names it (read by
  -- /v1/authorize's access rules; ignored elsewhere).
  wrk.headers["X-Forwarded-Method"] = "GET"
  wrk.headers["X-Forwarded-Uri"] = "/orders/42/lines/7"
end
EOF
# pool.lua: the GraphQL query, each request with a key drawn at random from
# KEYFILE (one key for the one-key run: the same work for wrk either way).
cat >"$work/pool.lua" <<EOF
local keys = {}
local n = 0
function setup(thread)
  n = n + 1
  thread:set("id", n)
end
function init(args)
  for line in io.lines(os.getenv("KEYFILE")) do keys[#keys + 1] = line end
  math.randomseed(os.time() + id * 7919)
end
local headers = {["Content-Type"] = "application/json"}
function request()
  headers["X-Api-Key"] = keys[math.random(#keys)]
  return wrk.format("POST", "/graphql", headers, '$body')
end
EOF

# CPU accounting from /proc, in clock ticks.
hz=$(getconf CLK_TCK)
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }

# measured PID CMD... -> runs CMD (stdout kept in $work/out); sets srv_us (CPU
# µs of process PID, total), other_cpu (CPUs other processes of this machine
# used, on average) and steal (CPUs the hypervisor gave to other machines).
measured() {
	local pid=$1 s0 b0 s1 b1 t0 t1 st0 st1 times
	shift
	s0=$(proc_ticks "$pid") b0=$(busy_ticks) st0=$(steal_ticks) t0=$(date +%s.%N)
	times=$( { TIMEFORMAT='%U %S'; time "$@" >"$work/out"; } 2>&1 )
	s1=$(proc_ticks "$pid") b1=$(busy_ticks) st1=$(steal_ticks) t1=$(date +%s.%N)
	steal=$(awk -v a="$st0" -v b="$st1" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.2f", (b - a) / hz / (t1 - t0)}')
	srv_us=$(awk -v a="$s0" -v b="$s1" -v hz="$hz" 'BEGIN {print (b - a) * 1e6 / hz}')
	other_cpu=$(awk -v s="$((s1 - s0))" -v b="$((b1 - b0))" -v hz="$hz" -v t="$times" -v t0="$t0" -v t1="$t1" \
		'BEGIN {split(t, c, " "); o = (b - s) / hz - c[1] - c[2]; if (o < 0) o = 0; printf "%.2f", o / (t1 - t0)}')
}

# run_wrk NAME PID SECONDS URL [SCRIPT] -> "name rps p50_ms p99_ms non2xx srv_us_per_req other_cpu steal"
# (the proxies' CPU is that of the proxy process alone, not the upstream's).
run_wrk() {
	local args=(-t "$THREADS" -c "$CONNECTIONS" -d "${3}s" --latency)
	[[ -n "${5:-}" ]] && args+=(-s "$5")
	measured "$2" "${load_cpu[@]}" wrk "${args[@]}" "$4"
	cat "$work/out" >>"$work/wrk.log"
	awk -v name="$1" -v srv="$srv_us" -v other="$other_cpu" -v steal="$steal" '
		function ms(v) {
			if (v ~ /us$/) return substr(v, 1, length(v)-2) / 1000
			if (v ~ /ms$/) return substr(v, 1, length(v)-2) + 0
			if (v ~ /s$/)  return substr(v, 1, length(v)-1) * 1000
			return v
		}
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/requests in/ { n = $1 }
		/^Requests\/sec:/ { rps = $2 }
		/Non-2xx or 3xx responses:/ { bad = $NF }
		/Socket errors:/ { bad = bad "+sock" }
		END { printf "%s %.0f %.3f %.3f %s %.1f %s %s\n", name, rps, p50, p99, (bad == "" ? 0 : bad), srv / n, other, steal }
	' "$work/out"
}

# run_target NAME ROUND -> one line of run_wrk
run_target() {
	local kb=$(( ($2 - 1) * THREADS ))
	case $1 in
	healthz) run_wrk healthz "$server_pid" "$DURATION" "$BASE/healthz" ;;
	authorize) KEYBASE=$kb WRK_METHOD=GET run_wrk authorize "$server_pid" "$DURATION" "$BASE/v1/authorize" "$work/fixed.lua" ;;
	graphql) KEYBASE=$((per_target + kb)) WRK_METHOD=POST WRK_BODY="$body" run_wrk graphql "$server_pid" "$DURATION" "$BASE/graphql" "$work/fixed.lua" ;;
	proxy) KEYBASE=$((2 * per_target + kb)) WRK_METHOD=GET run_wrk proxy "$server_pid" "$DURATION" "$PROXY/" "$work/fixed.lua" ;;
	bare) run_wrk bare "$bare_pid" "$DURATION" "$BARE/" ;;
	key1)
		# A fresh key each round, so that no round runs into its limit.
		printf '%s\n' "${keys[$((3 * per_target + $2 - 1))]}" >"$work/one.txt"
		KEYFILE="$work/one.txt" run_wrk key1 "$server_pid" "$KEYS_DURATION" "$BASE" "$work/pool.lua" ;;
	keys) KEYFILE="$work/pool.txt" run_wrk "keys$POOL" "$server_pid" "$KEYS_DURATION" "$BASE" "$work/pool.lua" ;;
	esac
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo
echo "btk hot path: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(go version | cut -d' ' -f3), pin=$PIN, server GOGC=${SERVER_GOGC:-default}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrk: ${THREADS} threads, ${CONNECTIONS} connections, ${DURATION}s per run (${KEYS_DURATION}s for key1 and keys${POOL}), ${ROUNDS} rounds"
printf '%-6s %-10s %10s %9s %9s %7s %12s %9s %6s\n' round target "req/s" "p50 ms" "p99 ms" "non-2xx" "srv-us/req" "other-cpu" "steal"
# Warm up every path (connection setup, caches, GC sizing); the pool's keys
# are looked up once here, and their first-use writes are left to happen
# before the first spread run is measured (COOLDOWN).
wrk -t 1 -c 4 -d 1s "$BASE/healthz" >/dev/null
KEYBASE=0 WRK_METHOD=GET wrk -t 1 -c 4 -d 1s -s "$work/fixed.lua" "$BASE/v1/authorize" >/dev/null
KEYBASE=0 WRK_METHOD=POST WRK_BODY="$body" wrk -t 1 -c 4 -d 1s -s "$work/fixed.lua" "$BASE/graphql" >/dev/null
KEYBASE=0 WRK_METHOD=GET wrk -t 1 -c 4 -d 1s -s "$work/fixed.lua" "$PROXY/" >/dev/null
wrk -t 1 -c 4 -d 1s "$BARE/" >/dev/null
KEYFILE="$work/pool.txt" wrk -t "$THREADS" -c "$CONNECTIONS" -d 5s -s "$work/pool.lua" "$BASE" >/dev/null
sleep "$COOLDOWN"
results=()
for r in $(seq "$ROUNDS"); do
	for target in healthz authorize graphql proxy bare key1 keys; do
		line=$(run_target "$target" "$r")
		read -r name rps p50 p99 bad srv other st <<<"$line"
		printf '%-6s %-10s %10s %9s %9s %7s %12s %9s %6s\n' "$r" "$name" "$rps" "$p50" "$p99" "$bad" "$srv" "$other" "$st"
		results+=("$line")
		[[ "$bad" == 0 ]] || echo "  warning: $bad non-2xx responses or socket errors in this run" >&2
	done
	# A key used in the spread run is written at its first use in the run
	# and then at most every 30 s: a run of 30 s carries one write per key,
	# the steady rate. Let the writes due just after it happen unmeasured,
	# not in the next round's runs.
	sleep "$COOLDOWN"
done
col() { printf '%s\n' "${results[@]}" | awk -v n="$1" -v c="$2" '$1==n {print $c}' | median; }
echo
printf '%-10s %10s %9s %9s %12s\n' median "req/s" "p50 ms" "p99 ms" "srv-us/req"
for t in healthz authorize graphql proxy bare key1 "keys$POOL"; do
	printf '%-10s %10s %9s %9s %12s\n' "$t" "$(col "$t" 2)" "$(col "$t" 3)" "$(col "$t" 4)" "$(col "$t" 6)"
done
# verdict RATIO OP TARGET
verdict() { awk -v r="$1" -v op="$2" -v t="$3" 'BEGIN {ok = (op == ">=" ? r >= t : r <= t); print (ok ? "met" : "MISSED")}'; }
# paired NUM DEN COL: median over the rounds of NUM/DEN, each run against the
# DEN run of the same round.
paired() {
	printf '%s\n' "${results[@]}" | awk -v a="$1" -v b="$2" -v c="$3" '
		$1 == b { den[int((NR - 1) / 7)] = $c }
		$1 == a { num[int((NR - 1) / 7)] = $c }
		END {
			for (i in num) r[++k] = num[i] / den[i]
			for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
			printf "%.3f", (k % 2 ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2)
		}'
}
ratio_line() { # LABEL NUM DEN COL OP TARGET
	local m p
	m=$(awk -v a="$(col "$2" "$4")" -v b="$(col "$3" "$4")" 'BEGIN {printf "%.3f", a / b}')
	p=$(paired "$2" "$3" "$4")
	printf '%-44s %7s (paired per round %s)  target %s %s: %s\n' "$1" "$m" "$p" "$5" "$6" "$(verdict "$m" "$5" "$6")"
}
echo
ratio_line "throughput authorize / healthz" authorize healthz 2 ">=" 0.85
ratio_line "throughput graphql / healthz" graphql healthz 2 ">=" 0.6
ratio_line "throughput proxy / bare proxy" proxy bare 2 ">=" 0.85
ratio_line "server CPU per request, keys$POOL / key1" "keys$POOL" key1 6 "<=" 1.2
echo "server CPU per request: authorize/healthz $(awk -v a="$(col authorize 6)" -v b="$(col healthz 6)" 'BEGIN {printf "%.2f", a / b}')x, graphql/healthz $(awk -v a="$(col graphql 6)" -v b="$(col healthz 6)" 'BEGIN {printf "%.2f", a / b}')x, proxy/bare $(awk -v a="$(col proxy 6)" -v b="$(col bare 6)" 'BEGIN {printf "%.2f", a / b}')x"

[[ "$LAT_DURATION" == 0 ]] && exit 0
echo
echo "latency at a constant ${RATE} req/s for ${LAT_DURATION}s (vegeta v12.13.0; /healthz first, as the floor)"
printf '%s' "$body" >"$work/body.json"
printf 'GET %s/healthz\n' "$BASE" >"$work/targets-healthz.txt"
printf 'POST %s/graphql\nContent-Type: application/json\nX-Api-Key: %s\n@%s\n' \
	"$BASE" "${keys[$((nkeys - 1))]}" "$work/body.json" >"$work/targets-graphql.txt"
for target in healthz graphql; do
	# A short warm-up at the same rate, then the measured attack.
	"${load_cpu[@]}" "$vegeta" attack -rate="$RATE" -duration=2s -targets="$work/targets-$target.txt" >/dev/null
	measured "$server_pid" "${load_cpu[@]}" "$vegeta" attack -rate="$RATE" -duration="${LAT_DURATION}s" -targets="$work/targets-$target.txt"
	"$vegeta" report -type=json <"$work/out" >"$work/report-$target.json"
	jq -r --arg t "$target" --arg other "$other_cpu" --arg steal "$steal" '"\($t): requests \(.requests), achieved \(.throughput | floor) req/s, success \(.success * 100)%, " +
		"p50 \(.latencies["50th"] / 1e6 * 1000 | round / 1000) ms, p90 \(.latencies["90th"] / 1e6 * 1000 | round / 1000) ms, " +
		"p99 \(.latencies["99th"] / 1e6 * 1000 | round / 1000) ms, max \(.latencies.max / 1e6 * 1000 | round / 1000) ms, other-cpu \($other), steal \($steal)"' \
		"$work/report-$target.json"
	jq -e --argjson rate "$RATE" '.throughput >= 0.95 * $rate' "$work/report-$target.json" >/dev/null ||
		echo "  ($target: the attack fell behind its rate; the machine was too busy for this figure to mean much)"
done
p99=$(jq -r '.latencies["99th"] / 1e6' "$work/report-graphql.json")
verdict=$(awk -v p="$p99" 'BEGIN {print (p < 5 ? "met" : "MISSED")}')
echo "graphql p99 at ${RATE} req/s: ${p99} ms (target < 5 ms: $verdict)"
