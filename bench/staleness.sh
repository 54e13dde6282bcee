#!/usr/bin/env bash
# Cross-node staleness (issue 19): one key written every 2 ms through one
# node and read by 8 clients through another, directly on Redis, through
# two rproxies with the default config (hotkeys.write_limit 4: the
# write-hot key is not admitted to the tier), and through two rproxies
# with write_limit 0 (the tier holds the key between writes). Counts reads
# older than the last write acknowledged before the read began.
# Usage: bench/staleness.sh [rounds] [seconds]   (default 3, 5)
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
go build -o "$tmp/staleness" ./bench/cmd/staleness
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!); waitping "$rport"
printf 'hotkeys:\n  write_limit: 0\n' >"$tmp/off.yaml"
port_of=()
start() { # name [config]: starts an rproxy, its port appended to port_of
	local port; port=$(freeport)
	local cfg=(); [ -n "${2:-}" ] && cfg=(-config "$2")
	"$tmp/rproxy" -listen 127.0.0.1:$port -upstream 127.0.0.1:$rport "${cfg[@]}" >/dev/null 2>"$tmp/$1.log" &
	pids+=($!); waitping "$port"; port_of+=("$port")
}
start a; start b; start aoff "$tmp/off.yaml"; start boff "$tmp/off.yaml"
a=${port_of[0]} b=${port_of[1]} aoff=${port_of[2]} boff=${port_of[3]}

"$tmp/staleness" -rounds "$rounds" -duration "${secs}s" \
	-target direct=127.0.0.1:$rport,127.0.0.1:$rport \
	-target rproxy=127.0.0.1:$b,127.0.0.1:$a \
	-target rproxy-write_limit-0=127.0.0.1:$boff,127.0.0.1:$aoff
