package main

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

func TestAutoProcs(t *testing.T) {
	for _, tc := range []struct {
		cpus     int
		upstream string
		env      bool
		want     int
	}{
		{2, "127.0.0.1:6379", false, 1},
		{2, "localhost:6379", false, 1},
		{2, "[::1]:6379", false, 1},
		{16, "127.0.0.1:6379", false, 15},
		{2, "10.0.0.5:6379", false, 2},
		{16, "redis.internal:6379", false, 16},
		{1, "127.0.0.1:6379", false, 1},
		{4, "127.0.0.1:6379", true, 4}, // GOMAXPROCS set: as given
	} {
		if got := autoProcs(tc.cpus, tc.upstream, tc.env); got != tc.want {
			t.Errorf("autoProcs(%d, %q, %v) = %d, want %d", tc.cpus, tc.upstream, tc.env, got, tc.want)
		}
	}
}

// TestProcsGovernor: the threads go to most at the first tick that sees a
// backlog divert while the bytes written and read averaged largeCommand or
// more per command (large commands, or large replies), stay there while
// that goes on, and go back to base once hold has passed without it;
// diverts among small commands and replies raise nothing; a failed read
// changes nothing.
func TestProcsGovernor(t *testing.T) {
	var now upstreamCounts
	var readErr error
	var sets []int
	g := &procsGovernor{base: 1, most: 2, hold: 5 * time.Second,
		read: func() (upstreamCounts, error) { return now, readErr },
		set:  func(n int) { sets = append(sets, n) }, log: zap.NewNop()}
	t0 := time.Unix(1000, 0)
	step := func(s int, diverts, commands, kb float64, want []int) {
		t.Helper()
		now.diverts += diverts
		now.commands += commands
		now.written += kb * 1024
		g.tick(t0.Add(time.Duration(s) * time.Second))
		if !slices.Equal(sets, want) {
			t.Fatalf("after the tick at %d s: threads set %v, want %v", s, sets, want)
		}
	}
	step(0, 0, 100, 10_000, nil)      // large values, no divert
	step(1, 5, 10_000, 10_000, nil)   // diverts behind 1 KB commands
	step(2, 3, 100, 10_000, []int{2}) // diverts behind 100 KB commands
	step(3, 3, 100, 10_000, []int{2}) // already raised: not set again
	step(7, 0, 100, 10_000, []int{2}) // 4 s since the last signal
	readErr = errors.New("gather failed")
	step(9, 0, 0, 0, []int{2}) // unread: unchanged
	readErr = nil
	step(10, 0, 10, 1, []int{2, 1}) // 7 s since the last signal (at 3 s)
	step(11, 1, 10_000, 10_000, []int{2, 1})
	step(12, 1, 10, 1_000, []int{2, 1, 2})
	step(20, 0, 0, 0, []int{2, 1, 2, 1})
	now.read += 1_000 * 1024 // 10 GETs of 100 KB values
	step(21, 1, 10, 0.5, []int{2, 1, 2, 1, 2})
}

// TestReadUpstreamCounts: the counters are summed over their series, the
// diverts over the backlog series only.
func TestReadUpstreamCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := func(name string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "upstream", Name: name, Help: "test"}
	}
	diverted := prometheus.NewCounterVec(opts("diverted_batches_total"), []string{"protocol", "reason"})
	commands := prometheus.NewCounterVec(opts("commands_total"), []string{"protocol"})
	written := prometheus.NewCounterVec(opts("written_bytes_total"), []string{"protocol"})
	read := prometheus.NewCounterVec(opts("read_bytes_total"), []string{"protocol"})
	reg.MustRegister(diverted, commands, written, read)
	diverted.WithLabelValues("2", "backlog").Add(3)
	diverted.WithLabelValues("3", "backlog").Add(4)
	diverted.WithLabelValues("2", "stall").Add(100)
	commands.WithLabelValues("2").Add(10)
	commands.WithLabelValues("3").Add(5)
	written.WithLabelValues("2").Add(1000)
	read.WithLabelValues("3").Add(2000)
	c, err := readUpstreamCounts(reg)()
	if want := (upstreamCounts{diverts: 7, commands: 15, written: 1000, read: 2000}); err != nil || c != want {
		t.Fatalf("readUpstreamCounts = %+v, %v; want %+v", c, err, want)
	}
}

// TestGovernorMetricsAreTheProxys: the counters the governor reads are
// those a running proxy registers (the diverts with their backlog series).
func TestGovernorMetricsAreTheProxys(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	families, err := p.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() != divertedMetric || hasLabel(m.GetLabel(), "reason", "backlog") {
				found[f.GetName()] = true
			}
		}
	}
	for _, name := range []string{divertedMetric, commandsMetric, writtenMetric, readMetric} {
		if !found[name] {
			t.Errorf("the proxy registers no %s series (diverts: with reason backlog)", name)
		}
	}
}
