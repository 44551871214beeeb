#!/usr/bin/env bash
# bench/cluster.sh — CPU per key-authenticated request of `btk serve` on
# PostgreSQL + Redis (a cluster instance) against SQLite on one node, in the
# same run, and the Redis round trips per request (issue 9). See
# bench/README.md ("Several instances") for the figures.
#
#   bench/cluster.sh     # from the repository root (or anywhere inside it)
#
# It builds btk once, starts two servers side by side on 127.0.0.1 — one on
# a fresh SQLite file, one on a fresh PostgreSQL schema with --redis and a
# fresh key prefix — logs in on each, creates one key per wrk thread, then
# alternates ROUNDS rounds of wrk (POST /graphql {tenantInfo{id name}} with
# X-Api-Key) between the two. For each round it prints requests/s, the
# server's CPU per request (srv-us/req, from /proc/PID/stat), for the
# cluster instance also the Redis server's CPU per request (redis-us/req),
# the Redis commands per request (INFO commandstats: every command is one
# round trip, none is pipelined) and the PostgreSQL transactions per request
# (pg_stat_database.xact_commit of the database). Both servers are stopped
# and the schema and keys removed on exit.
#
# Needs: go, curl, jq, wrk, psql, redis-cli, redis-server. The PostgreSQL
# server of BENCH_POSTGRES (default: the machine's test service) gets a
# database of the run's own (so that its transaction count is btk's alone);
# Redis is a redis-server of the run's own on PORT+2 (so that its command
# count and CPU are btk's alone).
#
# Knobs: ROUNDS [3] DURATION [10] CONNECTIONS [32] THREADS [2] PORT [27190]
#        (SQLite on PORT, the cluster instance on PORT+1)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
PORT=${PORT:-27190}
PG=${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
REDIS="redis://127.0.0.1:$((PORT + 2))/0"
EMAIL="bench@example.com"
PASSWORD="bench-password-not-secret"

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/btk-cluster-bench.XXXXXX")
dbname="btk_bench_$$_$RANDOM"
prefix="btk:"
pids=()

die() { echo "cluster.sh: $*" >&2; exit 1; }
for tool in go curl jq wrk psql redis-cli redis-server; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

cleanup() {
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	psql "$PG" -qAtc "DROP DATABASE IF EXISTS $dbname" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# building btk" >&2
(cd "$repo" && go build -o "$work/btk" ./cmd/btk)
psql "$PG" -qAtc "CREATE DATABASE $dbname" >/dev/null
pgurl=$(sed -E "s#^(postgres(ql)?://[^/]*/)[^?]*#\1$dbname#" <<<"$PG")
redis-cli -p "$((PORT + 2))" PING >/dev/null 2>&1 && die "port $((PORT + 2)) is in use (set PORT)"
redis-server --bind 127.0.0.1 --port "$((PORT + 2))" --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
redis_pid=$!
for _ in $(seq 100); do redis-cli -u "$REDIS" PING >/dev/null 2>&1 && break; sleep 0.1; done

start() { # start NAME PORT ARGS...
	local name=$1 port=$2
	shift 2
	if curl -sS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
		die "port $port is in use (set PORT)"
	fi
	BTK_BOOTSTRAP_EMAIL="$EMAIL" BTK_BOOTSTRAP_PASSWORD="$PASSWORD" "$work/btk" serve --addr "127.0.0.1:$port" \
		--rate-per-minute 1000000 --rate-per-day 100000000 --log-level warn "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return
		kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/$name.log" >&2; die "$name exited"; }
		sleep 0.1
	done
	die "$name not ready after 10 s"
}
start sqlite "$PORT" --db "$work/btk.db"
sqlite_pid=${pids[-1]}
start cluster "$((PORT + 1))" --db "$pgurl" --redis "$REDIS" --redis-prefix "$prefix"
cluster_pid=${pids[-1]}

gql() { # gql BASE TOKEN_OR_EMPTY QUERY VARIABLES_JSON
	local auth=()
	[[ -n "$2" ]] && auth=(-H "Authorization: Bearer $2")
	jq -nc --arg q "$3" --argjson v "$4" '{query:$q,variables:$v}' |
		curl -fsS "$1/graphql" -H 'Content-Type: application/json' "${auth[@]}" --data-binary @-
}

body='{"query":"{tenantInfo{id name}}"}'
for name in sqlite cluster; do
	port=$PORT
	[[ $name == cluster ]] && port=$((PORT + 1))
	base="http://127.0.0.1:$port"
	token=$(gql "$base" "" 'mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}' \
		"$(jq -nc --arg e "$EMAIL" --arg p "$PASSWORD" '{e:$e,p:$p}')" | jq -er '.data.login.accessToken') || die "login on $name failed"
	keys=()
	for i in $(seq "$THREADS"); do
		keys+=("$(gql "$base" "$token" 'mutation($n:String!){createApiKey(input:{name:$n}){plaintextKey}}' \
			"$(jq -nc --arg n "bench-$i" '{n:$n}')" | jq -er '.data.createApiKey.plaintextKey')") || die "createApiKey on $name failed"
	done
	check=$(curl -fsS "$base/graphql" -H 'Content-Type: application/json' -H "X-Api-Key: ${keys[0]}" --data-binary "$body")
	jq -e '.data.tenantInfo.id' <<<"$check" >/dev/null || die "probe on $name failed: $check"
	cat >"$work/$name.lua" <<EOF
local keys = {$(printf '"%s",' "${keys[@]}")}
local n = 0
function setup(thread)
  n = n + 1
  thread:set("apikey", keys[n])
end
function init(args)
  wrk.method = "POST"
  wrk.body = '$body'
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["X-Api-Key"] = apikey
end
local bad = 0
function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end
function done(summary, latency, requests)
  io.write(string.format("non200 %d\n", summary.errors.status))
end
EOF
done

hz=$(getconf CLK_TCK)
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Script calls (EVALSHA/EVAL: each is one round trip) and every command
# (those the script runs inside Redis included).
redis_scripts() { redis-cli -u "$REDIS" INFO commandstats | awk -F'[=,:]' '/^cmdstat_eval/ {n += $3} END {print n+0}'; }
redis_cmds() { redis-cli -u "$REDIS" INFO commandstats | awk -F'[=,:]' '/^cmdstat_/ {n += $3} END {print n+0}'; }
pg_xacts() { psql "$PG" -qAtc "SELECT pg_stat_clear_snapshot(); SELECT xact_commit FROM pg_stat_database WHERE datname = '$dbname'" | tail -1; }

printf '%-8s %5s %10s %12s %14s %12s %12s %12s\n' engine round req/s srv-us/req redis-us/req scripts/req redis-cmd/req pg-xact/req
for round in $(seq "$ROUNDS"); do
	for name in sqlite cluster; do
		port=$PORT pid=$sqlite_pid
		[[ $name == cluster ]] && port=$((PORT + 1)) pid=$cluster_pid
		s0=$(proc_ticks "$pid") r0=$(redis_scripts) c0=$(redis_cmds) x0=$(pg_xacts) rs0=$(proc_ticks "$redis_pid")
		wrk -t "$THREADS" -c "$CONNECTIONS" -d "${DURATION}s" -s "$work/$name.lua" "http://127.0.0.1:$port/graphql" >"$work/out"
		s1=$(proc_ticks "$pid") r1=$(redis_scripts) c1=$(redis_cmds) x1=$(pg_xacts) rs1=$(proc_ticks "$redis_pid")
		n=$(awk '/requests in/ {print $1}' "$work/out")
		bad=$(awk '/^non200/ {print $2}' "$work/out")
		[[ "$bad" == 0 ]] || die "$name answered $bad non-200 responses"
		rps=$(awk '/^Requests\/sec/ {print $2}' "$work/out")
		awk -v name="$name" -v round="$round" -v rps="$rps" -v n="$n" -v s="$((s1 - s0))" -v rs="$((rs1 - rs0))" \
			-v rc="$((r1 - r0))" -v cc="$((c1 - c0 - 2))" -v x="$((x1 - x0))" -v hz="$hz" '
			BEGIN {
				rus = "-"; rrt = "-"; rcm = "-"
				if (name == "cluster") { rus = sprintf("%.1f", rs * 1e6 / hz / n); rrt = sprintf("%.3f", rc / n); rcm = sprintf("%.3f", cc / n) }
				printf "%-8s %5d %10.0f %12.1f %14s %12s %12s %12.4f\n", name, round, rps, s * 1e6 / hz / n, rus, rrt, rcm, x / n
			}'
	done
done
