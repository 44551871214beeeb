#!/usr/bin/env bash
# bench/cluster.sh — CPU per key-authenticated request of `btk serve` as a
# cluster instance (PostgreSQL + Redis) against SQLite on one node, in the
# same run, with the shared state on one Redis server ("redis") and on a
# three-master Redis Cluster ("cluster3"). See bench/README.md ("Several
# instances") and docs/clusters.md#what-a-key-check-costs for the figures.
#
#   bench/cluster.sh     # from the repository root (or anywhere inside it)
#
# It builds btk once and starts three servers side by side on 127.0.0.1:
# one on a fresh SQLite file, and two on fresh PostgreSQL databases with
# --redis: one on a redis-server of the run's own, one on a Redis Cluster of
# the run's own (three redis-server in cluster mode joined by redis-cli
# --cluster create). On each it logs in, creates WORKSPACES workspaces with
# one key each (through impersonate) (so that the cluster's checks spread over its shards), then
# alternates ROUNDS rounds of wrk (POST /graphql {tenantInfo{id name}} with
# X-Api-Key, the keys in turn, every answer checked 200) between the three.
# For each round it prints:
#
#   req/s           requests per second
#   srv-us/req      btk's CPU per request (utime + stime, /proc/PID/stat)
#   redis-us/req    the Redis processes' CPU per request (/proc, all shards)
#   script-us/chk   Redis's own time per key-check script (INFO commandstats:
#                   usec / calls of EVALSHA and EVAL, all shards)
#   cmds/req        Redis commands per request (the script's own included)
#   shard-max/mean  the busiest shard's script calls over the mean (cluster3)
#   pg-xact/req     PostgreSQL transactions per request
#
# and at the end the medians, with btk's CPU per request relative to
# SQLite's. Every server is stopped and the databases removed on exit.
#
# Needs: go, curl, jq, wrk, psql, redis-cli, redis-server. The PostgreSQL
# server of BENCH_POSTGRES (default: the machine's test service) gets
# databases of the run's own.
#
# Knobs: ROUNDS [3] DURATION [10] CONNECTIONS [32] THREADS [2]
#        WORKSPACES [12] PORT [27190] (btk on PORT..PORT+2, Redis from PORT+3)
#        BTK_BIN [built from the tree] (a btk binary to measure instead)
#        SERVER_GOMAXPROCS [Go's default: the CPUs] GOMAXPROCS of the three
#        btk servers (bench/README.md: one P against two on shared cores)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
WORKSPACES=${WORKSPACES:-12}
PORT=${PORT:-27190}
SERVER_GOMAXPROCS=${SERVER_GOMAXPROCS:-}
PG=${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
EMAIL="bench@example.com"
PASSWORD="bench-password-not-secret"
ENGINES=(sqlite redis cluster3)

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/btk-cluster-bench.XXXXXX")
dbbase="btk_bench_$$_$RANDOM"
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
	for e in redis cluster3; do
		psql "$PG" -qAtc "DROP DATABASE IF EXISTS ${dbbase}_$e" >/dev/null 2>&1 || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n "${BTK_BIN:-}" ]]; then # measure another build (before/after comparisons)
	cp "$BTK_BIN" "$work/btk"
else
	echo "# building btk" >&2
	(cd "$repo" && go build -o "$work/btk" ./cmd/btk)
fi

# Redis: one server on PORT+3, a cluster on PORT+4..PORT+6 (bus ports +10000).
redis_port() { echo $((PORT + 3 + $1)); }
start_redis() { # start_redis INDEX EXTRA_ARGS...
	local i=$1 port
	shift
	port=$(redis_port "$i")
	redis-cli -p "$port" PING >/dev/null 2>&1 && die "port $port is in use (set PORT)"
	mkdir -p "$work/redis$i"
	redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$work/redis$i" "$@" \
		>"$work/redis$i.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && return; sleep 0.1; done
	die "redis-server on $port did not start"
}
start_redis 0
redis_pids=(${pids[-1]})
cluster_pids=()
cluster_addrs=()
for i in 1 2 3; do
	start_redis "$i" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
	cluster_pids+=(${pids[-1]})
	cluster_addrs+=("127.0.0.1:$(redis_port "$i")")
done
redis-cli --cluster create "${cluster_addrs[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log" 2>&1 ||
	{ cat "$work/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
for _ in $(seq 100); do
	redis-cli -p "$(redis_port 1)" CLUSTER INFO | grep -q cluster_state:ok && break
	sleep 0.1
done

start() { # start NAME PORT ARGS...
	local name=$1 port=$2
	shift 2
	if curl -sS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
		die "port $port is in use (set PORT)"
	fi
	local env=(BTK_BOOTSTRAP_EMAIL="$EMAIL" BTK_BOOTSTRAP_PASSWORD="$PASSWORD")
	[[ -n "$SERVER_GOMAXPROCS" ]] && env+=(GOMAXPROCS="$SERVER_GOMAXPROCS")
	env "${env[@]}" "$work/btk" serve --addr "127.0.0.1:$port" \
		--rate-per-minute 1000000 --rate-per-day 100000000 --log-level warn "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return
		kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/$name.log" >&2; die "$name exited"; }
		sleep 0.1
	done
	die "$name not ready after 10 s"
}
pgurl() { sed -E "s#^(postgres(ql)?://[^/]*/)[^?]*#\1$1#" <<<"$PG"; }
declare -A port_of pid_of
for e in redis cluster3; do psql "$PG" -qAtc "CREATE DATABASE ${dbbase}_$e" >/dev/null; done
port_of[sqlite]=$PORT
start sqlite "$PORT" --db "$work/btk.db"
pid_of[sqlite]=${pids[-1]}
port_of[redis]=$((PORT + 1))
start redis "$((PORT + 1))" --db "$(pgurl "${dbbase}_redis")" --redis "redis://127.0.0.1:$(redis_port 0)/0"
pid_of[redis]=${pids[-1]}
port_of[cluster3]=$((PORT + 2))
start cluster3 "$((PORT + 2))" --db "$(pgurl "${dbbase}_cluster3")" \
	--redis "redis+cluster://$(IFS=,; echo "${cluster_addrs[*]}")"
pid_of[cluster3]=${pids[-1]}

gql() { # gql BASE TOKEN_OR_EMPTY QUERY VARIABLES_JSON
	local auth=()
	[[ -n "$2" ]] && auth=(-H "Authorization: Bearer $2")
	jq -nc --arg q "$3" --argjson v "$4" '{query:$q,variables:$v}' |
		curl -fsS "$1/graphql" -H 'Content-Type: application/json' "${auth[@]}" --data-binary @-
}
login() { # login BASE
	gql "$1" "" 'mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}' \
		"$(jq -nc --arg e "$EMAIL" --arg p "$PASSWORD" '{e:$e,p:$p}')" | jq -er '.data.login.accessToken'
}

body='{"query":"{tenantInfo{id name}}"}'
for name in "${ENGINES[@]}"; do
	base="http://127.0.0.1:${port_of[$name]}"
	token=$(login "$base") || die "login on $name failed"
	keys=()
	for i in $(seq "$WORKSPACES"); do
		ws=$(gql "$base" "$token" 'mutation($n:String!){createWorkspace(input:{name:$n}){id}}' \
			"$(jq -nc --arg n "bench-$i" '{n:$n}')" | jq -er '.data.createWorkspace.id') || die "createWorkspace on $name failed"
		wtoken=$(gql "$base" "$token" 'mutation($w:ID!){impersonate(workspaceId:$w){accessToken}}' \
			"$(jq -nc --arg w "$ws" '{w:$w}')" | jq -er '.data.impersonate.accessToken') || die "impersonate $ws on $name failed"
		keys+=("$(gql "$base" "$wtoken" 'mutation{createApiKey(input:{name:"bench"}){plaintextKey}}' '{}' |
			jq -er '.data.createApiKey.plaintextKey')") || die "createApiKey on $name failed"
	done
	for k in "${keys[@]}"; do # every key checked once, and cached
		check=$(curl -fsS "$base/graphql" -H 'Content-Type: application/json' -H "X-Api-Key: $k" --data-binary "$body")
		jq -e '.data.tenantInfo.id' <<<"$check" >/dev/null || die "probe on $name failed: $check"
	done
	cat >"$work/$name.lua" <<EOF
local keys = {$(printf '"%s",' "${keys[@]}")}
local i = 0
function init(args)
  wrk.method = "POST"
  wrk.body = '$body'
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  i = i + 1
  wrk.headers["X-Api-Key"] = keys[i % #keys + 1]
  return wrk.format()
end
function done(summary, latency, requests)
  io.write(string.format("non200 %d\n", summary.errors.status))
end
EOF
done

hz=$(getconf CLK_TCK)
proc_ticks() { # proc_ticks PID... : utime + stime summed
	local sum=0 p
	for p in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
	echo "$sum"
}
redis_ports() { case $1 in redis) redis_port 0 ;; cluster3) redis_port 1; redis_port 2; redis_port 3 ;; esac; }
# script calls, their usec, and all commands, per port: "calls usec cmds"
redis_stats() {
	local p
	for p in $(redis_ports "$1"); do
		redis-cli -p "$p" INFO commandstats | awk -F'[=,:]' -v port="$p" '
			/^cmdstat_eval(sha)?:/ {c += $3; u += $5}
			/^cmdstat_/ {n += $3}
			END {printf "%s %d %d %d\n", port, c, u, n}'
	done
}
pg_xacts() { [[ $1 == sqlite ]] && { echo 0; return; }
	psql "$PG" -qAtc "SELECT pg_stat_clear_snapshot(); SELECT xact_commit FROM pg_stat_database WHERE datname = '${dbbase}_$1'" | tail -1; }

echo "btk cluster bench: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(go version | cut -d' ' -f3), server GOMAXPROCS=${SERVER_GOMAXPROCS:-default}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %5s %8s %11s %13s %14s %9s %15s %12s\n' engine round req/s srv-us/req redis-us/req script-us/chk cmds/req shard-max/mean pg-xact/req
: >"$work/results"
for round in $(seq "$ROUNDS"); do
	for name in "${ENGINES[@]}"; do
		rp=()
		case $name in redis) rp=("${redis_pids[@]}") ;; cluster3) rp=("${cluster_pids[@]}") ;; esac
		redis_stats "$name" >"$work/st0"
		s0=$(proc_ticks "${pid_of[$name]}") x0=$(pg_xacts "$name") r0=$( ((${#rp[@]})) && proc_ticks "${rp[@]}" || echo 0)
		wrk -t "$THREADS" -c "$CONNECTIONS" -d "${DURATION}s" -s "$work/$name.lua" "http://127.0.0.1:${port_of[$name]}/graphql" >"$work/out"
		s1=$(proc_ticks "${pid_of[$name]}") x1=$(pg_xacts "$name") r1=$( ((${#rp[@]})) && proc_ticks "${rp[@]}" || echo 0)
		redis_stats "$name" >"$work/st1"
		n=$(awk '/requests in/ {print $1}' "$work/out")
		bad=$(awk '/^non200/ {print $2}' "$work/out")
		[[ "$bad" == 0 ]] || die "$name answered $bad non-200 responses"
		rps=$(awk '/^Requests\/sec/ {print $2}' "$work/out")
		# per shard deltas: calls, usec, commands (INFO itself adds one command per read)
		paste "$work/st0" "$work/st1" | awk -v name="$name" -v round="$round" -v rps="$rps" -v n="$n" \
			-v s="$((s1 - s0))" -v rs="$((r1 - r0))" -v x="$((x1 - x0))" -v hz="$hz" '
			{ c = $6 - $2; u = $7 - $3; k = $8 - $4 - 1; calls += c; usec += u; cmds += k; per[NR] = c; shards = NR }
			END {
				rus = "-"; sus = "-"; cpr = "-"; skew = "-"
				if (shards > 0) {
					rus = sprintf("%.1f", rs * 1e6 / hz / n)
					sus = sprintf("%.2f", calls ? usec / calls : 0)
					cpr = sprintf("%.2f", cmds / n)
					if (shards > 1) { m = 0; for (i = 1; i <= shards; i++) if (per[i] > m) m = per[i]; skew = sprintf("%.2f", m / (calls / shards)) }
				}
				printf "%-9s %5d %8.0f %11.1f %13s %14s %9s %15s %12.4f\n", name, round, rps, s * 1e6 / hz / n, rus, sus, cpr, skew, x / n
			}' | tee -a "$work/results"
	done
done

echo
echo "medians over $ROUNDS rounds (btk CPU per request relative to SQLite's):"
for name in "${ENGINES[@]}"; do
	awk -v name="$name" '$1 == name' "$work/results" >"$work/$name.rows"
	med() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
	srv=$(awk '{print $4}' "$work/$name.rows" | med)
	echo "$name $srv $(awk '{print $5}' "$work/$name.rows" | med) $(awk '{print $6}' "$work/$name.rows" | med)"
done | awk '
	$1 == "sqlite" { base = $2 }
	{ row[NR] = $0; srv[NR] = $2; nm[NR] = $1; r[NR] = $3; sc[NR] = $4 }
	END { for (i = 1; i <= NR; i++) printf "  %-9s btk %6.1f us/req (%.2fx SQLite)   redis %6s us/req   script %6s us/check\n", nm[i], srv[i], srv[i] / base, r[i], sc[i] }'
