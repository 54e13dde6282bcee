#!/usr/bin/env bash
# Cache-aside stampede (issue 19): 200 naive cache-aside workers on one key
# with a 2 s TTL, 6.5 s per run, directly on Redis and through rproxy's
# default config (miss collapsing on, hotkeys.miss_wait 200ms), counting
# the simulated database's calls. Rounds alternate the order.
# Usage: bench/stampede.sh [rounds] [db latency]   (default 3, 20ms)
set -euo pipefail
rounds=${1:-3}
dblat=${2:-20ms}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitping() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done; echo "no PONG on $1" >&2; exit 1; }

go build -o "$tmp/rproxy" ./cmd/rproxy
go build -o "$tmp/stampede" ./bench/cmd/stampede
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!); waitping "$rport"
pport=$(freeport)
"$tmp/rproxy" -listen 127.0.0.1:$pport -upstream 127.0.0.1:$rport 2>"$tmp/rproxy.log" &
pids+=($!); waitping "$pport"
off=$(freeport)
printf 'hotkeys:\n  miss_wait: 0s\n' >"$tmp/off.yaml"
"$tmp/rproxy" -listen 127.0.0.1:$off -upstream 127.0.0.1:$rport -config "$tmp/off.yaml" 2>"$tmp/off.log" &
pids+=($!); waitping "$off"

"$tmp/stampede" -redis 127.0.0.1:$rport -rounds "$rounds" -db-latency "$dblat" \
	-target direct=127.0.0.1:$rport -target rproxy=127.0.0.1:$pport -target rproxy-nocollapse=127.0.0.1:$off
