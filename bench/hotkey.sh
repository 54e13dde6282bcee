#!/usr/bin/env bash
# Hot-key benchmark: direct Redis, rproxy with the local tier on, and rproxy
# with the tier off (coalescing still on), interleaved rounds, medians.
#  1. one hot key: 50 clients, pipeline 1, every GET on one key;
#  2. Zipf(1.1) over 1M keys: 50 clients, pipeline 1.
# For each: client ops/s, latency, GETs that reached Redis (INFO
# commandstats), Redis CPU per client request and rproxy CPU per request.
#  3. memory: a scan of 10M distinct keys through rproxy admitting every key
#     to the tier ("cache these" mode, 16mb budget): rproxy's RSS before and
#     after, and the tier's bytes.
# Usage: bench/hotkey.sh [rounds] [seconds per run]   (default 3, 8)
set -euo pipefail
rounds=${1:-3}
secs=${2:-8}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitping() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done; echo "no PONG on $1" >&2; exit 1; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; } # utime+stime, clock ticks
hz=$(getconf CLK_TCK)
rss() { awk '/VmRSS/{print $2}' "/proc/$1/status"; } # kB

go build -o "$tmp/rproxy" ./cmd/rproxy
go build -o "$tmp/load" ./bench/cmd/load
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
rpid=$!; pids+=($rpid); waitping "$rport"

# The tier on: hot from 50 reads/s, up to 256 hot keys (a Zipf(1.1) head
# worth caching at this rate); the tier off: detection only, coalescing on.
printf 'hotkeys:\n  threshold: 50\n  top_k: 256\n' >"$tmp/on.yaml"
printf 'hotkeys:\n  tier: false\n' >"$tmp/off.yaml"
on=$(freeport); "$tmp/rproxy" -listen 127.0.0.1:$on -upstream 127.0.0.1:$rport -config "$tmp/on.yaml" 2>"$tmp/on.log" &
onpid=$!; pids+=($onpid)
off=$(freeport); "$tmp/rproxy" -listen 127.0.0.1:$off -upstream 127.0.0.1:$rport -config "$tmp/off.yaml" 2>"$tmp/off.log" &
offpid=$!; pids+=($offpid)
waitping "$on"; waitping "$off"

echo "prepopulating 1M keys..." >&2
"$tmp/load" -addr 127.0.0.1:$rport -keys 1000000 -prepopulate -requests 1 -clients 1 >/dev/null

gets() { local n; n=$(redis-cli -p "$rport" info commandstats | sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p'); echo "${n:-0}"; }
field() { python3 -c "import json,sys; r=json.load(open('$1')); print(eval('r' + sys.argv[1]))" "$2"; }

results="$tmp/results.tsv"
: >"$results"
for round in $(seq "$rounds"); do
	order=(direct on off)
	case $((round % 3)) in 2) order=(on off direct) ;; 0) order=(off direct on) ;; esac
	for scen in hot zipf; do
		case $scen in hot) dist=(-dist hot) ;; zipf) dist=(-dist zipf -zipf-s 1.1 -keys 1000000 -scramble) ;; esac
		for tgt in "${order[@]}"; do
			case $tgt in direct) port=$rport pid=$rpid ;; on) port=$on pid=$onpid ;; off) port=$off pid=$offpid ;; esac
			# Warm the detector and the tier, then measure.
			"$tmp/load" -addr 127.0.0.1:$port -clients 50 "${dist[@]}" -duration 2s >/dev/null
			redis-cli -p "$rport" config resetstat >/dev/null
			r0=$(ticks $rpid); p0=$(ticks $pid)
			"$tmp/load" -addr 127.0.0.1:$port -clients 50 -pipeline 1 "${dist[@]}" -duration "${secs}s" -json >"$tmp/out.json"
			r1=$(ticks $rpid); p1=$(ticks $pid)
			ops=$(field "$tmp/out.json" "['ops']")
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scen" "$tgt" \
				"$(field "$tmp/out.json" "['ops_per_sec']")" "$ops" "$(gets)" \
				"$(awk -v t=$((r1 - r0)) -v n="$ops" -v hz="$hz" 'BEGIN{printf "%.2f", t/hz*1e6/n}')" \
				"$(awk -v t=$((p1 - p0)) -v n="$ops" -v hz="$hz" -v d="$tgt" 'BEGIN{if (d=="direct") print "-"; else printf "%.2f", t/hz*1e6/n}')" \
				"$(field "$tmp/out.json" "['latency_us']['p50']")" "$(field "$tmp/out.json" "['latency_us']['p99']")" >>"$results"
		done
	done
done

python3 - "$results" "$rounds" "$secs" <<'EOF'
import sys, statistics as st, datetime, os
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print(f"## hot keys: {datetime.date.today()}, {os.cpu_count()} cores, {sys.argv[2]} interleaved rounds of {sys.argv[3]}s, 50 clients, pipeline 1, medians")
print()
print("| scenario | target | ops/s | vs direct | GETs reaching Redis per 100 client GETs | upstream GETs cut | Redis CPU µs per client request | rproxy CPU µs/req | p50 µs | p99 µs |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
names = {"hot": "one hot key", "zipf": "Zipf(1.1), 1M keys"}
tnames = {"direct": "redis", "on": "**rproxy, tier on**", "off": "rproxy, tier off"}
for scen in ("hot", "zipf"):
    med = {}
    for tgt in ("direct", "on", "off"):
        rs = [r for r in rows if r[0] == scen and r[1] == tgt]
        f = lambda i: st.median(float(r[i]) for r in rs)
        ratio = st.median(float(r[4]) / float(r[3]) * 100 for r in rs)
        med[tgt] = dict(ops=f(2), up=ratio, rcpu=f(5), pcpu=("-" if tgt == "direct" else "%.2f" % f(6)), p50=f(7), p99=f(8))
    for tgt in ("direct", "on", "off"):
        m = med[tgt]
        cut = "" if tgt == "direct" else "%.1f%%" % (100 - m["up"] / med["direct"]["up"] * 100)
        print(f"| {names[scen]} | {tnames[tgt]} | {m['ops']:.0f} | {m['ops']/med['direct']['ops']:.2f} | {m['up']:.2f} | {cut} | {m['rcpu']:.2f} | {m['pcpu']} | {m['p50']:.0f} | {m['p99']:.0f} |")
EOF

# 3. Memory under a scan: every key admitted, 10M keys, with rproxy's GOGC
# (400) and with Go's default (100): the tier's live bytes stay in budget,
# and RSS is the live heap times the GC's headroom.
printf 'hotkeys:\n  prefixes: ["scan:"]\n  max_bytes: 16mb\n' >"$tmp/scan.yaml"
metric() { curl -s "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1==m{printf "%.0f", $2}'; }
echo
echo "## memory under a scan: 10M GETs of keys drawn uniformly from 10M (~6.3M distinct), every key admitted to a 16mb tier"
echo
echo "| GOGC | rproxy RSS before | after | tier bytes | tier entries | fills | evictions | live heap after GC | duration |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for gogc in 400 100; do
	scan=$(freeport); admin=$(freeport)
	GOGC=$gogc "$tmp/rproxy" -listen 127.0.0.1:$scan -upstream 127.0.0.1:$rport -config "$tmp/scan.yaml" -admin 127.0.0.1:$admin 2>"$tmp/scan.log" &
	scanpid=$!; pids+=($scanpid); waitping "$scan"
	before=$(rss $scanpid)
	start=$(date +%s)
	"$tmp/load" -addr 127.0.0.1:$scan -clients 16 -pipeline 16 -dist uniform -keys 10000000 -key-prefix scan: -requests 10000000 -duration 0 -json >"$tmp/scan.json"
	after=$(rss $scanpid)
	echo "| $gogc | $((before / 1024)) MB | $((after / 1024)) MB | $(metric rproxy_hotkey_tier_bytes $admin) | $(metric rproxy_hotkey_tier_entries $admin) | $(metric rproxy_hotkey_tier_fills_total $admin) | $(metric rproxy_hotkey_tier_evictions_total $admin) | $(curl -s "http://127.0.0.1:$admin/debug/pprof/heap?gc=1&debug=1" | awk '/^# HeapAlloc/{printf "%d MB", $4/1048576}') | $(($(date +%s) - start)) s |"
	kill $scanpid
done
