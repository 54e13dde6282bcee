#!/usr/bin/env bash
# bench/ab.sh OLD NEW [rounds] — two rproxy builds side by side on one
# redis-server: redis-benchmark -c 50 -r 100000 GET and SET at -P 1 and
# -P 16, the two builds in alternating order each round, and each build's
# CPU per request from /proc. Prints per-round figures and the medians of
# the per-round ratios NEW/OLD (throughput and CPU per request).
# For changes that should cost nothing (a refactor): ratios near 1.00.
# AB_CLIENTS (default 50) and AB_SIZE (value bytes, redis-benchmark -d;
# default 3) change the load: e.g. 200 clients of 1000-byte values put
# megabytes of commands on the shared connection at -P 16.
# TLS=1: the same over TLS, clients to rproxy and rproxy to a TLS-only
# redis-server, client certificates on both sides (scripts/make-test-certs.sh).
set -euo pipefail
old=${1:?usage: bench/ab.sh OLD-binary NEW-binary [rounds]}
new=${2:?usage: bench/ab.sh OLD-binary NEW-binary [rounds]}
rounds=${3:-5}
dir=$(mktemp -d)
opid= npid=
# The two rproxies are started in command substitutions (start), so they
# are not this shell's jobs: they are killed by PID.
trap 'kill $opid $npid $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rp=$(free_port); op=$(free_port); np=$(free_port)
listen=(--port "$rp")
tls=() # redis-cli's and redis-benchmark's TLS options
conf=()
if [ "${TLS:-0}" = 1 ]; then
	bash "$(dirname "$0")/../scripts/make-test-certs.sh" "$dir/tls"
	listen=(--port 0 --tls-port "$rp" --include "$dir/tls/redis-tls.conf")
	tls=(--tls --cacert "$dir/tls/ca.crt" --cert "$dir/tls/client.crt" --key "$dir/tls/client.key")
	conf=(-config "$dir/tls/rproxy-tls.yaml")
fi
redis-server "${listen[@]}" --save '' --appendonly no --daemonize no >"$dir/redis.log" 2>&1 &
for _ in $(seq 50); do redis-cli "${tls[@]}" -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.1; done
start() { # binary port
	"$1" "${conf[@]}" -listen "127.0.0.1:$2" -upstream "127.0.0.1:$rp" >"$dir/$2.log" 2>&1 &
	echo $!
}
opid=$(start "$old" "$op")
npid=$(start "$new" "$np")
for p in "$op" "$np"; do
	for _ in $(seq 100); do redis-cli "${tls[@]}" -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; } # user+system clock ticks
run() { # port test pipeline -> prints rps
	local n=100000
	[ "$3" -gt 1 ] && n=800000
	redis-benchmark "${tls[@]}" -p "$1" -c "${AB_CLIENTS:-50}" -d "${AB_SIZE:-3}" -r 100000 -n "$n" -P "$3" -t "$2" -q 2>/dev/null |
		tr '\r' '\n' | awk '/requests per second/ {print $2}' | tail -1
}
hz=$(getconf CLK_TCK)
echo "round test P build rps cpu_us_per_req" >"$dir/rows"
for r in $(seq "$rounds"); do
	for t in get set; do
		for P in 1 16; do
			order="old new"
			[ $(((r + ${#t} + P) % 2)) -eq 0 ] && order="new old"
			for b in $order; do
				if [ "$b" = old ]; then port=$op pid=$opid; else port=$np pid=$npid; fi
				c0=$(cpu "$pid")
				rps=$(run "$port" "$t" "$P")
				c1=$(cpu "$pid")
				n=100000
				[ "$P" -gt 1 ] && n=800000
				us=$(awk -v d=$((c1 - c0)) -v hz="$hz" -v n="$n" 'BEGIN {printf "%.2f", d / hz * 1e6 / n}')
				echo "$r $t $P $b $rps $us" | tee -a "$dir/rows"
			done
		done
	done
done
python3 - "$dir/rows" <<'EOF'
import sys, statistics, collections
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
by = collections.defaultdict(dict)
for r, t, p, b, rps, us in rows:
    by[(t, p, r)][b] = (float(rps), float(us))
print("\n| test | -P | rps new/old (median of rounds) | CPU/req new/old | old rps | new rps | old us/req | new us/req |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for t in ("get", "set"):
    for p in ("1", "16"):
        rs = [v for (tt, pp, _), v in by.items() if tt == t and pp == p and "old" in v and "new" in v]
        ratio = statistics.median(v["new"][0] / v["old"][0] for v in rs)
        cpu = statistics.median(v["new"][1] / v["old"][1] for v in rs if v["old"][1] > 0)
        med = lambda b, i: statistics.median(v[b][i] for v in rs)
        print(f"| {t.upper()} | {p} | {ratio:.3f} | {cpu:.3f} | {med('old',0):.0f} | {med('new',0):.0f} | {med('old',1):.2f} | {med('new',1):.2f} |")
EOF
