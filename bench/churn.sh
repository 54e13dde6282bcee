#!/usr/bin/env bash
# bench/churn.sh [rounds] [OLD-binary] — connection churn: clients that
# connect, send one command, read its reply and close (redis-benchmark
# -k 0), as a PHP worker without persistent connections does, and a
# short-lived subscriber does (SUBSCRIBE, then close). Targets: direct
# Redis, twemproxy (nutcracker) and bin/rproxy, plus OLD (another rproxy
# build) when given, in rotating order each round, on one redis-server.
# Prints per-round figures, then medians of connections per second, the
# ratios to twemproxy, and each proxy's CPU per connection (from /proc).
set -euo pipefail
rounds=${1:-5}
old=${2:-}
new=${RPROXY:-bin/rproxy}
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

. "$(dirname "$0")/targets.sh"
rp=$(free_port)
redis-server --port "$rp" --save '' --appendonly no --daemonize no --maxclients 10000 >"$dir/redis.log" 2>&1 &
pids+=($!)
wait_ping "$rp"
redis-cli -p "$rp" set k v >/dev/null

declare -A port pid
targets=(redis)
port[redis]=$rp
pid[redis]=
nut=$(command -v nutcracker || echo /usr/sbin/nutcracker)
if [ -x "$nut" ]; then
	port[twemproxy]=$(free_port)
	cat >"$dir/nutcracker.yml" <<EOF
bench:
  listen: 127.0.0.1:${port[twemproxy]}
  hash: fnv1a_64
  distribution: ketama
  redis: true
  timeout: 5000
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  servers:
    - 127.0.0.1:$rp:1
EOF
	"$nut" -c "$dir/nutcracker.yml" -o "$dir/nutcracker.log" -s "$(free_port)" &
	pids+=($!)
	pid[twemproxy]=$!
	targets+=(twemproxy)
	wait_ping "${port[twemproxy]}"
else
	echo "note: nutcracker not installed; no twemproxy column" >&2
fi
start_rproxy rproxy "$new"
[ -n "$old" ] && start_rproxy rproxy-old "$old"

run() { # port clients requests command... -> connections (= requests) per second
	local p=$1 c=$2 n=$3
	shift 3
	redis-benchmark -p "$p" -k 0 -c "$c" -n "$n" -q "$@" 2>/dev/null |
		tr '\r' '\n' | awk '/requests per second/ {for (i = 2; i <= NF; i++) if ($i == "requests") print $(i-1)}' | tail -1
}
echo "round test target conn_per_s cpu_us_per_conn" >"$dir/rows"
nt=${#targets[@]}
for r in $(seq "$rounds"); do
	for test in get-c1 get-c8 subscribe-c1; do
		case $test in
		get-c1) args=(1 4000 GET k) ;;
		get-c8) args=(8 16000 GET k) ;;
		subscribe-c1) args=(1 4000 SUBSCRIBE ch) ;;
		esac
		for i in $(seq 0 $((nt - 1))); do # a rotating order: none is always first
			t=${targets[$(((i + r) % nt))]}
			[ "$test" = subscribe-c1 ] && [ "$t" = twemproxy ] && continue # no pub/sub in twemproxy
			measure_row "$r" "$test" "$t" "${args[1]}" run "${port[$t]}" "${args[@]}"
		done
	done
done
python3 - "$dir/rows" "${targets[@]}" <<'EOF'
import sys, statistics, collections
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
targets = sys.argv[2:]
cps, us = collections.defaultdict(list), collections.defaultdict(list)
ratio, vsredis = collections.defaultdict(list), collections.defaultdict(list)
byround = collections.defaultdict(dict)
for r, test, t, c, u in rows:
    cps[(test, t)].append(float(c)); us[(test, t)].append(float(u))
    byround[(test, r)][t] = float(c)
for (test, r), v in byround.items():
    for t in targets:
        if "twemproxy" in v and t in v:
            ratio[(test, t)].append(v[t] / v["twemproxy"])
        if "redis" in v and t in v:
            vsredis[(test, t)].append(v[t] / v["redis"])
proxies = [t for t in targets if t not in ("redis", "twemproxy")]
head = [f"{t} conn/s" for t in targets] + [f"{t}/twemproxy" for t in proxies] + [f"{t}/redis" for t in proxies] + [f"{t} CPU us/conn" for t in targets if t != "redis"]
print("\n| test | " + " | ".join(head) + " |")
print("|---|" + "---:|" * len(head))
for test in ("get-c1", "get-c8", "subscribe-c1"):
    cell = lambda d, t, f: f % statistics.median(d[(test, t)]) if d[(test, t)] else "-"
    cells = [cell(cps, t, "%.0f") for t in targets]
    cells += [cell(ratio, t, "%.2f") for t in proxies] + [cell(vsredis, t, "%.2f") for t in proxies]
    cells += [cell(us, t, "%.1f") for t in targets if t != "redis"]
    print(f"| {test} | " + " | ".join(cells) + " |")
EOF
