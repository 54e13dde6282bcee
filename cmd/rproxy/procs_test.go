package main

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/upstream"
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
	var now upstream.Traffic
	var readErr error
	var sets []int
	g := &procsGovernor{base: 1, most: 2, hold: 5 * time.Second,
		read: func() (upstream.Traffic, error) { return now, readErr },
		set:  func(n int) { sets = append(sets, n) }, log: zap.NewNop()}
	t0 := time.Unix(1000, 0)
	step := func(s int, diverts, commands, kb float64, want []int) {
		t.Helper()
		now.BacklogDiverts += diverts
		now.Commands += commands
		now.WrittenBytes += kb * 1024
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
	readErr = errors.New("read failed")
	step(9, 0, 0, 0, []int{2}) // unread: unchanged
	readErr = nil
	step(10, 0, 10, 1, []int{2, 1}) // 7 s since the last signal (at 3 s)
	step(11, 1, 10_000, 10_000, []int{2, 1})
	step(12, 1, 10, 1_000, []int{2, 1, 2})
	step(20, 0, 0, 0, []int{2, 1, 2, 1})
	now.ReadBytes += 1_000 * 1024 // 10 GETs of 100 KB values
	step(21, 1, 10, 0.5, []int{2, 1, 2, 1, 2})
}
