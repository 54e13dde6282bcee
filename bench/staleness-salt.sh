#!/usr/bin/env bash
# Cross-node staleness of salted copies (issue 19): a 3-master Redis
# Cluster, one key written every 2 ms through rproxy B (no salting) and
# read by 8 clients through rproxy A, which salts it (hotkeys.salt.copies
# 3, prefix stale:). A with the local tier on (its tracking connections
# follow the origin: a write anywhere deletes the copies) and, as before
# this change, with the tier off (copies live up to hotkeys.salt.ttl, 5s).
# The tier's detector threshold is set out of reach so the tier itself
# caches nothing: copies serve. Counts reads older than the last write
# acknowledged before the read began (bench/cmd/staleness).
# Usage: bench/staleness-salt.sh [rounds] [seconds]   (default 3, 5)
# Needs redis-server and redis-cli 7.x, go, python3.
set -euo pipefail
rounds=${1:-3}
secs=${2:-5}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A cluster node also listens on its port + 10000 (the cluster bus): pick a
# port with both free, the bus port below the ephemeral range (32768 up,
# where an outgoing connection may hold it), not one taken by an earlier node.
nodeport() {
	python3 - "$@" <<'EOF'
import random, socket, sys
taken = {int(a) for a in sys.argv[1:]}
while True:
    p = random.randint(14000, 18999)
    if p in taken or p + 10000 in taken or p - 10000 in taken:
        continue
    ss = [socket.socket(), socket.socket()]
    try:
        ss[0].bind(("127.0.0.1", p)); ss[1].bind(("127.0.0.1", p + 10000))
        print(p); break
    except OSError:
        pass
    finally:
        for s in ss: s.close()
EOF
}
waitping() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done; echo "no PONG on $1" >&2; exit 1; }
go build -o "$tmp/rproxy" ./cmd/rproxy
go build -o "$tmp/staleness" ./bench/cmd/staleness
# The cluster: three masters, no replicas, each in its own directory.
mports=() mpids=()
for i in 0 1 2; do
	p=$(nodeport "${mports[@]}")
	mkdir -p "$tmp/n$i"
	redis-server --port "$p" --bind 127.0.0.1 --dir "$tmp/n$i" --cluster-enabled yes \
		--cluster-config-file "$tmp/n$i/nodes.conf" --cluster-node-timeout 2000 \
		--save "" --appendonly no >"$tmp/n$i/redis.log" 2>&1 &
	mpids+=($!); pids+=($!); mports+=("$p")
done
for p in "${mports[@]}"; do waitping "$p"; done
redis-cli --cluster create "${mports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$tmp/create.log" 2>&1 ||
	{ cat "$tmp/create.log" >&2; exit 1; }
for p in "${mports[@]}"; do
	for _ in $(seq 200); do redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && break; sleep 0.05; done
	redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || { echo "cluster_state not ok on $p" >&2; exit 1; }
done

base=$(printf 'upstream:\n  address: 127.0.0.1:%s\n  mode: cluster\n' "${mports[0]}")
printf '%s\nhotkeys:\n  tier: false\n' "$base" >"$tmp/b.yaml"
printf '%s\nhotkeys:\n  threshold: 1000000000\n  salt:\n    copies: 3\n    prefixes: ["stale:"]\n' "$base" >"$tmp/a.yaml"
printf '%s\nhotkeys:\n  tier: false\n  salt:\n    copies: 3\n    prefixes: ["stale:"]\n' "$base" >"$tmp/aoff.yaml"
declare -A port
for c in b a aoff; do
	port[$c]=$(freeport)
	"$tmp/rproxy" -listen 127.0.0.1:${port[$c]} -config "$tmp/$c.yaml" >/dev/null 2>"$tmp/$c.log" &
	pids+=($!)
done
for c in b a aoff; do waitping "${port[$c]}"; done

"$tmp/staleness" -rounds "$rounds" -duration "${secs}s" -key stale:n \
	-target rproxy-salted-tier-on=127.0.0.1:${port[b]},127.0.0.1:${port[a]} \
	-target rproxy-salted-tier-off=127.0.0.1:${port[b]},127.0.0.1:${port[aoff]}
