#!/usr/bin/env bash
# bench/script.sh — instructions Redis executes per key check of gcra.lua
# (or of SCRIPT, a variant to compare), counted by callgrind on a
# redis-server of the run's own: the count for 4,000 checks less the count
# for 1,000, over 3,000. Instructions, not time: the figure does not depend
# on what else the machine runs. See docs/clusters.md#what-a-key-check-costs.
#
#   bench/script.sh [SCRIPT]     # from the repository root
#
# Needs: go, valgrind, redis-server, redis-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
script=${1:-internal/redisstate/gcra.lua}
work=$(mktemp -d "${TMPDIR:-/tmp}/btk-script-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
for tool in go valgrind redis-server redis-cli; do
	command -v "$tool" >/dev/null || { echo "script.sh: $tool is required" >&2; exit 1; }
done
go build -o "$work/scriptload" ./bench/scriptload

# count N: the instructions of a redis-server that served N key checks.
count() {
	local port=$((27400 + RANDOM % 500))
	"$work/scriptload" -script "$script" -n "$1" >"$work/cmds"
	valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" \
		redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
	local pid=$!
	for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
	redis-cli -p "$port" --pipe <"$work/cmds" | grep -q "errors: 0," || { echo "script.sh: the script answered an error" >&2; exit 1; }
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
	awk '/^(summary|totals):/ {print $2; exit}' "$work/cg.$1"
}
a=$(count 1000)
b=$(count 4000)
echo "$script: $(( (b - a) / 3000 )) instructions per key check"
