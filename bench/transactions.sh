#!/usr/bin/env bash
# bench/transactions.sh [rounds] [OLD-binary] — transactions, optimistic
# updates and a job queue (bench/cmd/txload: MULTI..EXEC in one write,
# WATCH/GET/MULTI..EXEC, LPUSH then BRPOP, each with 10 and 50 connections) on direct
# Redis, bin/rproxy and optionally OLD (another rproxy build), in rotating
# order each round, on one redis-server. twemproxy runs none of them.
# CLUSTER=1: on a Redis Cluster of three masters instead (rproxy in cluster
# mode; direct Redis is each connection dialling its key's master).
# Prints per-round figures, then medians of operations per second, the
# ratios to Redis (and NEW/OLD) and each proxy's CPU per operation.
set -euo pipefail
rounds=${1:-5}
old=${2:-}
new=${RPROXY:-bin/rproxy}
dir=$(mktemp -d)
pids=()
CLUSTER_PIDS=()
trap 'kill "${pids[@]}" "${CLUSTER_PIDS[@]}" $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

. "$(dirname "$0")/targets.sh"
go build -o "$dir/txload" ./bench/cmd/txload
declare -A port pid
targets=()
if [ "${CLUSTER:-}" = 1 ]; then
	log() { echo "$@" >&2; }
	port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
	. "$(dirname "$0")/../scripts/cluster-lib.sh"
	start_cluster "$dir" 15000 --save '' --appendonly no
	rp=${CPORTS[0]}
	printf 'upstream:\n  mode: cluster\n' >"$dir/cluster.yaml"
	RPROXY_ARGS="-config $dir/cluster.yaml"
	targets=(redis)
	port[redis]=$rp
	pid[redis]=
else
	rp=$(free_port)
	redis-server --port "$rp" --save '' --appendonly no --daemonize no >"$dir/redis.log" 2>&1 &
	pids+=($!)
	wait_ping "$rp"
	targets=(redis)
	port[redis]=$rp
	pid[redis]=
fi
start_rproxy rproxy "$new"
[ -n "$old" ] && start_rproxy rproxy-old "$old"

txload() { # target mode connections operations -> operations per second
	local cluster=
	[ "$1" = redis ] && [ "${CLUSTER:-}" = 1 ] && cluster=-cluster
	"$dir/txload" $cluster -addr "127.0.0.1:${port[$1]}" -mode "$2" -c "$3" -n "$4" | awk '{print $2}'
}
echo "round test target ops_per_s cpu_us_per_op" >"$dir/rows"
nt=${#targets[@]}
for r in $(seq "$rounds"); do
	for test in multi-c10 multi-c50 watch-c10 watch-c50 queue-c10 queue-c50; do
		mode=${test%-c*} c=${test#*-c} n=20000
		[ "$c" = 50 ] && n=50000
		for i in $(seq 0 $((nt - 1))); do
			t=${targets[$(((i + r) % nt))]}
			measure_row "$r" "$test" "$t" "$n" txload "$t" "$mode" "$c" "$n"
		done
	done
done
python3 - "$dir/rows" "${targets[@]}" <<'PY'
import sys, statistics, collections
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
targets = sys.argv[2:]
ops, us, byround = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(dict)
for r, test, t, o, u in rows:
    ops[(test, t)].append(float(o)); us[(test, t)].append(float(u)); byround[(test, r)][t] = float(o)
def ratio(test, a, b):
    v = [x[a] / x[b] for (tt, _), x in byround.items() if tt == test and a in x and b in x]
    return "%.2f" % statistics.median(v) if v else "-"
proxies = [t for t in targets if t != "redis"]
direct = "redis" in targets
head = [f"{t} ops/s" for t in targets] + ([f"{t}/redis" for t in proxies] if direct else [])
if "rproxy-old" in targets:
    head.append("new/old")
head += [f"{t} CPU us/op" for t in proxies]
print("\n| test | " + " | ".join(head) + " |")
print("|---|" + "---:|" * len(head))
for test in ("multi-c10", "multi-c50", "watch-c10", "watch-c50", "queue-c10", "queue-c50"):
    cells = ["%.0f" % statistics.median(ops[(test, t)]) for t in targets]
    cells += [ratio(test, t, "redis") for t in proxies] if direct else []
    if "rproxy-old" in targets:
        cells.append(ratio(test, "rproxy", "rproxy-old"))
    cells += ["%.1f" % statistics.median(us[(test, t)]) for t in proxies]
    print(f"| {test} | " + " | ".join(cells) + " |")
PY
