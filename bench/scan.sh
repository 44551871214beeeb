#!/usr/bin/env bash
# bench/scan.sh — `btk scan` against `grep -rE` over the same trees, in one
# run (the figures are in docs/leaks.md#how-fast-btk-scan-is).
#
#   bench/scan.sh                # from the repository root (or anywhere inside it)
#   SIZE_MB=256 bench/scan.sh    # a smaller generated tree
#
# It builds btk once, then measures two trees: the btk repository itself
# (its git checkout, .git included) and a generated tree of SIZE_MB
# (default 1024) MiB under a temporary directory (bench/scangen: text files
# of 4-512 KiB with planted keys, a .git directory and a binary file), which
# is deleted on exit. Each tool reads each tree once to warm the page cache,
# then ROUNDS times alternately (each time REPO_ITER [20] runs in a row on
# the small repository, one on the generated tree); the script prints, per round, the wall time
# and CPU time (user+sys) of each and files/s and MB/s, and at the end the
# median ratios grep/btk of wall and CPU time. Both tools are asked the same question with the
# same regular expression; grep is also run as -rIE --exclude-dir=.git,
# which skips what btk scan skips (binary files, .git). Exit status 9 (btk
# found keys) and 0/1 (grep) are expected and ignored.
#
# Needs: go, grep (GNU), /usr/bin/time. Knobs: ROUNDS [3], SIZE_MB [1024],
# KEEP=1 keeps the tree, REPO_TREE another checkout to measure as "the btk
# repository" (default: this one; a worktree has no .git directory).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SIZE_MB=${SIZE_MB:-1024}
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
TMP=$(mktemp -d /tmp/btk-scan-bench.XXXXXX)
cleanup() { if [[ "${KEEP:-}" != 1 ]]; then rm -rf "$TMP"; else echo "kept $TMP"; fi; }
trap cleanup EXIT

PATTERN='btk_[A-Za-z0-9]{8}_[A-Za-z0-9_-]{43}'
echo "building btk..."
(cd "$REPO" && go build -o "$TMP/btk" ./cmd/btk && go build -o "$TMP/scangen" ./bench/scangen)
echo "generating ${SIZE_MB} MiB under $TMP/tree..."
"$TMP/scangen" -dir "$TMP/tree" -size $((SIZE_MB * 1024 * 1024)) -keys 200

# measure CMD...: runs CMD ITER times, prints "wall cpu" in seconds per run
# (/usr/bin/time counts in hundredths: a small tree is run several times).
measure() {
	/usr/bin/time -o "$TMP/time" -f '%e %U %S' bash -c 'for _ in $(seq 1 '"$ITER"'); do "$@" >/dev/null 2>&1 || true; done' _ "$@"
	tail -1 "$TMP/time" | awk -v n="$ITER" '{printf "%.4f %.4f\n", $1 / n, ($2 + $3) / n}'
}

tree_stats() { # files and bytes of regular files under $1 (all of them)
	local files bytes
	files=$(find "$1" -type f | wc -l)
	bytes=$(find "$1" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
	echo "$files $bytes"
}

run_tree() {
	local name=$1 dir=$2
	ITER=$3
	read -r files bytes < <(tree_stats "$dir")
	echo
	echo "== $name: $files files, $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1048576}') MiB ($dir)"
	local btk_cmd=("$TMP/btk" scan "$dir")
	local grep_cmd=(grep -rE "$PATTERN" "$dir")
	local grepI_cmd=(grep -rIE --exclude-dir=.git "$PATTERN" "$dir")
	# Warm the page cache, and check that both find the same keys.
	local nb ng
	nb=$("${btk_cmd[@]}" 2>/dev/null | wc -l || true)
	ng=$("${grepI_cmd[@]}" 2>/dev/null | grep -oE "$PATTERN" | wc -l || true)
	"${grep_cmd[@]}" >/dev/null 2>&1 || true
	echo "   keys found: btk scan $nb, grep -rIE --exclude-dir=.git $ng"
	printf '   %-5s %-34s %8s %8s %10s %9s\n' round tool wall-s cpu-s files/s MB/s   # per run
	local ratios=() ratiosI=() cpus=()
	for round in $(seq 1 "$ROUNDS"); do
		local tb tg tgi
		tb=$(measure "${btk_cmd[@]}")
		tg=$(measure "${grep_cmd[@]}")
		tgi=$(measure "${grepI_cmd[@]}")
		for pair in "btk scan|$tb" "grep -rE|$tg" "grep -rIE --exclude-dir=.git|$tgi"; do
			local tool=${pair%%|*} t=${pair#*|}
			read -r wall cpu <<<"$t"
			awk -v r="$round" -v tool="$tool" -v w="$wall" -v c="$cpu" -v f="$files" -v b="$bytes" \
				'BEGIN{ww = (w > 0 ? w : 0.0001); printf "   %-5s %-34s %8.4f %8.4f %10.0f %9.1f\n", r, tool, w, c, f/ww, b/1048576/ww}'
		done
		cpus+=("$(awk -v a="${tg#* }" -v b="${tb#* }" 'BEGIN{printf "%.2f", a/(b>0?b:0.0001)}')")
		ratios+=("$(awk -v a="${tg%% *}" -v b="${tb%% *}" 'BEGIN{printf "%.2f", a/(b>0?b:0.001)}')")
		ratiosI+=("$(awk -v a="${tgi%% *}" -v b="${tb%% *}" 'BEGIN{printf "%.2f", a/(b>0?b:0.001)}')")
	done
	local med medI
	med=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
	medI=$(printf '%s\n' "${ratiosI[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
	echo "   median wall-time ratio: grep -rE / btk scan = $med; grep -rIE --exclude-dir=.git / btk scan = $medI"
	echo "   median CPU-time ratio: grep -rE / btk scan = $(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')"
}

echo "$(nproc) CPUs; $(uptime)"
run_tree "btk repository" "${REPO_TREE:-$REPO}" "${REPO_ITER:-20}"
run_tree "generated tree" "$TMP/tree" 1
