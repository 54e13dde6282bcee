#!/usr/bin/env bash
# bench/tls-idle.sh OLD NEW [N] [ROUNDS] — memory per idle TLS client: a
# TLS-only redis-server (client certificates required), then per round,
# in turn, an rproxy of each build taking TLS clients (client certificates
# required) and dialling that server with TLS; N clients (default 2000)
# connect, PING once and idle (bench/cmd/tlsidle) while the proxy's Go heap
# after a GC and its goroutine stacks (/metrics, GET /debug/pprof/heap?gc=1
# first) and its RSS are read. Direct Redis's RSS growth is read too, as
# the reference. Prints per-round rows (KB per client), then medians.
set -euo pipefail
old=${1:?usage: bench/tls-idle.sh OLD NEW [N] [ROUNDS]}
new=${2:?usage: bench/tls-idle.sh OLD NEW [N] [ROUNDS]}
n=${3:-2000}
rounds=${4:-3}
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
. bench/targets.sh
ulimit -n "$(ulimit -Hn)" || true

bash scripts/make-test-certs.sh "$dir/tls"
go build -o "$dir/tlsidle" ./bench/cmd/tlsidle
rp=$(free_port)
redis-server --port 0 --tls-port "$rp" --include "$dir/tls/redis-tls.conf" --bind 127.0.0.1 --save '' \
	--appendonly no --maxclients 20000 >"$dir/redis.log" 2>&1 &
pids+=($!)
rpid=$!
cli=(redis-cli --tls --cacert "$dir/tls/ca.crt" --cert "$dir/tls/client.crt" --key "$dir/tls/client.key")
for _ in $(seq 100); do "${cli[@]}" -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.1; done
{ cat "$dir/tls/rproxy-tls.yaml"; printf 'limits:\n  max_clients: 20000\nlog:\n  level: warn\n'; } >"$dir/rproxy.yaml"
idle=("$dir/tlsidle" -n "$n" -ca "$dir/tls/ca.crt" -cert "$dir/tls/client.crt" -key "$dir/tls/client.key")
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
metric() { curl -s "http://$1/metrics" | awk -v m="$2" '$1 == m {printf "%.0f", $2}'; }
gc() { curl -s -o /dev/null "http://$1/debug/pprof/heap?gc=1"; }
# hold TARGET PORT PID: the clients connect and idle; prints when they are up.
hold() {
	"${idle[@]}" -addr "127.0.0.1:$2" -hold 30s >"$dir/idle.out" 2>&1 &
	local ipid=$!
	for _ in $(seq 600); do grep -q ready "$dir/idle.out" && break; kill -0 "$ipid" 2>/dev/null || { cat "$dir/idle.out" >&2; exit 1; }; sleep 0.1; done
	sleep 1
	echo "$ipid"
}
echo "round target heap_kb stack_kb rss_kb (per idle TLS client, $n clients)"
for r in $(seq "$rounds"); do
	r0=$(rss "$rpid")
	ipid=$(hold redis "$rp" "$rpid")
	echo "$r redis - - $(awk -v a="$r0" -v b="$(rss "$rpid")" -v n="$n" 'BEGIN {printf "%.1f", (b-a)/n}')"
	kill "$ipid"; wait "$ipid" 2>/dev/null || true
	for t in old new; do
		bin=$old
		[ "$t" = new ] && bin=$new
		pp=$(free_port)
		ap=$(free_port)
		"$bin" -config "$dir/rproxy.yaml" -listen "127.0.0.1:$pp" -upstream "127.0.0.1:$rp" -admin "127.0.0.1:$ap" >"$dir/$t.log" 2>&1 &
		ppid=$!
		for _ in $(seq 100); do "${cli[@]}" -p "$pp" ping >/dev/null 2>&1 && break; sleep 0.1; done
		gc "127.0.0.1:$ap"
		h0=$(metric "127.0.0.1:$ap" go_memstats_heap_alloc_bytes)
		s0=$(metric "127.0.0.1:$ap" go_memstats_stack_inuse_bytes)
		p0=$(rss "$ppid")
		ipid=$(hold "$t" "$pp" "$ppid")
		gc "127.0.0.1:$ap"
		h1=$(metric "127.0.0.1:$ap" go_memstats_heap_alloc_bytes)
		s1=$(metric "127.0.0.1:$ap" go_memstats_stack_inuse_bytes)
		p1=$(rss "$ppid")
		awk -v r="$r" -v t="$t" -v n="$n" -v h="$((h1 - h0))" -v s="$((s1 - s0))" -v p="$((p1 - p0))" \
			'BEGIN {printf "%s %s %.1f %.1f %.1f\n", r, t, h/n/1024, s/n/1024, p/n}'
		kill "$ipid" "$ppid"; wait "$ipid" "$ppid" 2>/dev/null || true
	done
done | tee "$dir/rows"
echo "medians (KB per idle TLS client):"
median() { awk -v t="$1" -v c="$2" '$2 == t {print $c}' "$dir/rows" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for t in redis old new; do
	echo "$t: heap $(median "$t" 3), stacks $(median "$t" 4), RSS $(median "$t" 5)"
done
