package main

import (
	"context"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/upstream"
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

// procsGovernor runs Go code on more threads while large values queue
// ahead of small requests, when procs is auto and chose fewer threads than
// CPUs (Redis on this node). One thread is the faster choice for small
// values on 2 cores with Redis local, but behind other clients' pipelines
// of large values a small GET waits for their sessions' long turns in the
// one thread's run queue, and two threads served it many times sooner
// (bench/results/2026-12-02/procs-v.md). The signal: in the last tick the
// shared connections sent a small batch around a backlog
// (upstream.backlog_divert), and the bytes the upstream connections wrote
// and read averaged largeCommand or more per command: large commands or
// large replies (upstream.Traffic; the streams copied to subscribers and
// replicas are not counted). Backlogs of small values (200 clients'
// pipelines of 1 KB SETs) do not count: there two threads only lost
// throughput. After hold without the signal the threads go back to base.
type procsGovernor struct {
	base, most int
	hold       time.Duration
	read       func() (upstream.Traffic, error) // proxy.Server.UpstreamTraffic
	set        func(int)                        // runtime.GOMAXPROCS
	log        *zap.Logger

	last       upstream.Traffic
	lastSignal time.Time
	raised     bool
	failing    bool // the last read failed (logged once until one succeeds)
}

// procsHold is how long the governor keeps the raised threads after the
// last signal: large values come in bursts of pipelines, and each change
// of GOMAXPROCS stops the world for a moment.
const procsHold = 5 * time.Second

// procsTick is how often the governor reads the counters: the first part
// of a burst of large values runs on base threads for up to this long.
const procsTick = 250 * time.Millisecond

// largeCommand is the bytes written and read per command, on average,
// from which the traffic counts as large values.
const largeCommand = 16 << 10

// tick reads the counters once and raises or lowers the threads.
func (g *procsGovernor) tick(now time.Time) {
	n, err := g.read()
	if err != nil {
		if !g.failing {
			g.log.Warn("procs: upstream counters not read; threads unchanged until they are", zap.Error(err))
		}
		g.failing = true
		return
	}
	g.failing = false
	diverts, commands := n.BacklogDiverts-g.last.BacklogDiverts, n.Commands-g.last.Commands
	bytes := n.WrittenBytes - g.last.WrittenBytes + n.ReadBytes - g.last.ReadBytes
	g.last = n
	if diverts > 0 && commands > 0 && bytes >= largeCommand*commands {
		g.lastSignal = now
		if !g.raised {
			g.raised = true
			g.set(g.most)
			g.log.Info("procs raised: small requests wait behind large values", zap.Int("procs", g.most))
		}
		return
	}
	if g.raised && now.Sub(g.lastSignal) >= g.hold {
		g.raised = false
		g.set(g.base)
		g.log.Info("procs lowered: no small request behind large values for a while", zap.Int("procs", g.base), zap.Float64("after_seconds", g.hold.Seconds()))
	}
}

// run ticks every interval until ctx ends.
func (g *procsGovernor) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.tick(now)
		}
	}
}
