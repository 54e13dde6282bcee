package proxy

import (
	"context"
	"testing"
	"time"
)

// TestCoarseClockSleepsWhenUnread: the clock stops ticking once nobody
// has read it for coarseIdleTicks ticks (onTick stops with it), and the
// first read after the pause returns the current time and restarts it.
func TestCoarseClockSleepsWhenUnread(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticks := make(chan struct{}, 1000)
	now := newCoarseClock(ctx, time.Millisecond, func() {
		select {
		case ticks <- struct{}{}:
		default:
		}
	}).now
	now()
	// Unread, it ticks about coarseIdleTicks times and stops.
	n := 0
	for stopped := false; !stopped; {
		select {
		case <-ticks:
			n++
		case <-time.After(200 * time.Millisecond):
			stopped = true
		}
	}
	if n < coarseIdleTicks/2 || n > 3*coarseIdleTicks {
		t.Fatalf("%d ticks before the clock stopped, want about %d", n, coarseIdleTicks)
	}
	// The cached time is now at least the 200 ms above old.
	before := time.Now()
	if got := now(); got.Before(before) {
		t.Fatalf("first read after the pause = %v, before %v: stale", got, before)
	}
	select {
	case <-ticks:
	case <-time.After(5 * time.Second):
		t.Fatal("the clock did not tick again after a read")
	}
	// Read on every tick, it keeps ticking and keeps time.
	deadline := time.Now().Add(3 * coarseIdleTicks * time.Millisecond)
	for time.Now().Before(deadline) {
		if d := time.Since(now()); d > 100*time.Millisecond {
			t.Fatalf("clock %v behind while read", d)
		}
		time.Sleep(time.Millisecond)
	}
	for len(ticks) > 0 {
		<-ticks
	}
	got := 0
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		now()
		time.Sleep(time.Millisecond)
		for len(ticks) > 0 {
			<-ticks
			got++
		}
	}
	if got < 5 {
		t.Fatalf("%d ticks in 50ms of reads every millisecond: the clock stopped while read", got)
	}
}
