#!/usr/bin/env bash
# Runs the client libraries' own test suites twice, once against Redis directly
# and once through rproxy, and lists the tests that fail only through rproxy.
# See docs/suites-libraries.md.
#
#   suites/libs/run.sh [goredis] [redispy] [redigo] [rueidis]
#                                        (default: goredis redispy redigo)
#
# Environment:
#   LIBS_OUT          where results go (default suites/libs/.cache/out/<UTC time>)
#   REDISPY_SRC       a redis-py source tree (with tests/) to use instead of
#                     Debian's source package python-redis
#   GOREDIS_TIMEOUT   seconds for each go-redis run (Ginkgo suite; default 300)
#   GOREDIS_PLAIN     "full" (default): also run go-redis's plain Go tests,
#                     "off": only the Ginkgo suite
#   PLAIN_TIMEOUT     seconds for each run of the plain Go tests (default 300)
#   REDISPY_TIMEOUT   seconds for each redis-py run (default 300)
#   REDIGO_VERSION    redigo's version (default v1.9.3)
#   REDIGO_TIMEOUT    seconds for each redigo run (default 300)
#   RUEIDIS_TIMEOUT   seconds for each of rueidis's three test binaries
#                     (default 600)
#   LIBS_AUTH_MODE    rproxy's auth.mode for the rproxy runs (default: none,
#                     the default, which refuses AUTH; "passthrough" lets
#                     Redis check AUTH, so the suites' ACL and AUTH tests run)
#   DIRECT_FROM       an earlier OUT directory: reuse its direct results
#                     instead of running the suites directly again
#   LIBS_UPSTREAM     "standalone" (default): rproxy in front of one
#                     redis-server; "cluster": in front of a 3-master Redis
#                     Cluster this script starts (go-redis and redis-py; the
#                     direct run stays one redis-server)
#   LIBS_PROCS        rproxy's procs for the rproxy runs (default: the
#                     config's auto, 1 on 2 cores with Redis local)
#   LIBS_CONFIG_ADD   a YAML file appended to rproxy's config for the rproxy
#                     runs (sections suites/libs/rproxy-libs.yaml lacks, such
#                     as hotkeys)
#
# go-redis's suite dials Redis on the fixed port 6379, so that port must be
# free: "direct" runs redis-server on 6379, "rproxy" runs redis-server on a
# free port and rproxy on 127.0.0.1:6379 in front of it. Every process this
# script starts is stopped on exit.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIBS=$ROOT/suites/libs
CACHE=$LIBS/.cache
OUT=${LIBS_OUT:-$CACHE/out/$(date -u +%Y%m%dT%H%M%SZ)}
GOREDIS_TIMEOUT=${GOREDIS_TIMEOUT:-300}
PLAIN_TIMEOUT=${PLAIN_TIMEOUT:-300}
REDISPY_TIMEOUT=${REDISPY_TIMEOUT:-300}
REDIGO_VERSION=${REDIGO_VERSION:-v1.9.3}
REDIGO_TIMEOUT=${REDIGO_TIMEOUT:-300}
RUEIDIS_TIMEOUT=${RUEIDIS_TIMEOUT:-600}
GOREDIS_PLAIN=${GOREDIS_PLAIN:-full}
PY=/usr/bin/python3
PORT=6379

WHAT=("$@")
[ ${#WHAT[@]} -eq 0 ] && WHAT=(goredis redispy redigo)
want() { local w; for w in "${WHAT[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

mkdir -p "$CACHE" "$OUT"
CONFIG=$OUT/rproxy.yaml
cp "$LIBS/rproxy-libs.yaml" "$CONFIG"
if [ -n "${LIBS_AUTH_MODE:-}" ]; then
	printf '\nauth:\n  mode: %s\n' "$LIBS_AUTH_MODE" >>"$CONFIG"
fi
if [ -n "${LIBS_PROCS:-}" ]; then
	printf '\nprocs: %s\n' "$LIBS_PROCS" >>"$CONFIG"
fi
if [ -n "${LIBS_CONFIG_ADD:-}" ]; then
	{ echo; cat "$LIBS_CONFIG_ADD"; } >>"$CONFIG"
fi
UPSTREAM=${LIBS_UPSTREAM:-standalone}
case $UPSTREAM in
standalone) ;;
cluster) printf '\nupstream:\n  mode: cluster\n' >>"$CONFIG" ;;
*) echo "LIBS_UPSTREAM must be standalone or cluster" >&2; exit 2 ;;
esac
MODES="direct rproxy"
if [ -n "${DIRECT_FROM:-}" ]; then
	MODES=rproxy
	for d in "$DIRECT_FROM"/*-direct; do [ -d "$d" ] && cp -r "$d" "$OUT/"; done
fi
log() { echo "[libs $(date -u +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---- processes -------------------------------------------------------------
REDIS_PID= RPROXY_PID= NODE_PIDS=
stop_servers() {
	local p
	for p in $RPROXY_PID $REDIS_PID $NODE_PIDS; do
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	RPROXY_PID= REDIS_PID= NODE_PIDS=
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { "$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_ping() {
	local i
	for i in $(seq 1 100); do
		[ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
		sleep 0.1
	done
	return 1
}

# cluster_port: a port that can be bound, whose cluster bus port (+10000)
# can be too, both below the ephemeral range (32768 up), where an outgoing
# connection may hold the bus port without listening on it.
cluster_port() {
	"$PY" - "$@" <<'PYEOF'
import random, socket, sys
taken = {int(a) for a in sys.argv[1:]}
while True:
    p = random.randint(14000, 18999)
    if p in taken:
        continue
    socks = [socket.socket(), socket.socket()]
    try:
        socks[0].bind(("127.0.0.1", p)); socks[1].bind(("127.0.0.1", p + 10000))
        print(p)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
PYEOF
}

# start_cluster DIR: three masters, no replicas; sets rport to the first.
start_cluster() {
	local dir=$1 i p ports=()
	for i in 0 1 2; do
		p=$(cluster_port "${ports[@]}")
		mkdir -p "$dir/node$i"
		redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
			--enable-debug-command yes --cluster-enabled yes --cluster-node-timeout 2000 \
			--cluster-config-file "$dir/node$i/nodes.conf" --dir "$dir/node$i" --logfile "$dir/node$i/redis.log" &
		NODE_PIDS="$NODE_PIDS $!"
		ports+=("$p")
		wait_ping "$p" || die "cluster node did not start on $p (see $dir/node$i/redis.log)"
	done
	redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
		die "redis-cli --cluster create failed (see $dir/create.log)"
	for p in "${ports[@]}"; do
		for i in $(seq 1 100); do
			redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && break
			sleep 0.1
		done
	done
	rport=${ports[0]}
}

# start_servers MODE DIR: a fresh redis-server (and rproxy in mode rproxy)
# answering on 127.0.0.1:$PORT; with LIBS_UPSTREAM=cluster, mode rproxy
# starts a cluster in place of the redis-server.
start_servers() {
	local mode=$1 dir=$2 rport
	mkdir -p "$dir"
	port_busy $PORT && die "something already listens on 127.0.0.1:$PORT; go-redis's suite needs that port"
	if [ "$mode" = rproxy ] && [ "$UPSTREAM" = cluster ]; then
		start_cluster "$dir"
		"$ROOT/bin/rproxy" -config "$CONFIG" -listen "127.0.0.1:$PORT" \
			-upstream "127.0.0.1:$rport" >"$dir/rproxy.log" 2>&1 &
		RPROXY_PID=$!
		wait_ping $PORT || die "rproxy did not start (see $dir/rproxy.log)"
		log "$mode: a 3-master cluster (pids$NODE_PIDS), rproxy pid $RPROXY_PID on $PORT"
		return
	fi
	if [ "$mode" = direct ]; then rport=$PORT; else rport=$(free_port); fi
	# enable-debug-command: the suites call DEBUG (the client-libs-test image
	# that go-redis and redis-py use in CI enables it too).
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
		--enable-debug-command yes --dir "$dir" --logfile "$dir/redis.log" &
	REDIS_PID=$!
	wait_ping "$rport" || die "redis-server did not start on $rport (see $dir/redis.log)"
	if [ "$mode" = rproxy ]; then
		"$ROOT/bin/rproxy" -config "$CONFIG" -listen "127.0.0.1:$PORT" \
			-upstream "127.0.0.1:$rport" >"$dir/rproxy.log" 2>&1 &
		RPROXY_PID=$!
		wait_ping $PORT || die "rproxy did not start (see $dir/rproxy.log)"
	fi
	log "$mode: redis-server pid $REDIS_PID on $rport${RPROXY_PID:+, rproxy pid $RPROXY_PID on $PORT}"
}

# ---- rproxy ----------------------------------------------------------------
log "building rproxy"
(cd "$ROOT" && go build -o bin/rproxy ./cmd/rproxy) || die "go build failed"
"$ROOT/bin/rproxy" -check -config "$CONFIG" >/dev/null 2>&1 || die "$CONFIG rejected"
command -v redis-server >/dev/null || die "redis-server not installed"
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "rproxy: $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- . ':!suites/libs' || echo ' (modified)')"
	echo "redis-server: $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
	echo "cpus: $(nproc)"
	echo "rproxy auth.mode: ${LIBS_AUTH_MODE:-none}"
	echo "rproxy upstream: $UPSTREAM"
	[ -n "${DIRECT_FROM:-}" ] && echo "direct results from: $DIRECT_FROM"
} >"$OUT/info.txt"

# ---- go-redis --------------------------------------------------------------
# Ginkgo specs that need more than one standalone Redis 7.0 (cluster, ring,
# sentinel, TLS, redis-stack modules, Redis 8 data types) are skipped; the
# standalone-only patch below keeps BeforeSuite from dialling those servers.
GOREDIS_SKIP='Cluster|cluster|Ring|Sentinel|sentinel|RediSearch|FT\.|JSON|Timeseries|TS\.|Probabilistic|VectorSet|HIMPORT|TLS|HotKeys|Array Commands|Command Tips tests'
# Plain Go tests: Examples (go-redis's own CI skips them; one panics on Redis
# 7.0 and ends the run) and TLS/cluster/search ones that need other servers.
PLAIN_SKIP='^TestGinkgoSuite$|^Example|TLS|Cluster|Search'

prepare_goredis() {
	local ver dir src
	ver=$(cd "$ROOT" && go list -m -f '{{.Version}}' github.com/redis/go-redis/v9) || return 1
	src=$(cd "$ROOT" && go mod download -json "github.com/redis/go-redis/v9@$ver" | "$PY" -c 'import json,sys;print(json.load(sys.stdin)["Dir"])') || return 1
	dir=$CACHE/go-redis-$ver
	echo "go-redis: $ver" >>"$OUT/info.txt"
	GOREDIS_DIR=$dir
	GOREDIS_BIN=$CACHE/go-redis-$ver.test
	if [ ! -f "$dir/.patched-2" ]; then
		log "copying go-redis $ver from the module cache and patching its test harness"
		rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir" || return 1
		# 1. Standalone only: BeforeSuite/AfterSuite skip ring, sentinel and
		#    cluster set-up when GOREDIS_STANDALONE_ONLY is set.
		perl -0pi -e 's/\tif !RECluster \{\n(\t\tringShard1, err = connectTo|\t\tExpect\(cluster\.Close\(\)\))/\tif !RECluster && os.Getenv("GOREDIS_STANDALONE_ONLY") == "" {\n$1/g' "$dir/main_test.go"
		[ "$(grep -c GOREDIS_STANDALONE_ONLY "$dir/main_test.go")" = 2 ] || { log "main_test.go patch did not apply"; return 1; }
		# 2. A failed assertion inside a goroutine of a spec is reported as that
		#    spec's failure instead of panicking the whole test binary.
		local f
		for f in $(grep -l '\. "github.com/bsm/ginkgo/v2"' "$dir"/*_test.go); do
			perl -pi -e 's/^(\s*)go func\((.*)\) \{\s*$/$1go func($2) {\n$1\tdefer GinkgoRecover()\n/' "$f"
		done
		touch "$dir/.patched-2"
		rm -f "$GOREDIS_BIN"
	fi
	if [ ! -x "$GOREDIS_BIN" ]; then
		log "building go-redis's test binary"
		(cd "$dir" && go test -c -o "$GOREDIS_BIN" .) || return 1
	fi
}

run_goredis() {
	local mode=$1 d
	d=$OUT/goredis-$mode
	start_servers "$mode" "$d"
	log "go-redis Ginkgo suite ($mode)"
	(cd "$GOREDIS_DIR" && GOREDIS_STANDALONE_ONLY=1 REDIS_VERSION=7.0 timeout -k 10 $((GOREDIS_TIMEOUT + 30)) \
		"$GOREDIS_BIN" -test.run '^TestGinkgoSuite$' -test.timeout $((GOREDIS_TIMEOUT + 20))s \
		-ginkgo.timeout "${GOREDIS_TIMEOUT}s" -ginkgo.seed 1 -ginkgo.skip "$GOREDIS_SKIP" -ginkgo.no-color \
		-ginkgo.json-report "$d/ginkgo.json" >"$d/ginkgo.out" 2>&1)
	echo "exit $?" >>"$d/ginkgo.out"
	if [ "$GOREDIS_PLAIN" = full ]; then
		log "go-redis plain Go tests ($mode)"
		(cd "$GOREDIS_DIR" && REDIS_VERSION=7.0 timeout -k 10 $((PLAIN_TIMEOUT + 30)) \
			"$GOREDIS_BIN" -test.skip "$PLAIN_SKIP" -test.v -test.timeout "${PLAIN_TIMEOUT}s" \
			>"$d/plain.out" 2>&1)
		echo "exit $?" >>"$d/plain.out"
	fi
	stop_servers
}

# ---- redis-py --------------------------------------------------------------
prepare_redispy() {
	local d
	if [ -n "${REDISPY_SRC:-}" ]; then
		REDISPY_DIR=$REDISPY_SRC
	else
		d=$(ls -d "$CACHE"/src/python-redis-*/ 2>/dev/null | head -1)
		if [ -z "$d" ]; then
			log "fetching Debian's source package python-redis"
			mkdir -p "$CACHE/src"
			(cd "$CACHE/src" && timeout 120 apt-get source python-redis >"$CACHE/src/apt-get.log" 2>&1) ||
				{ log "apt-get source python-redis failed: $(grep -m1 '^E:' "$CACHE/src/apt-get.log")"; return 1; }
			d=$(ls -d "$CACHE"/src/python-redis-*/ 2>/dev/null | head -1)
		fi
		REDISPY_DIR=${d%/}
	fi
	[ -d "$REDISPY_DIR/tests" ] || { log "no tests/ in $REDISPY_DIR"; return 1; }
	"$PY" -c 'import pytest, redis' 2>/dev/null ||
		{ log "needs Debian's python3-pytest and python3-redis (apt-get install python3-pytest python3-pytest-timeout python3-pytest-asyncio python3-redis)"; return 1; }
	echo "redis-py: $(sed -n 's/.*version="\{0,1\}\([0-9][0-9.]*\).*/\1/p' "$REDISPY_DIR/setup.py" 2>/dev/null | head -1) ($REDISPY_DIR)" >>"$OUT/info.txt"
}

run_redispy() {
	local mode=$1 d to=()
	d=$OUT/redispy-$mode
	start_servers "$mode" "$d"
	"$PY" -c 'import pytest_timeout' 2>/dev/null && to=(--timeout 60)
	log "redis-py suite ($mode)"
	(cd "$REDISPY_DIR" && timeout -k 10 "$REDISPY_TIMEOUT" "$PY" -m pytest -p no:cacheprovider -q -rN \
		"${to[@]}" --redis-url "redis://127.0.0.1:$PORT/9" \
		-m 'not onlycluster and not redismod and not ssl and not replica' \
		--junitxml "$d/junit.xml" tests >"$d/pytest.out" 2>&1)
	echo "exit $?" >>"$d/pytest.out"
	stop_servers
}

# ---- redigo ----------------------------------------------------------------
# redigo's harness starts its own redis-server (its -redis-server flag names
# the binary, -redis-port the port), so the run through rproxy names
# redigo-server.sh, which puts rproxy on that port in front of a redis-server.
prepare_redigo() {
	local src
	src=$(cd "$CACHE" && GOFLAGS=-mod=mod go mod download -json "github.com/gomodule/redigo@$REDIGO_VERSION" |
		"$PY" -c 'import json,sys;print(json.load(sys.stdin)["Dir"])') || return 1
	REDIGO_DIR=$CACHE/redigo-$REDIGO_VERSION
	REDIGO_BIN=$CACHE/redigo-$REDIGO_VERSION.test
	echo "redigo: $REDIGO_VERSION" >>"$OUT/info.txt"
	if [ ! -d "$REDIGO_DIR" ]; then
		cp -r "$src" "$REDIGO_DIR" && chmod -R u+w "$REDIGO_DIR" || return 1
	fi
	if [ ! -x "$REDIGO_BIN" ]; then
		log "building redigo's test binary"
		(cd "$REDIGO_DIR" && go test -c -o "$REDIGO_BIN" ./redis) || return 1
	fi
}

run_redigo() {
	local mode=$1 d server=redis-server
	d=$OUT/redigo-$mode
	mkdir -p "$d"
	[ "$mode" = rproxy ] && server=$LIBS/redigo-server.sh
	log "redigo suite ($mode)"
	(cd "$REDIGO_DIR/redis" && RG_RPROXY="$ROOT/bin/rproxy" RG_CONFIG="$CONFIG" RG_DIR="$d" \
		timeout -k 10 "$REDIGO_TIMEOUT" "$REDIGO_BIN" -test.v -test.count 1 \
		-redis-server "$server" -redis-port "$(free_port)" -redis-log "$d/harness.log" >"$d/test.out" 2>&1)
	echo "exit $?" >>"$d/test.out"
}

# ---- rueidis ---------------------------------------------------------------
# rueidis (the version rproxy's go.mod names for its own tests) connects in
# RESP3 with client-side caching on by default: through rproxy every
# session of it is in stream mode. Three test binaries: the root package
# (tests that dial 127.0.0.1:6379; those needing a Sentinel, a cluster,
# Redis 5, KeyDB, Dragonfly or Kvrocks are skipped), rueidislock (locks
# released through client-side caching, database 10), and rueidiscompat's
# Ginkgo suite (go-redis's API over rueidis), whose BeforeSuite dials the
# redis-stack, Redis 8.6 and cluster servers of rueidis's docker-compose:
# patched to dial 127.0.0.1:6379 (RESP2 through AlwaysRESP2), with the
# cluster, search and Redis 8.6 specs left out. Commands of Redis 7.2 and
# later fail both ways on Redis 7.0.
RUEIDIS_SKIP='Sentinel|Cluster|KeyDB|Dragonfly|Kvrocks|5Client|Client5'

prepare_rueidis() {
	local ver dir m src
	ver=$(cd "$ROOT" && go list -m -f '{{.Version}}' github.com/redis/rueidis) || return 1
	dir=$CACHE/rueidis-$ver
	echo "rueidis: $ver" >>"$OUT/info.txt"
	RUEIDIS_DIR=$dir
	if [ ! -f "$dir/.patched-1" ]; then
		log "copying rueidis $ver from the module cache and patching rueidiscompat's BeforeSuite"
		rm -rf "$dir"
		# rueidiscompat's go.mod replaces rueidis and its mock with ../ and ../mock.
		for m in "" /rueidiscompat /mock; do
			src=$(cd "$CACHE" && GOFLAGS=-mod=mod go mod download -json "github.com/redis/rueidis$m@$ver" |
				"$PY" -c 'import json,sys;print(json.load(sys.stdin)["Dir"])') || return 1
			cp -r "$src" "$dir$m" && chmod -R u+w "$dir$m" || return 1
		done
		local f=$dir/rueidiscompat/adapter_test.go
		perl -pi -e 's/127\.0\.0\.1:(6378|7010|6382|6356|6381|7007)"/127.0.0.1:6379"/' "$f"
		perl -0pi -e 's/(\tclientresp2, err = rueidis\.NewClient\(rueidis\.ClientOption\{\n(?:\t\t[^\n]*\n)*?\t\tDisableCache: true,\n)/$1\t\tAlwaysRESP2:  true,\n/' "$f"
		perl -pi -e 's/^\t(testCluster\((true|false)\)|testAdapterSearchRESP[23]\(\)|testAdapterRedis86\(\))$/\t\/\/ $1/' "$f"
		[ "$(grep -c '127.0.0.1:6379' "$f")" = 6 ] && [ "$(grep -c 'AlwaysRESP2:  true' "$f")" = 2 ] &&
			[ "$(grep -c '^	// test' "$f")" = 5 ] || { log "adapter_test.go patch did not apply"; return 1; }
		touch "$dir/.patched-1"
		rm -f "$CACHE"/rueidis-"$ver"-*.test
	fi
	for m in root:. lock:./rueidislock compat:./rueidiscompat; do
		[ -x "$CACHE/rueidis-$ver-${m%%:*}.test" ] && continue
		log "building rueidis's ${m%%:*} test binary"
		(cd "$dir/${m#*:}" && go test -c -o "$CACHE/rueidis-$ver-${m%%:*}.test" .) || return 1
	done
	RUEIDIS_BIN=$CACHE/rueidis-$ver
}

run_rueidis() {
	local mode=$1 d
	d=$OUT/rueidis-$mode
	start_servers "$mode" "$d"
	log "rueidis root package tests ($mode)"
	(cd "$RUEIDIS_DIR" && timeout -k 10 $((RUEIDIS_TIMEOUT + 30)) "$RUEIDIS_BIN-root.test" -test.v \
		-test.timeout "${RUEIDIS_TIMEOUT}s" -test.skip "$RUEIDIS_SKIP" >"$d/root.out" 2>&1)
	echo "exit $?" >>"$d/root.out"
	log "rueidislock tests ($mode)"
	(cd "$RUEIDIS_DIR/rueidislock" && timeout -k 10 $((RUEIDIS_TIMEOUT + 30)) "$RUEIDIS_BIN-lock.test" -test.v \
		-test.timeout "${RUEIDIS_TIMEOUT}s" >"$d/lock.out" 2>&1)
	echo "exit $?" >>"$d/lock.out"
	log "rueidiscompat tests and Ginkgo suite ($mode)"
	redis-cli -p $PORT flushall >/dev/null
	(cd "$RUEIDIS_DIR/rueidiscompat" && timeout -k 10 $((RUEIDIS_TIMEOUT + 30)) "$RUEIDIS_BIN-compat.test" -test.v \
		-test.timeout "${RUEIDIS_TIMEOUT}s" -ginkgo.seed 1 -ginkgo.no-color \
		-ginkgo.json-report "$d/compat.json" >"$d/compat.out" 2>&1)
	echo "exit $?" >>"$d/compat.out"
	stop_servers
}

# ---- main ------------------------------------------------------------------
# run_lib NAME LABEL WHY: prepare_NAME, then run_NAME in each mode, or say in
# info.txt why LABEL was not run.
run_lib() {
	local m
	want "$1" || return 0
	if "prepare_$1"; then
		for m in $MODES; do "run_$1" "$m"; done
	else
		log "$2: $3, skipped"
		echo "$2: not run ($3)" >>"$OUT/info.txt"
	fi
}
run_lib goredis go-redis "preparation failed"
run_lib redispy redis-py "no source: set REDISPY_SRC or make 'apt-get source python-redis' work"
run_lib redigo redigo "preparation failed"
run_lib rueidis rueidis "preparation failed"

"$PY" "$LIBS/compare.py" "$OUT" | tee "$OUT/summary.md"
log "results in $OUT"
