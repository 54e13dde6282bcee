#!/usr/bin/env bash
# Stands in for redis-server in redigo's test harness (its -redis-server flag),
# for the run through rproxy: the harness starts "redis-server --port P ..." and
# waits for "Ready to accept connections" on its standard output. This starts
# redis-server with those arguments on a free port, rproxy on 127.0.0.1:P in
# front of it, then prints that line, and stops both on SIGINT (the harness's
# Stop) or SIGTERM.
#
# Environment (set by suites/libs/run.sh): RG_RPROXY (the rproxy binary),
# RG_CONFIG (its config), RG_DIR (where redis.log and rproxy.log go).
set -u
[ "${1:-}" = --version ] && exec redis-server --version
args=() port=
while [ $# -gt 0 ]; do
	if [ "$1" = --port ]; then
		port=$2
		shift 2
		continue
	fi
	args+=("$1")
	shift
done
[ -n "$port" ] || { echo "redigo-server.sh: no --port given" >&2; exit 2; }
ping() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; }
rport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
redis-server --port "$rport" "${args[@]}" >>"$RG_DIR/redis.log" 2>&1 &
rpid=$! ppid_=
trap 'kill $ppid_ $rpid 2>/dev/null; wait; exit 0' INT TERM
wait_ping() {
	for _ in $(seq 1 100); do
		ping "$1" && return 0
		sleep 0.05
	done
	echo "redigo-server.sh: nothing answers on $1" >&2
	kill $ppid_ $rpid 2>/dev/null
	exit 1
}
wait_ping "$rport"
"$RG_RPROXY" -config "$RG_CONFIG" -listen "127.0.0.1:$port" -upstream "127.0.0.1:$rport" >>"$RG_DIR/rproxy.log" 2>&1 &
ppid_=$!
wait_ping "$port"
echo " * Ready to accept connections (redis-server on $rport, rproxy on $port)"
wait
