#!/usr/bin/env bash
# Hot leaderboard (issue 19): 50 clients reading ZREVRANGE game:scores 0 9
# WITHSCORES while a writer ZINCRBYs every 10ms, directly on Redis, through
# rproxy's default config (tier on) and through rproxy with the tier off.
# Usage: bench/leaderboard.sh [rounds] [seconds]   (default 3, 5)
set -euo pipefail
rounds=${1:-3}
secs=${2:-5}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitping() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.05; done; echo "no PONG on $1" >&2; exit 1; }

go build -o "$tmp/rproxy" ./cmd/rproxy
go build -o "$tmp/leaderboard" ./bench/cmd/leaderboard
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!); waitping "$rport"
on=$(freeport)
"$tmp/rproxy" -listen 127.0.0.1:$on -upstream 127.0.0.1:$rport 2>"$tmp/on.log" &
pids+=($!); waitping "$on"
off=$(freeport)
printf 'hotkeys:\n  tier: false\n' >"$tmp/off.yaml"
"$tmp/rproxy" -listen 127.0.0.1:$off -upstream 127.0.0.1:$rport -config "$tmp/off.yaml" 2>"$tmp/off.log" &
pids+=($!); waitping "$off"

"$tmp/leaderboard" -redis 127.0.0.1:$rport -rounds "$rounds" -duration "${secs}s" \
	-target direct=127.0.0.1:$rport -target rproxy=127.0.0.1:$on -target rproxy-tier-off=127.0.0.1:$off
