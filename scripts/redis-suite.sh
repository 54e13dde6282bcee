#!/usr/bin/env bash
# Redis's own Tcl test suite (7.0.15, from Debian's source package) in
# external mode, against a redis-server this script starts ("direct") and
# against the same through rproxy with suites/rproxy-suite.yaml ("rproxy").
# Two more modes run the suite's cluster selection (runtest --cluster-mode:
# keys hash-tagged, cluster:skip tests left out, database 0 only):
# "direct-cluster" against one redis-server, and "cluster" through rproxy in
# front of a 3-master Redis Cluster (suite config, upstream.mode cluster).
# Two more run the whole suite over TLS (runtest --tls): "direct-tls" against
# a redis-server that takes only TLS clients and wants their certificates,
# and "tls" through rproxy taking TLS clients (tls.cert_file, client
# certificates required: tls.client_ca_file) and dialling that server with
# TLS (upstream.tls, with a client certificate). The certificates are made
# here, with openssl, into the suite's tests/tls.
# Two more run the whole suite with a Sentinel (redis-server --sentinel)
# monitoring the server: "direct-sentinel" against the server, the
# baseline (the Sentinel's own PINGs, INFOs and hello messages are seen by
# some tests), and "sentinel" through rproxy in upstream.mode sentinel,
# which finds the master through that Sentinel.
# Two more run the whole suite in database 0 (runtest --singledb: no SELECT):
# "direct-db0" against one redis-server and "db0" through rproxy as mode
# rproxy. In the suite's own database 9 every session through rproxy is
# pinned to a connection of its own; in database 0 its commands go through
# the shared, multiplexed connection (coalescing, the hot-key tier), the
# path most clients take.
# Usage: make test-redis-suite (see docs/suites.md).
#
#   REDIS_SUITE_MODES      modes to run, in order (default "direct rproxy";
#                          also "direct-cluster", "cluster", "direct-tls",
#                          "tls", "direct-sentinel", "sentinel",
#                          "direct-db0" and "db0")
#   REDIS_SUITE_UNITS      units to run (default: every unit of all_tests in
#                          tests/test_helper.tcl; external mode skips what
#                          needs its own server)
#   REDIS_SUITE_MIN_OK     fail when [ok] through rproxy is below this
#                          (0 = never; the Makefile sets the guard)
#   REDIS_SUITE_CLUSTER_MIN_OK  the same for mode cluster
#   REDIS_SUITE_TLS_MIN_OK      the same for mode tls
#   REDIS_SUITE_SENTINEL_MIN_OK the same for mode sentinel
#   REDIS_SUITE_DB0_MIN_OK      the same for mode db0
#   REDIS_SUITE_JOBS       units run at once (default 1), each with its own
#                          servers, rproxy and ports: the units mostly wait,
#                          so 2 nearly halve the time on 2 cores
#   REDIS_SUITE_STALL      seconds without a test finishing after which
#                          runtest reports [TIMEOUT] and stops the unit (60)
#   REDIS_SUITE_UNIT_TIMEOUT  hard limit per unit in seconds (600)
#   REDIS_SUITE_OUT        output folder (default suites/out/redis)
#   RPROXY_BIN             rproxy binary (default: built into bin/rproxy)
#   REDIS_SUITE_CONFIG     rproxy's config file (default suites/rproxy-suite.yaml;
#                          the cluster and TLS modes add their settings to it)
#   REDIS_SUITE_SKIP       tests skipped through rproxy (default
#                          suites/redis-suite-skip.txt: each with its reason)
#   REDIS_SUITE_CLUSTER_SKIP  more skipped in mode cluster (default
#                          suites/redis-suite-cluster-skip.txt)
#   REDIS_SUITE_DB0_SKIP   more skipped in mode db0 (default
#                          suites/redis-suite-db0-skip.txt)
#   REDIS_SUITE_SINGLEDB   1: every mode in database 0 (runtest --singledb),
#                          with mode db0's skips through rproxy (the TLS and
#                          Sentinel modes as mode db0 does the plain one)
#
# Each unit runs in its own `runtest --single` with --durable, so one unit that
# hangs or aborts costs only itself; it is reported as hung or aborted.
# Exit status: 0, or 1 when rproxy's [ok] count is under REDIS_SUITE_MIN_OK
# or cluster's under REDIS_SUITE_CLUSTER_MIN_OK (or rproxy/redis could not
# be started). Failing tests alone never fail it: the threshold is the guard.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=$PATH:/usr/local/go/bin
fi

MODES=${REDIS_SUITE_MODES:-direct rproxy}
MIN_OK=${REDIS_SUITE_MIN_OK:-0}
CLUSTER_MIN_OK=${REDIS_SUITE_CLUSTER_MIN_OK:-0}
TLS_MIN_OK=${REDIS_SUITE_TLS_MIN_OK:-0}
SENTINEL_MIN_OK=${REDIS_SUITE_SENTINEL_MIN_OK:-0}
DB0_MIN_OK=${REDIS_SUITE_DB0_MIN_OK:-0}
SINGLEDB=${REDIS_SUITE_SINGLEDB:-0}
JOBS=${REDIS_SUITE_JOBS:-1}
STALL=${REDIS_SUITE_STALL:-60}
UNIT_TIMEOUT=${REDIS_SUITE_UNIT_TIMEOUT:-600}
OUT=${REDIS_SUITE_OUT:-$ROOT/suites/out/redis}
CONFIG=${REDIS_SUITE_CONFIG:-$ROOT/suites/rproxy-suite.yaml}
SKIP=${REDIS_SUITE_SKIP:-$ROOT/suites/redis-suite-skip.txt}
CLUSTER_SKIP=${REDIS_SUITE_CLUSTER_SKIP:-$ROOT/suites/redis-suite-cluster-skip.txt}
DB0_SKIP=${REDIS_SUITE_DB0_SKIP:-$ROOT/suites/redis-suite-db0-skip.txt}

# Tests skipped through rproxy: they hang a whole unit on something no proxy
# can give (see the file for each reason), which would hide the unit's other
# tests. One test name per line; '#' lines are the reasons.
skip_args=()
cluster_skip_args=()
db0_skip_args=()
read_skips() { # FILE: appends --skiptest NAME per test to skipped
	[ -f "$1" ] || return 0
	while IFS= read -r line; do
		case $line in '#'* | '') continue ;; esac
		skipped+=(--skiptest "$line")
	done <"$1"
}
skipped=()
read_skips "$SKIP"
skip_args=("${skipped[@]}")
read_skips "$CLUSTER_SKIP"
cluster_skip_args=("${skipped[@]}")
skipped=("${skip_args[@]}")
read_skips "$DB0_SKIP"
db0_skip_args=("${skipped[@]}")
if [ "$SINGLEDB" = 1 ]; then
	skip_args=("${db0_skip_args[@]}")
fi

log() { echo "redis-suite: $*" >&2; }

SRC=$(bash scripts/fetch-redis-tests.sh)
log "tests from $SRC"
mkdir -p "$OUT"
basename "$SRC" >"$OUT/source"

# The suite runs a few binaries as src/redis-*: use the installed ones.
for b in redis-server redis-cli redis-benchmark redis-check-aof redis-check-rdb; do
	if [ ! -e "$SRC/src/$b" ] && command -v "$b" >/dev/null 2>&1; then
		ln -s "$(command -v "$b")" "$SRC/src/$b"
	fi
done

if [ -z "${RPROXY_BIN:-}" ] && [[ " $MODES " == *" rproxy "* || " $MODES " == *" cluster "* || " $MODES " == *" tls "* || " $MODES " == *" sentinel "* || " $MODES " == *" db0 "* ]]; then
	mkdir -p bin
	go build -o bin/rproxy ./cmd/rproxy
	RPROXY_BIN=$ROOT/bin/rproxy
fi

if [ -n "${REDIS_SUITE_UNITS:-}" ]; then
	UNITS=$REDIS_SUITE_UNITS
else
	UNITS=$(awk '/^set ::all_tests \{/ {on=1; next} on && /^\}/ {exit} on {print $1}' "$SRC/tests/test_helper.tcl")
fi

port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
free_port() {
	local p
	for p in $(seq "$1" "$(($1 + 200))"); do
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	log "no free port from $1"
	return 1
}
TLS_CLI=() # redis-cli's TLS options in the TLS modes
wait_ping() {
	local port=$1 pid=$2
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		[ "$(redis-cli "${TLS_CLI[@]}" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ] && return 0
		sleep 0.1
	done
	return 1
}

REDIS_PID=
PROXY_PID=
SENTINEL_PID=
CLUSTER_PIDS=()
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rproxy-redis-suite.XXXXXX")
stop_proc() {
	local pid=$1
	[ -n "$pid" ] || return 0
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}
stop_cluster() {
	local pid
	for pid in "${CLUSTER_PIDS[@]}"; do stop_proc "$pid"; done
	CLUSTER_PIDS=()
}
cleanup() {
	stop_proc "$PROXY_PID"
	stop_proc "$SENTINEL_PID"
	stop_proc "$REDIS_PID"
	stop_cluster
	stop_ahead
	PROXY_PID= REDIS_PID= SENTINEL_PID=
	rm -rf "$WDIR" # a worker's own folder; the script's: all of WORK
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Each worker (REDIS_SUITE_JOBS) has a folder and port ranges of its own,
# below the ephemeral range (32768 up): from BASE, redis-server (+0..200),
# rproxy (+300..500), a Sentinel (+250..450, started before rproxy) and
# runtest's test server (--baseport BASE+700: it listens just below);
# cluster nodes from 14000 + 1000 x worker, 300 more for each cluster
# started ahead for the next units (their bus ports 10000 higher).
RPORT=
PPORT=
SPORT=
WDIR=$WORK
BASE=
start_redis() { # [tls]
	local listen
	RPORT=$(free_port "$BASE")
	listen=(--port "$RPORT")
	if [ "${1:-}" = tls ]; then
		# TLS only, client certificates required (tls-auth-clients yes),
		# as the suite's own TLS servers.
		listen=(--port 0 --tls-port "$RPORT" --include "$TLS_DIR/redis-tls.conf")
	fi
	rm -rf "$WDIR/redis"
	mkdir -p "$WDIR/redis"
	# The configuration the suite gives the servers it starts itself.
	redis-server "$SRC/tests/assets/default.conf" "${listen[@]}" --bind 127.0.0.1 \
		--daemonize no --dir "$WDIR/redis" --logfile "$WDIR/redis/redis.log" \
		--pidfile "$WDIR/redis/redis.pid" &
	REDIS_PID=$!
	if ! wait_ping "$RPORT" "$REDIS_PID"; then
		log "redis-server on $RPORT did not start; log:"
		tail -n 20 "$WDIR/redis/redis.log" >&2 || true
		return 1
	fi
}
# start_sentinel starts a Sentinel monitoring the server on RPORT as
# master "suite" (quorum 1: it is the only one), and writes rproxy's config
# for mode sentinel to the file given.
start_sentinel() { # RPROXY_CONFIG
	SPORT=$(free_port $((BASE + 250)))
	rm -rf "$WDIR/sentinel"
	mkdir -p "$WDIR/sentinel"
	# Sentinel rewrites its config file: a fresh one per unit. No replica
	# to promote, so no failover; a server the suite makes unreachable
	# (DEBUG SLEEP) is only marked down.
	cat >"$WDIR/sentinel/sentinel.conf" <<-EOF
		port $SPORT
		bind 127.0.0.1
		daemonize no
		dir $WDIR/sentinel
		logfile $WDIR/sentinel/sentinel.log
		sentinel monitor suite 127.0.0.1 $RPORT 1
		sentinel down-after-milliseconds suite 5000
	EOF
	redis-server "$WDIR/sentinel/sentinel.conf" --sentinel &
	SENTINEL_PID=$!
	if ! wait_ping "$SPORT" "$SENTINEL_PID"; then
		log "redis-sentinel on $SPORT did not start; log:"
		tail -n 20 "$WDIR/sentinel/sentinel.log" >&2 || true
		return 1
	fi
	{ cat "$CONFIG"; printf '\nupstream:\n  mode: sentinel\n  sentinel:\n    master_name: suite\n    addresses: ["127.0.0.1:%s"]\n' "$SPORT"; } >"$1"
}
start_proxy() { # LOGFILE [CONFIG UPSTREAM_PORT]
	PPORT=$(free_port $((BASE + 300)))
	"$RPROXY_BIN" -config "${2:-$CONFIG}" -listen "127.0.0.1:$PPORT" -upstream "127.0.0.1:${3:-$RPORT}" \
		>>"$1" 2>&1 &
	PROXY_PID=$!
	if ! wait_ping "$PPORT" "$PROXY_PID"; then
		log "rproxy on $PPORT did not start; log:"
		tail -n 20 "$1" >&2 || true
		return 1
	fi
}

source scripts/cluster-lib.sh
CLUSTER_CONFIG=$WORK/cluster.yaml
{ cat "$CONFIG"; printf '\nupstream:\n  mode: cluster\n'; } >"$CLUSTER_CONFIG"

# The TLS modes' certificates (scripts/make-test-certs.sh), in the folder
# runtest --tls reads (tests/tls): a CA, a server certificate for 127.0.0.1
# (redis-server's and rproxy's), and a client certificate (runtest's, and
# rproxy's towards Redis).
TLS_DIR=$SRC/tests/tls
TLS_CONFIG=$WORK/tls.yaml
if [[ " $MODES " == *" tls "* || " $MODES " == *" direct-tls "* ]]; then
	# openssl, and Tcl's tls package for runtest --tls: installed as root
	# (or through sudo -n) when missing.
	need=()
	command -v openssl >/dev/null || need+=(openssl)
	echo 'exit [catch {package require tls}]' | tclsh >/dev/null 2>&1 || need+=(tcl-tls)
	if [ "${#need[@]}" -gt 0 ]; then
		sudo=()
		[ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
		log "installing ${need[*]} for the TLS modes"
		{ "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } ||
			{ log "the TLS modes need ${need[*]}: run  sudo apt-get install -y ${need[*]}"; exit 1; }
	fi
	bash scripts/make-test-certs.sh "$TLS_DIR"
	cat "$CONFIG" "$TLS_DIR/rproxy-tls.yaml" >"$TLS_CONFIG"
fi

# A worker in mode cluster starts the clusters of its next units ahead,
# while a unit runs: a cluster takes about 2.5 s to form (Redis holds
# cluster_state:fail for 2 s after a master starts), and most units take
# less, so one started a unit ahead would still be waited for. The nodes are
# the worker's own children (a subshell's would be orphans, which some init
# processes reap slowly, and stop_proc waits for them to be gone); only the
# wait for them to form a cluster runs in the background. Each cluster has a
# slot: a folder and a port range (cluster_base + 300 x slot), reused once
# its cluster has stopped.
CLUSTERS_AHEAD=2
cluster_base=
CLUSTER_DIR=
NEXT_SLOT=0
AHEAD=()                # slots of the clusters started ahead, oldest first
declare -A SLOT_PORTS=() SLOT_PIDS=() SLOT_FORMER=()
# start_ahead starts a cluster's nodes in the next slot and forms it in the
# background.
start_ahead() {
	local slot=$NEXT_SLOT rc=0
	local dir=$WDIR/cluster$slot ports=("${CPORTS[@]}") pids=("${CLUSTER_PIDS[@]}")
	NEXT_SLOT=$(((slot + 1) % (CLUSTERS_AHEAD + 1)))
	rm -rf "$dir"
	mkdir -p "$dir"
	CLUSTER_PIDS=()
	launch_cluster "$dir" $((cluster_base + slot * 300)) "$SRC/tests/assets/default.conf" || rc=$?
	SLOT_PORTS[$slot]="${CPORTS[*]}" SLOT_PIDS[$slot]="${CLUSTER_PIDS[*]}" SLOT_FORMER[$slot]=
	CPORTS=("${ports[@]}") CLUSTER_PIDS=("${pids[@]}")
	AHEAD+=("$slot")
	[ "$rc" = 0 ] || return "$rc"
	(
		read -ra CPORTS <<<"${SLOT_PORTS[$slot]}"
		read -ra CLUSTER_PIDS <<<"${SLOT_PIDS[$slot]}"
		form_cluster "$dir"
	) &
	SLOT_FORMER[$slot]=$!
}
# take_cluster makes the oldest cluster started ahead (started now when
# there is none) the unit's once it has formed (CPORTS, CLUSTER_PIDS and
# CLUSTER_DIR), and starts more ahead.
take_cluster() {
	local slot rc=0
	[ "${#AHEAD[@]}" -gt 0 ] || start_ahead
	slot=${AHEAD[0]}
	AHEAD=("${AHEAD[@]:1}")
	CLUSTER_DIR=$WDIR/cluster$slot
	read -ra CPORTS <<<"${SLOT_PORTS[$slot]}"
	read -ra CLUSTER_PIDS <<<"${SLOT_PIDS[$slot]}"
	wait "${SLOT_FORMER[$slot]}" || rc=$?
	if [ "$rc" != 0 ]; then
		log "the cluster in $CLUSTER_DIR did not form (exit $rc)"
		return 1
	fi
	while [ "${#AHEAD[@]}" -lt "$CLUSTERS_AHEAD" ]; do start_ahead; done
}
# stop_ahead stops the clusters started for units that will not run (the
# queue is empty, or the worker stops).
stop_ahead() {
	local slot pid
	for slot in "${AHEAD[@]}"; do
		if [ -n "${SLOT_FORMER[$slot]}" ]; then
			kill "${SLOT_FORMER[$slot]}" 2>/dev/null || true
			wait "${SLOT_FORMER[$slot]}" 2>/dev/null || true
		fi
		for pid in ${SLOT_PIDS[$slot]}; do stop_proc "$pid"; done
	done
	AHEAD=()
}

# next_unit prints the next unit of the mode's queue for a worker, and
# fails when none is left.
next_unit() { # QUEUE
	(
		flock 9
		n=$(cat "$1.next")
		u=$(sed -n "$((n + 1))p" "$1")
		[ -n "$u" ] || exit 1
		echo $((n + 1)) >"$1.next"
		echo "$u"
	) 9>"$1.lock"
}

# run_worker runs units of MODE from QUEUE until none is left, each with
# fresh servers: a test that fails in external mode can leave a config
# behind (unit/type/set leaves rdb-key-save-delay at 2147483647, which
# hangs every later SYNC).
run_worker() { # MODE QUEUE WORKER
	local MODE=$1 queue=$2 w=$3 unit base extra rc secs alive u0 pid
	cluster_base=$((14000 + w * 1000))
	mkdir -p "$WDIR"
	while unit=$(next_unit "$queue"); do
		base=$MODE_OUT/units/${unit//\//_}
		extra=(--baseport $((BASE + 700)))
		[ "$SINGLEDB" = 1 ] && [[ $MODE != *cluster ]] && extra+=(--singledb)
		case $MODE in
		direct | rproxy)
			start_redis
			PORT=$RPORT
			;;
		direct-db0 | db0)
			start_redis
			PORT=$RPORT
			extra+=(--singledb)
			;;
		direct-tls | tls)
			TLS_CLI=(--tls --cacert "$TLS_DIR/ca.crt" --cert "$TLS_DIR/client.crt" --key "$TLS_DIR/client.key")
			start_redis tls
			PORT=$RPORT
			extra+=(--tls)
			;;
		direct-cluster)
			start_redis
			PORT=$RPORT
			extra+=(--cluster-mode)
			;;
		direct-sentinel | sentinel)
			start_redis
			start_sentinel "$WDIR/sentinel.yaml"
			PORT=$RPORT
			;;
		cluster)
			# A fresh cluster per unit, as a fresh server in the other
			# modes, started ahead (take_cluster).
			take_cluster
			extra+=(--cluster-mode)
			;;
		*)
			log "unknown mode $MODE"
			exit 1
			;;
		esac
		case $MODE in
		rproxy)
			: >"$base.rproxy.log"
			start_proxy "$base.rproxy.log"
			PORT=$PPORT
			extra+=("${skip_args[@]}")
			;;
		db0)
			: >"$base.rproxy.log"
			start_proxy "$base.rproxy.log"
			PORT=$PPORT
			extra+=("${db0_skip_args[@]}")
			;;
		sentinel)
			: >"$base.rproxy.log"
			start_proxy "$base.rproxy.log" "$WDIR/sentinel.yaml"
			PORT=$PPORT
			extra+=("${skip_args[@]}")
			;;
		tls)
			: >"$base.rproxy.log"
			start_proxy "$base.rproxy.log" "$TLS_CONFIG"
			PORT=$PPORT
			extra+=("${skip_args[@]}")
			;;
		cluster)
			: >"$base.rproxy.log"
			start_proxy "$base.rproxy.log" "$CLUSTER_CONFIG" "${CPORTS[0]}"
			PORT=$PPORT
			extra+=("${cluster_skip_args[@]}")
			;;
		esac
		u0=$(date +%s)
		rc=0
		(cd "$SRC" && TERM=dumb timeout -k 10 "$UNIT_TIMEOUT" ./runtest --host 127.0.0.1 --port "$PORT" \
			--single "$unit" --durable --clients 1 --timeout "$STALL" "${extra[@]}" </dev/null) >"$base.log" 2>&1 || rc=$?
		secs=$(($(date +%s) - u0))
		alive=yes
		if [ -n "$REDIS_PID" ]; then
			kill -0 "$REDIS_PID" 2>/dev/null || alive="redis-server exited"
		fi
		for pid in "${CLUSTER_PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null || alive="a cluster node exited"
		done
		if [ -n "$PROXY_PID" ] && ! kill -0 "$PROXY_PID" 2>/dev/null; then alive="rproxy exited"; fi
		if [ -n "$SENTINEL_PID" ] && ! kill -0 "$SENTINEL_PID" 2>/dev/null; then alive="redis-sentinel exited"; fi
		stop_proc "$PROXY_PID"; stop_proc "$SENTINEL_PID"; stop_proc "$REDIS_PID"; stop_cluster
		PROXY_PID= REDIS_PID= SENTINEL_PID=
		if [ "$rc" != 0 ]; then
			if [ "$MODE" = cluster ]; then
				for i in 0 1 2; do cp "$CLUSTER_DIR/c$i/redis.log" "$base.redis-c$i.log" 2>/dev/null || true; done
			else
				cp "$WDIR/redis/redis.log" "$base.redis.log" 2>/dev/null || true
				cp "$WDIR/sentinel/sentinel.log" "$base.sentinel.log" 2>/dev/null || true
			fi
		fi
		[ -s "$base.rproxy.log" ] || rm -f "$base.rproxy.log"
		printf '%s\t%s\t%s\t%s\n' "$unit" "$rc" "$secs" "$alive" >>"$MODE_OUT/units.done"
		log "$MODE: $unit rc=$rc ${secs}s $(grep -c '^\[ok\]' "$base.log" || true) ok $(grep -c '^\[err\]' "$base.log" || true) err ($alive)"
	done
}

# longest_first prints the units given, those of LONG_UNITS first: the
# units that took longest through rproxy on one Redis and on a cluster
# (units.tsv, 2 workers on 2 cores, 2026-12-01 and 02),
# so that the workers do not end on a long one started last. The order
# decides only when a unit starts; each has servers of its own.
LONG_UNITS="unit/hyperloglog unit/type/list-3 unit/type/zset unit/type/set unit/geo
unit/type/list-2 unit/type/stream unit/type/list integration/redis-cli unit/dump unit/expire"
longest_first() { # UNIT...
	local u
	for u in $LONG_UNITS; do
		[[ " $* " != *" $u "* ]] || echo "$u"
	done
	for u in "$@"; do
		[[ " $LONG_UNITS " == *[[:space:]]"$u"[[:space:]]* ]] || echo "$u"
	done
}

workers=()
worker_failed=0
stop_workers() {
	local pid
	for pid in "${workers[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${workers[@]}"; do wait "$pid" 2>/dev/null || true; done
}

for MODE in $MODES; do
	MODE_OUT=$OUT/$MODE
	rm -rf "$MODE_OUT"
	mkdir -p "$MODE_OUT/units"
	: >"$MODE_OUT/units.done"
	queue=$WORK/$MODE.queue
	printf '%s\n' $UNITS >"$queue.order"
	longest_first $UNITS >"$queue"
	echo 0 >"$queue.next"
	log "$MODE: $(echo "$UNITS" | wc -w) units, $JOBS at once (stall limit ${STALL}s, unit limit ${UNIT_TIMEOUT}s)"
	t0=$(date +%s)
	workers=()
	for w in $(seq 0 $((JOBS - 1))); do
		# A worker is a subshell: its servers, ports and cleanup are its own.
		(
			WDIR=$WORK/w$w
			BASE=$((20000 + w * 1000))
			trap cleanup EXIT
			trap 'exit 143' TERM
			run_worker "$MODE" "$queue" "$w"
		) &
		workers+=($!)
	done
	trap 'stop_workers; exit 130' INT
	trap 'stop_workers; exit 143' TERM
	for pid in "${workers[@]}"; do
		# A worker stops early when its servers or rproxy do not start
		# (set -e): its unit then has no result, and the run fails.
		wait "$pid" || { log "$MODE: a worker stopped early (exit $?): see above"; worker_failed=1; }
	done
	workers=()
	missing=$(awk -F'\t' 'FILENAME == ARGV[1] { done[$1] = 1; next } !($1 in done)' "$MODE_OUT/units.done" "$queue" | tr '\n' ' ')
	if [ -n "$missing" ]; then
		log "$MODE: no result for: $missing"
		worker_failed=1
	fi
	# units.tsv in the suite's order, whichever worker ran each unit.
	awk -F'\t' 'FILENAME == ARGV[1] { done[$1] = $0; next } $1 in done { print done[$1] }' "$MODE_OUT/units.done" "$queue.order" >"$MODE_OUT/units.tsv"
	rm -f "$MODE_OUT/units.done"
	echo "$(($(date +%s) - t0))" >"$MODE_OUT/seconds"
done

status=0
bash scripts/redis-suite-summary.sh "$OUT" "$MIN_OK" "$CLUSTER_MIN_OK" "$TLS_MIN_OK" "$SENTINEL_MIN_OK" "$DB0_MIN_OK" || status=$?
if [ "$worker_failed" = 1 ]; then
	log "FAIL: units without a result (a server or rproxy did not start); the counts above miss them"
	status=1
fi
exit "$status"
