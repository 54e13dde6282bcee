# bench/targets.sh — sourced by bench/churn.sh, bench/transactions.sh and bench/mixed.sh:
# helpers to start the targets they compare on one redis-server. The caller
# sets dir (a temporary directory), rp (the redis-server's port), and the
# arrays pids, targets and the associative port and pid.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ping() { # port
	for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done
	echo "port $1 never answered" >&2
	exit 1
}

start_rproxy() { # name binary: an rproxy in front of the redis-server, as target name (RPROXY_ARGS: more flags)
	port[$1]=$(free_port)
	# shellcheck disable=SC2086 # RPROXY_ARGS is flags, split on purpose
	"$2" ${RPROXY_ARGS:-} -listen "127.0.0.1:${port[$1]}" -upstream "127.0.0.1:$rp" >"$dir/$1.log" 2>&1 &
	pids+=($!)
	pid[$1]=$!
	targets+=("$1")
	wait_ping "${port[$1]}"
}

cpu_ticks() { [ -n "$1" ] && awk '{print $14+$15}' "/proc/$1/stat" || echo 0; } # pid: user+system ticks

# measure_row round test target n command...: runs command, which prints
# the rate it measured, and appends "round test target rate cpu_us" to
# $dir/rows (and stdout): cpu_us is the CPU the target's process spent
# during the command (user+system, from /proc) divided by n operations.
measure_row() {
	local r=$1 test=$2 t=$3 n=$4 c0 c1 rate us
	shift 4
	c0=$(cpu_ticks "${pid[$t]}")
	rate=$("$@")
	c1=$(cpu_ticks "${pid[$t]}")
	us=$(awk -v d=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN {printf "%.1f", d / hz * 1e6 / n}')
	echo "$r $test $t $rate $us" | tee -a "$dir/rows"
}
