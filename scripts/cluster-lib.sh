# Sourced by the suite scripts: starts a Redis Cluster of three masters and no
# replicas on this machine. The caller defines log, port_free and wait_ping
# (PORT PID), and the array CLUSTER_PIDS, which this appends each node's pid to
# so the caller's cleanup stops them.
#
#   start_cluster DIR FIRST_PORT [redis-server arguments...]
#
# sets CPORTS to the three nodes' ports and returns non-zero (after logging
# why) when a node does not start or the cluster does not reach
# cluster_state:ok. Each node gets DIR/cN as its dir and the extra arguments
# (a config file first, if any, as redis-server wants it).

# A cluster node also listens on its port + 10000 (the bus), so each port is
# picked with that one free too, and below the ephemeral range (32768 up),
# where an outgoing connection may hold the bus port without listening on it.
cluster_port() {
	local p
	for p in $(seq "$1" "$(($1 + 400))"); do
		port_free "$p" && port_free $((p + 10000)) && { echo "$p"; return 0; }
	done
	log "no free cluster port from $1"
	return 1
}

start_cluster() {
	local dir=$1 next=$2 i p
	shift 2
	CPORTS=()
	for i in 0 1 2; do
		p=$(cluster_port "$next") || return 1
		next=$((p + 1))
		rm -rf "$dir/c$i"
		mkdir -p "$dir/c$i"
		redis-server "$@" --port "$p" --bind 127.0.0.1 --daemonize no \
			--cluster-enabled yes --cluster-config-file "$dir/c$i/nodes.conf" --cluster-node-timeout 2000 \
			--dir "$dir/c$i" --logfile "$dir/c$i/redis.log" --pidfile "$dir/c$i/redis.pid" &
		CLUSTER_PIDS+=($!)
		CPORTS+=("$p")
		wait_ping "$p" $! || { log "cluster node $p did not start"; tail "$dir/c$i/redis.log" >&2; return 1; }
	done
	redis-cli --cluster create "${CPORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
		{ log "redis-cli --cluster create failed"; cat "$dir/create.log" >&2; return 1; }
	for p in "${CPORTS[@]}"; do
		for _ in $(seq 200); do
			redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && break
			sleep 0.05
		done
		redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || { log "cluster_state not ok on $p"; return 1; }
	done
}
