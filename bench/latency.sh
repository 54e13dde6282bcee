#!/usr/bin/env bash
# bench/latency.sh OLD NEW MODE [rounds] — latency of two rproxy builds,
# twemproxy and direct Redis on one redis-server, target order rotated
# each round. MODE rtt: one client in closed loop for 3 s (the hop each
# proxy adds to a round trip); MODE open: 50 clients, 40,000 GET/s for 5 s
# (issue 18's open-loop target; RATE=n for another rate). Prints per round: target, ops/s, p50, p99,
# p99.9 (µs) and the target process's CPU µs per op (utime+stime from
# /proc); in open loop also the p99 of the service time (from the actual
# send) and of the send lag (how late the generator sent), which tell a
# slow target from a schedule that slipped. Needs redis-server, nutcracker,
# python3.
set -euo pipefail
old=${1:?usage: bench/latency.sh OLD NEW rtt|open [rounds]}
new=${2:?usage: bench/latency.sh OLD NEW rtt|open [rounds]}
mode=${3:?usage: bench/latency.sh OLD NEW rtt|open [rounds]}
rounds=${4:-3}
case $mode in
rtt) args="-clients 1 -duration 3s" ;;
open) args="-clients 50 -rate ${RATE:-40000} -duration 5s" ;;
*) echo "MODE must be rtt or open" >&2; exit 2 ;;
esac
dir=$(mktemp -d)
pids=
trap 'kill $pids 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$(dirname "$0")/.."
go build -o "$dir/load" ./bench/cmd/load
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rp=$(free_port); tp=$(free_port); op=$(free_port); np=$(free_port)
redis-server --port "$rp" --save '' --appendonly no >"$dir/redis.log" 2>&1 &
rpid=$!
printf 'pool:\n  listen: 127.0.0.1:%s\n  redis: true\n  servers:\n    - 127.0.0.1:%s:1\n' "$tp" "$rp" >"$dir/nut.yml"
nutcracker -c "$dir/nut.yml" >"$dir/nut.log" 2>&1 &
tpid=$!
"$old" -listen "127.0.0.1:$op" -upstream "127.0.0.1:$rp" >"$dir/old.log" 2>&1 &
opid=$!
"$new" -listen "127.0.0.1:$np" -upstream "127.0.0.1:$rp" >"$dir/new.log" 2>&1 &
npid=$!
pids="$rpid $tpid $opid $npid"
for p in "$rp" "$tp" "$op" "$np"; do
	for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
"$dir/load" -addr "127.0.0.1:$rp" -prepopulate -requests 1 -json >/dev/null
targets=(direct twemproxy old new)
echo "round target ops_per_s p50_us p99_us p99_9_us cpu_us_per_op service_p99_us send_lag_p99_us"
for r in $(seq "$rounds"); do
	for i in 0 1 2 3; do
		t=${targets[$(((i + r) % 4))]}
		case $t in
		direct) p=$rp pid=$rpid ;;
		twemproxy) p=$tp pid=$tpid ;;
		old) p=$op pid=$opid ;;
		new) p=$np pid=$npid ;;
		esac
		c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
		# shellcheck disable=SC2086 # args holds several flags
		"$dir/load" -addr "127.0.0.1:$p" $args -json >"$dir/out.json"
		c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
		python3 - "$dir/out.json" "$r" "$t" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); l = d["latency_us"]
cpu = (float(sys.argv[5]) - float(sys.argv[4])) / float(sys.argv[6]) * 1e6 / d["total_ops"]
svc, lag = d.get("service_latency_us") or {}, d.get("send_lag_us") or {}
print(sys.argv[2], sys.argv[3], round(d["ops_per_sec"]), l["p50"], l["p99"], l["p99_9"], round(cpu, 2),
      svc.get("p99", "-"), lag.get("p99", "-"))
PY
	done
done
