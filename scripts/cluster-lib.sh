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
	launch_cluster "$@" && form_cluster "$1"
}

# launch_cluster DIR FIRST_PORT [arguments...] starts the three nodes and
# returns without waiting for them: CPORTS as start_cluster sets it, each
# pid appended to CLUSTER_PIDS. The nodes are children of the calling
# shell, which reaps them as soon as they stop. form_cluster DIR then makes
# them a cluster, and may run in a subshell meanwhile.
launch_cluster() {
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
	done
}

# form_cluster DIR waits for the nodes launch_cluster started in DIR (CPORTS,
# and the last three of CLUSTER_PIDS) to answer, gives them their slots and
# config epochs, makes them meet, and waits until each reports
# cluster_state:ok and knows the other two.
form_cluster() {
	local dir=$1 i p
	local pids=("${CLUSTER_PIDS[@]: -3}")
	for i in 0 1 2; do
		p=${CPORTS[$i]}
		wait_ping "$p" "${pids[$i]}" || { log "cluster node $p did not start"; tail "$dir/c$i/redis.log" >&2; return 1; }
	done
	# What redis-cli --cluster create does (the slots as it spreads them,
	# distinct config epochs, the meetings), without its one-second waits
	# for the nodes to meet.
	local slots=("0 5460" "5461 10922" "10923 16383")
	: >"$dir/create.log"
	for i in 0 1 2; do
		p=${CPORTS[$i]}
		{ redis-cli -p "$p" cluster addslotsrange ${slots[$i]} &&
			redis-cli -p "$p" cluster set-config-epoch $((i + 1)) &&
			{ [ "$i" = 0 ] || redis-cli -p "${CPORTS[0]}" cluster meet 127.0.0.1 "$p"; }; } >>"$dir/create.log" 2>&1
		[ "$(grep -vc '^OK$' "$dir/create.log")" = 0 ] || { log "forming the cluster on $p failed"; cat "$dir/create.log" >&2; return 1; }
	done
	# Up (Redis holds cluster_state:fail for 2 s after a master starts),
	# and every node knows the other two.
	for p in "${CPORTS[@]}"; do
		for _ in $(seq 200); do
			cluster_formed "$p" && break
			sleep 0.05
		done
		cluster_formed "$p" || { log "cluster not formed on $p: $(redis-cli -p "$p" cluster info | tr -d '\r' | tr '\n' ' ')"; return 1; }
	done
}

# cluster_formed PORT: the node reports cluster_state:ok and knows three
# nodes.
cluster_formed() {
	local info
	info=$(redis-cli -p "$1" cluster info | tr -d '\r')
	[[ $info == *cluster_state:ok* && $info == *cluster_known_nodes:3* ]]
}
