#!/usr/bin/env bash
# Client-scenario suite: the scenarios of suites/clients/, as each client
# library sends them, run against a redis-server this script starts, then
# through rproxy in front of it with the suite config (suites/rproxy-suite.yaml,
# mode "rproxy") and with rproxy's default config (mode "default": policy,
# big-key probes and jitter on); each is compared with the direct result,
# scenario by scenario. With CLIENT_SUITE_CLUSTER=1 (the default) also mode
# "cluster": rproxy with the suite config in front of a 3-master Redis Cluster
# it starts, compared with the same direct (one redis-server) result: a client
# pointed at rproxy should not see that its data is spread over masters. And
# mode "salted": the same cluster through rproxy with every scenario key
# salted (hotkeys.salt, three copies) and the local tier off, so that only
# rproxy's own bookkeeping keeps the copies coherent with the writes.
# With CLIENT_SUITE_SENTINEL=1 (the default) also mode "sentinel": rproxy
# with the suite config in upstream.mode sentinel, finding the same
# redis-server through a Sentinel this script starts (the Sentinel watches
# it in every mode, so the direct run sees what the Sentinel does too).
# Usage: make test-client-suite.
#
#   CLIENT_SUITE_LIBS      libraries to run (default "py go", plus "ioredis
#                          noderedis" when their node_modules are installed)
#   CLIENT_SUITE_MAX_DIFFER  fail when more scenario runs (library x rproxy
#                          config x scenario) differ from the direct result
#                          than this, intended differences aside (-1 = never;
#                          the Makefile sets the guard). A scenario that fails
#                          against Redis itself (broken) always fails.
#   CLIENT_SUITE_CLUSTER   1 (default): also run every library through rproxy
#                          in front of a 3-master cluster, plain and salted;
#                          0: not
#   CLIENT_SUITE_SENTINEL  1 (default): also run every library through rproxy
#                          in mode sentinel; 0: not
#   CLIENT_SUITE_OUT       output folder (default suites/out/clients)
#   CLIENT_SUITE_CONFIG    rproxy's config in modes rproxy, cluster and
#                          sentinel (default suites/rproxy-suite.yaml; those
#                          two add an upstream section to it)
#   CLIENT_SUITE_CLUSTER_ADD  a YAML file appended to rproxy's config in
#                          mode cluster only (settings only a cluster takes,
#                          such as hotkeys.salt)
#   RPROXY_BIN             rproxy binary (default: built into bin/rproxy)
#
# Needs /usr/bin/python3 with redis-py (Debian's python3-redis: installed as
# root when missing) and Go.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=$PATH:/usr/local/go/bin
fi
OUT=${CLIENT_SUITE_OUT:-$ROOT/suites/out/clients}
MAX_DIFFER=${CLIENT_SUITE_MAX_DIFFER:--1}
CLUSTER=${CLIENT_SUITE_CLUSTER:-1}
SENTINEL=${CLIENT_SUITE_SENTINEL:-1}
CONFIG=${CLIENT_SUITE_CONFIG:-$ROOT/suites/rproxy-suite.yaml}
PY=/usr/bin/python3

log() { echo "client-suite: $*" >&2; }

bash scripts/ensure-redis.sh
if ! "$PY" -c 'import redis' 2>/dev/null; then
	if [ "$(id -u)" -eq 0 ]; then
		log "installing python3-redis"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-redis >/dev/null
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-redis >/dev/null
	else
		log "redis-py is missing: run  sudo apt-get install -y python3-redis"
		exit 1
	fi
fi

# ioredis and node-redis, pinned in suites/clients/node/package-lock.json,
# installed with `npm ci` when node and npm are there.
LIBS=${CLIENT_SUITE_LIBS:-}
if [ -z "$LIBS" ]; then
	LIBS="py go"
	if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
		if [ ! -d suites/clients/node/node_modules/ioredis ] || [ ! -d suites/clients/node/node_modules/redis ]; then
			log "npm ci in suites/clients/node"
			(cd suites/clients/node && npm ci --no-audit --no-fund --loglevel=error >&2) ||
				log "npm ci failed: ioredis and node-redis scenarios not run"
		fi
		[ -d suites/clients/node/node_modules/ioredis ] && LIBS+=" ioredis"
		[ -d suites/clients/node/node_modules/redis ] && LIBS+=" noderedis"
	else
		log "node/npm not installed: ioredis and node-redis scenarios not run"
	fi
fi

mkdir -p bin "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.err "$OUT/summary.md"
if [ -z "${RPROXY_BIN:-}" ]; then
	go build -o bin/rproxy ./cmd/rproxy
	RPROXY_BIN=$ROOT/bin/rproxy
fi
if [[ " $LIBS " == *" go "* ]]; then
	go build -o bin/client-suite-goredis ./suites/clients/goredis
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local p
	for p in $(seq "$1" "$(($1 + 200))"); do
		port_free "$p" && { echo "$p"; return 0; }
	done
	log "no free port from $1"
	return 1
}
wait_ping() {
	for _ in $(seq 100); do
		kill -0 "$2" 2>/dev/null || return 1
		[ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ] && return 0
		sleep 0.1
	done
	return 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rproxy-client-suite.XXXXXX")
REDIS_PID=
PROXY_PID=
DEFAULT_PID=
SENTINEL_PIDS=()
CLUSTER_PIDS=()
stop_proc() {
	[ -n "$1" ] || return 0
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
cleanup() {
	stop_proc "$PROXY_PID"
	stop_proc "$DEFAULT_PID"
	for pid in "${SENTINEL_PIDS[@]}"; do stop_proc "$pid"; done
	stop_proc "$REDIS_PID"
	for pid in "${CLUSTER_PIDS[@]}"; do stop_proc "$pid"; done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

RPORT=$(free_port 22000)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
	--dir "$WORK" --logfile "$WORK/redis.log" &
REDIS_PID=$!
wait_ping "$RPORT" "$REDIS_PID" || { log "redis-server did not start"; tail "$WORK/redis.log" >&2; exit 1; }
PPORT=$(free_port 22300)
"$RPROXY_BIN" -config "$CONFIG" -listen "127.0.0.1:$PPORT" -upstream "127.0.0.1:$RPORT" >"$OUT/rproxy.log" 2>&1 &
PROXY_PID=$!
wait_ping "$PPORT" "$PROXY_PID" || { log "rproxy did not start"; tail "$OUT/rproxy.log" >&2; exit 1; }
DPORT=$(free_port $((PPORT + 1)))
"$RPROXY_BIN" -listen "127.0.0.1:$DPORT" -upstream "127.0.0.1:$RPORT" -log-level warn >"$OUT/rproxy-default.log" 2>&1 &
DEFAULT_PID=$!
wait_ping "$DPORT" "$DEFAULT_PID" || { log "rproxy (default config) did not start"; tail "$OUT/rproxy-default.log" >&2; exit 1; }

MODES="direct rproxy default"
if [ "$SENTINEL" = 1 ]; then
	# One Sentinel, quorum 1, monitoring the server as master "suite"
	# (no replica: it never fails over); started before any run, so that
	# the direct run meets its connections, PINGs and hello messages too.
	SPORT=$(free_port $((DPORT + 50)))
	mkdir -p "$WORK/sentinel"
	printf 'port %s\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\nsentinel monitor suite 127.0.0.1 %s 1\n' \
		"$SPORT" "$WORK/sentinel" "$OUT/sentinel.log" "$RPORT" >"$WORK/sentinel/sentinel.conf"
	redis-server "$WORK/sentinel/sentinel.conf" --sentinel &
	SENTINEL_PIDS+=($!)
	wait_ping "$SPORT" $! || { log "redis-sentinel did not start"; tail "$OUT/sentinel.log" >&2; exit 1; }
	{ cat "$CONFIG"; printf '\nupstream:\n  mode: sentinel\n  sentinel:\n    master_name: suite\n    addresses: ["127.0.0.1:%s"]\n' "$SPORT"; } >"$WORK/sentinel.yaml"
	SNPORT=$(free_port $((SPORT + 1)))
	"$RPROXY_BIN" -config "$WORK/sentinel.yaml" -listen "127.0.0.1:$SNPORT" >"$OUT/rproxy-sentinel.log" 2>&1 &
	SENTINEL_PIDS+=($!)
	wait_ping "$SNPORT" $! || { log "rproxy (sentinel) did not start"; tail "$OUT/rproxy-sentinel.log" >&2; exit 1; }
	MODES+=" sentinel"
fi
if [ "$CLUSTER" = 1 ]; then
	# Three masters, no replicas (scripts/cluster-lib.sh).
	source scripts/cluster-lib.sh
	start_cluster "$WORK" 14000 --save "" --appendonly no || exit 1
	{ cat "$CONFIG"; printf '\nupstream:\n  mode: cluster\n'; } >"$WORK/cluster.yaml"
	if [ -n "${CLIENT_SUITE_CLUSTER_ADD:-}" ]; then
		{ echo; cat "$CLIENT_SUITE_CLUSTER_ADD"; } >>"$WORK/cluster.yaml"
	fi
	CPORT=$(free_port $((DPORT + 1)))
	"$RPROXY_BIN" -config "$WORK/cluster.yaml" -listen "127.0.0.1:$CPORT" -upstream "127.0.0.1:${CPORTS[0]}" >"$OUT/rproxy-cluster.log" 2>&1 &
	CLUSTER_PIDS+=($!)
	wait_ping "$CPORT" $! || { log "rproxy (cluster) did not start"; tail "$OUT/rproxy-cluster.log" >&2; exit 1; }
	MODES+=" cluster"
	if grep -q '^hotkeys:' "$CONFIG"; then
		log "mode salted not run: CLIENT_SUITE_CONFIG has a hotkeys section of its own"
	else
		# Every scenario key (cs:...) salted over three masters, the tier off.
		{ cat "$CONFIG"; printf '\nupstream:\n  mode: cluster\n\nhotkeys:\n  tier: false\n  salt:\n    copies: 3\n    prefixes: ["cs:"]\n'; } >"$WORK/salted.yaml"
		SAPORT=$(free_port $((CPORT + 1)))
		"$RPROXY_BIN" -config "$WORK/salted.yaml" -listen "127.0.0.1:$SAPORT" -upstream "127.0.0.1:${CPORTS[0]}" >"$OUT/rproxy-salted.log" 2>&1 &
		CLUSTER_PIDS+=($!)
		wait_ping "$SAPORT" $! || { log "rproxy (salted) did not start"; tail "$OUT/rproxy-salted.log" >&2; exit 1; }
		MODES+=" salted"
	fi
fi

run_lib() { # LIB ADDR
	case $1 in
	py) timeout 300 "$PY" suites/clients/py/scenarios.py "$2" ;;
	go) timeout 300 bin/client-suite-goredis "$2" ;;
	ioredis) timeout 300 node suites/clients/node/ioredis.js "$2" ;;
	noderedis) timeout 300 node suites/clients/node/noderedis.js "$2" ;;
	*) log "unknown library $1"; return 1 ;;
	esac
}

for lib in $LIBS; do
	for mode in $MODES; do
		case $mode in
		direct) addr=127.0.0.1:$RPORT ;;
		rproxy) addr=127.0.0.1:$PPORT ;;
		default) addr=127.0.0.1:$DPORT ;;
		cluster) addr=127.0.0.1:$CPORT ;;
		salted) addr=127.0.0.1:$SAPORT ;;
		sentinel) addr=127.0.0.1:$SNPORT ;;
		esac
		t0=$SECONDS
		if ! run_lib "$lib" "$addr" >"$OUT/$lib-$mode.json" 2>"$OUT/$lib-$mode.err"; then
			log "$lib $mode: exited non-zero; stderr:"
			tail -n 5 "$OUT/$lib-$mode.err" >&2
		fi
		log "$lib $mode: $((SECONDS - t0))s"
	done
done

compared=rproxy,default
[ "$CLUSTER" = 1 ] && compared+=,cluster
[[ " $MODES " == *" salted "* ]] && compared+=,salted
[ "$SENTINEL" = 1 ] && compared+=,sentinel
result=$("$PY" suites/clients/compare.py "$OUT" "$compared" $LIBS | tee "$OUT/compare.txt" | tail -n 1)
cat "$OUT/compare.txt"
same=$(sed -E 's/.*same=([0-9]+).*/\1/' <<<"$result")
differ=$(sed -E 's/.*differ=([0-9]+).*/\1/' <<<"$result")
broken=$(sed -E 's/.*broken=([0-9]+).*/\1/' <<<"$result")
if [ "$broken" -gt 0 ]; then
	log "FAIL: $broken scenario(s) broken against Redis itself"
	exit 1
fi
if [ "$MAX_DIFFER" -ge 0 ] && [ "$differ" -gt "$MAX_DIFFER" ]; then
	log "FAIL: $differ scenario runs differ through rproxy, over the threshold $MAX_DIFFER (CLIENT_SUITE_MAX_DIFFER)"
	exit 1
fi
log "$same scenario runs as direct, $differ differ through rproxy (threshold $MAX_DIFFER)"
