#!/usr/bin/env bash
# bench/mixed.sh OLD NEW [rounds] — a small GET's latency behind large
# writes: through each target in turn (two rproxy builds, twemproxy and
# direct Redis, order reversed every other round), 10 clients pipeline
# 100 KB SETs (redis-benchmark -P 16, 200 keys) while one client sends GETs
# of small values in closed loop for 4 s (bench/cmd/load). Prints per
# round: target, the GETs' p50, p99 and p99.9 (µs) and GETs/s, and the
# SETs/s of the load behind them. MIXED_BG=get: the 10 clients pipeline GETs
# of 100 KB values instead (the megabytes are then replies, not commands).
# Needs redis-server, redis-benchmark,
# nutcracker, python3 (bench/targets.sh starts the rproxy builds).
set -euo pipefail
old=${1:?usage: bench/mixed.sh OLD NEW [rounds]}
new=${2:?usage: bench/mixed.sh OLD NEW [rounds]}
rounds=${3:-3}
bgtest=${MIXED_BG:-set}
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$(dirname "$0")/.."
. bench/targets.sh
go build -o "$dir/load" ./bench/cmd/load
rp=$(free_port)
redis-server --port "$rp" --save '' --appendonly no >"$dir/redis.log" 2>&1 &
pids+=($!)
wait_ping "$rp"
declare -A port pid
targets=()
start_rproxy old "$old"
start_rproxy new "$new"
port[twemproxy]=$(free_port)
printf 'pool:\n  listen: 127.0.0.1:%s\n  redis: true\n  servers:\n    - 127.0.0.1:%s:1\n' "${port[twemproxy]}" "$rp" >"$dir/nut.yml"
nutcracker -c "$dir/nut.yml" >"$dir/nut.log" 2>&1 &
pids+=($!)
wait_ping "${port[twemproxy]}"
port[direct]=$rp
"$dir/load" -addr "127.0.0.1:$rp" -prepopulate -requests 1 -json >/dev/null
if [ "$bgtest" = get ]; then # the 200 keys the GETs read, 100 KB each
	redis-benchmark -p "$rp" -c 10 -n 2000 -r 200 -d 100000 -t set -q >/dev/null 2>&1
fi
echo "round target get_p50_us get_p99_us get_p99_9_us gets_per_s ${bgtest}s_per_s_behind"
for r in $(seq "$rounds"); do
	order="old new twemproxy direct"
	if ((r % 2 == 0)); then order="direct twemproxy new old"; fi
	for t in $order; do
		p=${port[$t]}
		redis-benchmark -p "$p" -c 10 -n 100000000 -r 200 -P 16 -d 100000 -t "$bgtest" -q >"$dir/bg.txt" 2>&1 &
		bg=$!
		sleep 1
		"$dir/load" -addr "127.0.0.1:$p" -clients 1 -duration 4s -json >"$dir/out.json"
		kill "$bg"
		wait "$bg" 2>/dev/null || true
		sets=$(tr '\r' '\n' <"$dir/bg.txt" | grep -io "$bgtest: rps=[0-9.]*" | tail -1 | cut -d= -f2)
		python3 - "$dir/out.json" "$r" "$t" "${sets:--}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); l = d["latency_us"]
print(sys.argv[2], sys.argv[3], l["p50"], l["p99"], l["p99_9"], round(d["ops_per_sec"]), sys.argv[4])
PY
	done
done
