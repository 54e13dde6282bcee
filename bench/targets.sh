# bench/targets.sh — sourced by bench/churn.sh and bench/transactions.sh:
# helpers to start the targets they compare on one redis-server. The caller
# sets dir (a temporary directory), rp (the redis-server's port), and the
# arrays pids, targets and the associative port and pid.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ping() { # port
	for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done
	echo "port $1 never answered" >&2
	exit 1
}

start_rproxy() { # name binary: an rproxy in front of the redis-server, as target name
	port[$1]=$(free_port)
	"$2" -listen "127.0.0.1:${port[$1]}" -upstream "127.0.0.1:$rp" >"$dir/$1.log" 2>&1 &
	pids+=($!)
	pid[$1]=$!
	targets+=("$1")
	wait_ping "${port[$1]}"
}

cpu_ticks() { [ -n "$1" ] && awk '{print $14+$15}' "/proc/$1/stat" || echo 0; } # pid: user+system ticks
