#!/usr/bin/env bash
# Summarise the logs of scripts/redis-suite.sh: usage redis-suite-summary.sh OUT [MIN_OK [CLUSTER_MIN_OK [TLS_MIN_OK [SENTINEL_MIN_OK [DB0_MIN_OK]]]]]
# Writes OUT/<mode>/failures.tsv (unit, test, first line of the error) and
# OUT/summary.md, prints the summary, and exits 1 when the [ok] count through
# rproxy is below MIN_OK (when MIN_OK > 0 and the rproxy mode was run), in
# mode cluster below CLUSTER_MIN_OK, in mode tls below TLS_MIN_OK, or in
# mode sentinel below SENTINEL_MIN_OK, or in mode db0 below DB0_MIN_OK.
set -euo pipefail

OUT=$1
MIN_OK=${2:-0}
CLUSTER_MIN_OK=${3:-0}
TLS_MIN_OK=${4:-0}
SENTINEL_MIN_OK=${5:-0}
DB0_MIN_OK=${6:-0}

strip() { sed -e 's/\x1b\[[0-9;]*m//g' "$@"; }

# failures MODE_DIR: one line per [err] / [exception] / [TIMEOUT] / hung unit.
failures() {
	local dir=$1 f unit rc
	while IFS=$'\t' read -r unit rc _; do
		f=$dir/units/${unit//\//_}.log
		strip "$f" | awk -v unit="$unit" '
			function flush() {
				if (name != "") {
					gsub(/\t/, " ", msg)
					gsub(/\/[^ ]*\/redis-[0-9][0-9.]*\//, "", msg) # the source tree path
					print unit "\t" name "\t" msg
				}
				name = ""; msg = ""
			}
			/^\[err\]: / {
				flush(); s = substr($0, 8); i = index(s, " in tests/")
				while (i > 0) { j = index(substr(s, i + 1), " in tests/"); if (j == 0) break; i += j }
				name = (i > 0) ? substr(s, 1, i - 1) : s; want = 1; next }
			/^\[exception\]: / { flush(); name = "[exception]"; msg = substr($0, 14); want = 1; next }
			/^\[TIMEOUT\]/ { flush(); want = 0; timeout = 1; next }
			timeout == 1 && /\(IN PROGRESS\)/ { sub(/^.*\(IN PROGRESS\) /, ""); print unit "\t[TIMEOUT]\tno test finished within the stall limit; stalled in: " $0; timeout = 2; next }
			want == 1 && $0 != "" { msg = $0; want = 2; next }
			# Not an assertion: runtest cut the first 10 characters of the
			# message; the next line (errorInfo) starts with all of it.
			want == 2 { if (length($0) > length(msg) && index($0, msg) > 0) msg = $0; want = 0; next }
			/^\[(ok|skip|ignore)\]|^\[[0-9]+\/[0-9]+ / { flush() }
			END { flush(); if (timeout == 1) print unit "\t[TIMEOUT]\tno test finished within the stall limit" }'
		case $rc in
		0 | 1) ;;
		124 | 137) printf '%s\t[hung]\tkilled after the unit time limit (exit %s)\n' "$unit" "$rc" ;;
		esac
	done <"$dir/units.tsv"
}

# counts MODE_DIR: ok err exception ignored hung aborted units_with_tests seconds
counts() {
	local dir=$1 ok=0 err=0 exc=0 ign=0 hung=0 ab=0 ran=0 f unit rc o e x i t
	while IFS=$'\t' read -r unit rc _; do
		f=$dir/units/${unit//\//_}.log
		o=$(strip "$f" | grep -c '^\[ok\]: ' || true)
		e=$(strip "$f" | grep -c '^\[err\]: ' || true)
		x=$(strip "$f" | grep -c '^\[exception\]: ' || true)
		i=$(strip "$f" | grep -c '^\[ignore\]: ' || true)
		t=$(strip "$f" | grep -c '^\[TIMEOUT\]' || true)
		ok=$((ok + o)); err=$((err + e)); exc=$((exc + x)); ign=$((ign + i))
		[ $((o + e + x)) -gt 0 ] && ran=$((ran + 1))
		if [ "$t" -gt 0 ] || [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
			hung=$((hung + 1))
		# grep -c, not -q: under pipefail, -q's early exit makes sed die of
		# SIGPIPE on a long log, and the unit would count as aborted.
		elif [ "$x" -gt 0 ] || { [ "$rc" != 0 ] && [ "$(strip "$f" | grep -c 'The End' || true)" = 0 ]; }; then
			ab=$((ab + 1))
		fi
	done <"$dir/units.tsv"
	echo "$ok $err $exc $ign $hung $ab $ran $(cat "$dir/seconds" 2>/dev/null || echo '?')"
}

# baseline MODE: the direct mode a through-rproxy mode is compared with.
baseline() {
	case $1 in
	rproxy) echo direct ;;
	cluster) echo direct-cluster ;;
	tls) echo direct-tls ;;
	sentinel) echo direct-sentinel ;;
	db0) echo direct-db0 ;;
	esac
}

modes=()
for m in direct rproxy direct-cluster cluster direct-tls tls direct-sentinel sentinel direct-db0 db0; do
	[ -s "$OUT/$m/units.tsv" ] && modes+=("$m")
done
if [ "${#modes[@]}" -eq 0 ]; then
	echo "redis-suite-summary: no results under $OUT" >&2
	exit 1
fi

S=$OUT/summary.md
{
	echo "# $(cat "$OUT/source" 2>/dev/null || echo Redis) Tcl suite, external mode, --durable"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, rproxy $(git describe --tags --always --dirty 2>/dev/null || echo '?')"
	echo
	echo "| mode | [ok] | [err] | [exception] | hung units | aborted units | units with tests | ignored tests | seconds |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for m in "${modes[@]}"; do
		read -r ok err exc ign hung ab ran secs < <(counts "$OUT/$m")
		echo "| $m | $ok | $err | $exc | $hung | $ab | $ran | $ign | $secs |"
		failures "$OUT/$m" >"$OUT/$m/failures.tsv"
	done
	for m in "${modes[@]}"; do
		echo
		echo "## Failures: $m ($(wc -l <"$OUT/$m/failures.tsv"))"
		echo
		b=$(baseline "$m")
		if [ -n "$b" ] && [ -s "$OUT/$b/failures.tsv" ]; then
			echo "Marked (also direct) when the same test fails in mode $b, without rproxy."
			echo
		fi
		awk -F'\t' -v other="$( [ -n "$b" ] && echo "$OUT/$b/failures.tsv" )" '
			BEGIN { if (other != "") while ((getline l < other) > 0) { split(l, a, "\t"); seen[a[1] "\t" a[2]] = 1 } }
			{ tag = ((($1 "\t" $2) in seen)) ? " (also direct)" : ""; print "- `" $1 "` " $2 tag ": " $3 }' "$OUT/$m/failures.tsv"
	done
	for m in "${modes[@]}"; do
		b=$(baseline "$m")
		[ -n "$b" ] && [ -s "$OUT/$m/units.tsv" ] && [ -s "$OUT/$b/units.tsv" ] || continue
		echo
		echo "## Tests run in mode $b but not in mode $m (their unit stopped early)"
		echo
		while IFS=$'\t' read -r unit _; do
			fd=$OUT/$b/units/${unit//\//_}.log
			fp=$OUT/$m/units/${unit//\//_}.log
			[ -f "$fd" ] && [ -f "$fp" ] || continue
			nd=$(strip "$fd" | grep -cE '^\[(ok|err)\]: ' || true)
			np=$(strip "$fp" | grep -cE '^\[(ok|err)\]: ' || true)
			[ "$nd" -gt "$np" ] && echo "- \`$unit\`: $((nd - np)) of $nd tests not run"
		done <"$OUT/$m/units.tsv"
	done
	for m in "${modes[@]}"; do
		if awk -F'\t' '$4 != "" && $4 != "yes" { found = 1 } END { exit !found }' "$OUT/$m/units.tsv"; then
			echo
			echo "## $m: processes that exited during a unit"
			echo
			awk -F'\t' '$4 != "" && $4 != "yes" { print "- `" $1 "`: " $4 }' "$OUT/$m/units.tsv"
		fi
	done
} >"$S"
cat "$S"

status=0
guard() { # MODE THRESHOLD VARIABLE
	[ -s "$OUT/$1/units.tsv" ] && [ "$2" -gt 0 ] || return 0
	local ok
	read -r ok _ < <(counts "$OUT/$1")
	if [ "$ok" -lt "$2" ]; then
		echo "redis-suite: FAIL: $ok [ok] in mode $1, under the threshold $2 ($3)" >&2
		status=1
		return 0
	fi
	echo "redis-suite: $ok [ok] in mode $1, threshold $2: pass" >&2
}
guard rproxy "$MIN_OK" REDIS_SUITE_MIN_OK
guard cluster "$CLUSTER_MIN_OK" REDIS_SUITE_CLUSTER_MIN_OK
guard tls "$TLS_MIN_OK" REDIS_SUITE_TLS_MIN_OK
guard sentinel "$SENTINEL_MIN_OK" REDIS_SUITE_SENTINEL_MIN_OK
guard db0 "$DB0_MIN_OK" REDIS_SUITE_DB0_MIN_OK
exit $status
