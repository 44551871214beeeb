#!/usr/bin/env bash
# bench/hotpath.sh — the request hot path of `btk serve`, measured (issue 4,
# DESIGN §8). See bench/README.md for what it prints and the figures.
#
#   bench/hotpath.sh            # from the repository root (or anywhere inside it)
#
# It builds btk into a temporary directory, starts `btk serve` on a fresh
# database on 127.0.0.1 with limits high enough never to answer 429, logs in,
# creates API keys, then:
#   1. throughput: wrk, 32 connections, 2 threads, ROUNDS rounds of DURATION
#      seconds alternating GET /healthz and POST /graphql {tenantInfo{id name}}
#      with X-Api-Key; prints requests/s, p50, p99 of each round, the medians
#      and the ratio graphql/healthz (target >= 0.5);
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
#   RATE [10000] LAT_DURATION [10]
#   PIN [0]    1: pin the server to CPU 0 and wrk/vegeta to CPU 1 (taskset)
#   PORT [18080]
#   SERVER_GOGC  GOGC for the server only (default: Go's default, 100)
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
PIN=${PIN:-0}
PORT=${PORT:-18080}
SERVER_GOGC=${SERVER_GOGC:-}
BASE="http://127.0.0.1:${PORT}"
EMAIL="bench@example.com"
PASSWORD="bench-password-not-secret"

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/btk-bench.XXXXXX")
server_pid=""

cleanup() {
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$server_pid" 2>/dev/null || true
	fi
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

echo "# building btk and vegeta" >&2
if [[ -n "${BTK_BIN:-}" ]]; then
	cp "$BTK_BIN" "$work/btk"
else
	(cd "$repo" && go build -o "$work/btk" ./cmd/btk)
fi
vegeta=${VEGETA:-}
if [[ -z "$vegeta" ]]; then
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

echo "# starting btk serve on ${BASE}" >&2
server_env=(BTK_BOOTSTRAP_EMAIL="$EMAIL" BTK_BOOTSTRAP_PASSWORD="$PASSWORD")
[[ -n "$SERVER_GOGC" ]] && server_env+=(GOGC="$SERVER_GOGC")
env "${server_env[@]}" "${server_cpu[@]}" "$work/btk" serve --addr "127.0.0.1:${PORT}" --db "$work/btk.db" \
	--rate-per-minute 1000000 --rate-per-day 100000000 --log-level warn \
	>"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
	curl -fsS "$BASE/readyz" >/dev/null 2>&1 && break
	kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; die "btk serve exited"; }
	sleep 0.1
done
curl -fsS "$BASE/readyz" >/dev/null || die "btk serve not ready after 10 s"

gql() { # gql TOKEN_OR_EMPTY QUERY VARIABLES_JSON
	local auth=()
	[[ -n "$1" ]] && auth=(-H "Authorization: Bearer $1")
	jq -nc --arg q "$2" --argjson v "$3" '{query:$q,variables:$v}' |
		curl -fsS "$BASE/graphql" -H 'Content-Type: application/json' "${auth[@]}" --data-binary @-
}

token=$(gql "" 'mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}' \
	"$(jq -nc --arg e "$EMAIL" --arg p "$PASSWORD" '{e:$e,p:$p}')" | jq -er '.data.login.accessToken') ||
	die "login failed"

# One key per wrk thread and round, and one for vegeta: each stays far below
# its own limits (1,000,000/min with a burst of as many).
nkeys=$((ROUNDS * THREADS + 1))
keys=()
for i in $(seq "$nkeys"); do
	k=$(gql "$token" 'mutation($n:String!){createApiKey(input:{name:$n}){plaintextKey}}' \
		"$(jq -nc --arg n "bench-$i" '{n:$n}')" | jq -er '.data.createApiKey.plaintextKey') ||
		die "createApiKey failed"
	keys+=("$k")
done

body='{"query":"{tenantInfo{id name}}"}'
check=$(curl -fsS "$BASE/graphql" -H 'Content-Type: application/json' -H "X-Api-Key: ${keys[0]}" --data-binary "$body")
jq -e '.data.tenantInfo.id' <<<"$check" >/dev/null || die "probe failed: $check"

# wrk script: POST the probe; each thread takes its own key (setup runs in
# the main Lua state, init in the thread's, before the request is formatted).
cat >"$work/graphql.lua" <<EOF
local keys = {$(printf '"%s",' "${keys[@]}")}
local base = tonumber(os.getenv("KEYBASE") or "0")
local n = 0
function setup(thread)
  n = n + 1
  thread:set("apikey", keys[base + n])
end
function init(args)
  wrk.method = "POST"
  wrk.body = '$body'
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["X-Api-Key"] = apikey
end
EOF

# CPU accounting from /proc, in clock ticks.
hz=$(getconf CLK_TCK)
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }

# measured CMD... -> runs CMD (stdout kept in $work/out); sets srv_us (server
# CPU µs, total), other_cpu (CPUs other processes of this machine used, on
# average) and steal (CPUs the hypervisor gave to other machines).
measured() {
	local s0 b0 s1 b1 t0 t1 st0 st1 times
	s0=$(proc_ticks "$server_pid") b0=$(busy_ticks) st0=$(steal_ticks) t0=$(date +%s.%N)
	times=$( { TIMEFORMAT='%U %S'; time "$@" >"$work/out"; } 2>&1 )
	s1=$(proc_ticks "$server_pid") b1=$(busy_ticks) st1=$(steal_ticks) t1=$(date +%s.%N)
	steal=$(awk -v a="$st0" -v b="$st1" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.2f", (b - a) / hz / (t1 - t0)}')
	srv_us=$(awk -v a="$s0" -v b="$s1" -v hz="$hz" 'BEGIN {print (b - a) * 1e6 / hz}')
	other_cpu=$(awk -v s="$((s1 - s0))" -v b="$((b1 - b0))" -v hz="$hz" -v t="$times" -v t0="$t0" -v t1="$t1" \
		'BEGIN {split(t, c, " "); o = (b - s) / hz - c[1] - c[2]; if (o < 0) o = 0; printf "%.2f", o / (t1 - t0)}')
}

# run_wrk NAME URL [SCRIPT] -> "name rps p50_ms p99_ms non2xx srv_us_per_req other_cpu"
run_wrk() {
	local args=(-t "$THREADS" -c "$CONNECTIONS" -d "${DURATION}s" --latency)
	[[ -n "${3:-}" ]] && args+=(-s "$3")
	measured "${load_cpu[@]}" wrk "${args[@]}" "$2"
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

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo
echo "btk hot path: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(go version | cut -d' ' -f3), pin=$PIN, server GOGC=${SERVER_GOGC:-default}"
echo "wrk: ${THREADS} threads, ${CONNECTIONS} connections, ${DURATION}s per run, ${ROUNDS} rounds alternating"
printf '%-8s %-8s %10s %9s %9s %7s %12s %9s %6s\n' round target "req/s" "p50 ms" "p99 ms" "non-2xx" "srv-us/req" "other-cpu" "steal"
# Warm up both paths (connection setup, caches, GC sizing).
wrk -t 1 -c 4 -d 1s "$BASE/healthz" >/dev/null
KEYBASE=0 wrk -t 1 -c 4 -d 1s -s "$work/graphql.lua" "$BASE/graphql" >/dev/null
results=()
for r in $(seq "$ROUNDS"); do
	for target in healthz graphql; do
		if [[ $target == healthz ]]; then
			line=$(run_wrk healthz "$BASE/healthz")
		else
			line=$(KEYBASE=$(((r - 1) * THREADS)) run_wrk graphql "$BASE/graphql" "$work/graphql.lua")
		fi
		read -r name rps p50 p99 bad srv other st <<<"$line"
		printf '%-8s %-8s %10s %9s %9s %7s %12s %9s %6s\n' "$r" "$name" "$rps" "$p50" "$p99" "$bad" "$srv" "$other" "$st"
		results+=("$line")
		[[ "$bad" == 0 ]] || echo "  warning: $bad non-2xx responses or socket errors in this run" >&2
	done
done
col() { printf '%s\n' "${results[@]}" | awk -v n="$1" -v c="$2" '$1==n {print $c}' | median; }
h_rps=$(col healthz 2) g_rps=$(col graphql 2)
h_srv=$(col healthz 6) g_srv=$(col graphql 6)
printf '%-8s %-8s %10s %9s %9s %7s %12s\n' median healthz "$h_rps" "$(col healthz 3)" "$(col healthz 4)" "" "$h_srv"
printf '%-8s %-8s %10s %9s %9s %7s %12s\n' median graphql "$g_rps" "$(col graphql 3)" "$(col graphql 4)" "" "$g_srv"
ratio=$(awk -v g="$g_rps" -v h="$h_rps" 'BEGIN {printf "%.3f", g / h}')
verdict=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.5 ? "met" : "MISSED")}')
echo "throughput ratio graphql/healthz (median req/s): $ratio (target >= 0.5: $verdict)"
# Paired per round (each graphql run against the healthz run just before
# it), and over the rounds the hypervisor left alone (steal < 0.2 in both).
printf '%s\n' "${results[@]}" | awk '
	$1 == "healthz" { h = $2; hs = $8 }
	$1 == "graphql" { r = $2 / h; all[++n] = r; if (hs < 0.2 && $8 < 0.2) quiet[++q] = r }
	function median(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END {
		printf "throughput ratio per round: median %.3f over %d rounds", median(all, n), n
		if (q > 0) printf ", %.3f over the %d quiet ones", median(quiet, q), q
		printf "\n"
	}'
echo "server CPU per request graphql/healthz: $(awk -v g="$g_srv" -v h="$h_srv" 'BEGIN {printf "%.2f", g / h}')x"

echo
echo "latency at a constant ${RATE} req/s for ${LAT_DURATION}s (vegeta v12.13.0; /healthz first, as the floor)"
printf '%s' "$body" >"$work/body.json"
printf 'GET %s/healthz\n' "$BASE" >"$work/targets-healthz.txt"
printf 'POST %s/graphql\nContent-Type: application/json\nX-Api-Key: %s\n@%s\n' \
	"$BASE" "${keys[$((nkeys - 1))]}" "$work/body.json" >"$work/targets-graphql.txt"
for target in healthz graphql; do
	# A short warm-up at the same rate, then the measured attack.
	"${load_cpu[@]}" "$vegeta" attack -rate="$RATE" -duration=2s -targets="$work/targets-$target.txt" >/dev/null
	measured "${load_cpu[@]}" "$vegeta" attack -rate="$RATE" -duration="${LAT_DURATION}s" -targets="$work/targets-$target.txt"
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
