package main

import (
	"net"
	"strings"
)

// autoProcs is the number of scheduler threads for procs: 0 (auto): the
// CPUs this process may use (cpus: Go's own default, which follows the CPU
// count, affinity and a cgroup CPU quota), less one when the upstream Redis
// runs on this node (a loopback address), because that Redis, single
// threaded, wants a core of its own. Measured on 2 cores with Redis and
// redis-benchmark on the same machine (bench/results/2026-11-23/procs.md):
// two threads cost 40% more CPU per request at -P 1 than one and lost
// 14-27% of throughput there, while at -P 16 they gained 3-9%.
// An explicit GOMAXPROCS environment variable is honoured as given.
func autoProcs(cpus int, upstream string, envSet bool) int {
	if envSet || cpus <= 1 {
		return max(cpus, 1)
	}
	if loopbackAddr(upstream) {
		return cpus - 1
	}
	return cpus
}

// loopbackAddr reports whether host:port names this node: localhost or a
// loopback IP.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
