#!/usr/bin/env bash
# Start rproxy in front of a private local redis-server (usage: make run).
#
#   LISTEN    proxy address           (default 127.0.0.1:6380)
#   ADMIN     admin/metrics address   (default 127.0.0.1:9121)
#   UPSTREAM  use this Redis instead of starting one, e.g. 127.0.0.1:6379
#   CONFIG    optional rproxy config file, passed as -config
#
# Ctrl-C stops the proxy and the redis-server this script started.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

LISTEN=${LISTEN:-127.0.0.1:6380}
ADMIN=${ADMIN:-127.0.0.1:9121}
UPSTREAM=${UPSTREAM:-}
CONFIG=${CONFIG:-}

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=$PATH:/usr/local/go/bin
fi
if ! command -v go >/dev/null 2>&1; then
	echo "run.sh: go is not on PATH (install Go, see go.mod for the version)" >&2
	exit 1
fi

bash scripts/ensure-redis.sh

REDIS_PID=
REDIS_DIR=
cleanup() {
	if [ -n "$REDIS_PID" ] && kill -0 "$REDIS_PID" 2>/dev/null; then
		kill "$REDIS_PID" 2>/dev/null || true
		wait "$REDIS_PID" 2>/dev/null || true
		echo "run.sh: stopped redis-server (pid $REDIS_PID)" >&2
	fi
	if [ -n "$REDIS_DIR" ]; then
		rm -rf "$REDIS_DIR"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# port_busy PORT: true if something listens on 127.0.0.1:PORT.
port_busy() {
	local p=$1
	if redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
		return 0
	fi
	if command -v ss >/dev/null 2>&1; then
		[ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] && return 0
	fi
	# bash /dev/tcp: connecting succeeds only if the port listens.
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		return 0
	fi
	return 1
}

if [ -z "$UPSTREAM" ]; then
	port=
	for p in $(seq 6390 6489); do
		if ! port_busy "$p"; then
			port=$p
			break
		fi
	done
	if [ -z "$port" ]; then
		echo "run.sh: no free port in 6390-6489 for redis-server; set UPSTREAM=host:port" >&2
		exit 1
	fi
	REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/rproxy-run.XXXXXX")
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
		--daemonize no --dir "$REDIS_DIR" --logfile "$REDIS_DIR/redis.log" &
	REDIS_PID=$!
	UPSTREAM=127.0.0.1:$port
	for _ in $(seq 100); do
		if ! kill -0 "$REDIS_PID" 2>/dev/null; then
			echo "run.sh: redis-server exited; its log:" >&2
			tail -n 20 "$REDIS_DIR/redis.log" >&2 || true
			REDIS_PID=
			exit 1
		fi
		if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
			break
		fi
		sleep 0.1
	done
	if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" != PONG ]; then
		echo "run.sh: redis-server on $UPSTREAM does not answer PING; log: $REDIS_DIR/redis.log" >&2
		exit 1
	fi
	echo "run.sh: started redis-server on $UPSTREAM (pid $REDIS_PID, log $REDIS_DIR/redis.log)" >&2
else
	echo "run.sh: using upstream $UPSTREAM" >&2
fi

VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
mkdir -p bin
go build -ldflags "-X main.version=$VERSION" -o bin/rproxy ./cmd/rproxy

args=(-listen "$LISTEN" -upstream "$UPSTREAM" -admin "$ADMIN")
if [ -n "$CONFIG" ]; then
	args+=(-config "$CONFIG")
fi

cat >&2 <<MSG

  redis   $UPSTREAM
  proxy   $LISTEN
  admin   $ADMIN

  try:    redis-cli -h ${LISTEN%:*} -p ${LISTEN##*:} ping
  stop:   Ctrl-C

MSG

# Not exec: the EXIT trap must still stop redis-server when the proxy exits.
bin/rproxy "${args[@]}"
