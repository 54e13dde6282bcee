package proxy

import (
	"context"
	"sync/atomic"
	"time"
)

// coarseIdleTicks is how many ticks in a row nobody reads the clock
// before its goroutine stops ticking until the next read.
const coarseIdleTicks = 100

// coarseClock is a time refreshed every tick: cheap to read for callers
// that need millisecond accuracy only. It ticks only while it is read: an
// idle proxy would otherwise wake a thousand times a second for nothing.
type coarseClock struct {
	ns     atomic.Int64
	read   atomic.Bool   // read since the last tick
	asleep atomic.Bool   // the goroutine waits on wake, not ticking
	wake   chan struct{} // capacity 1
	wakes  atomic.Int64  // reads that restarted the ticks
}

// newCoarseClock returns a clock (read it with now), refreshed every tick
// until ctx ends. onTick, if not nil, runs on the clock's goroutine after each
// refresh, for periodic work too small to deserve a goroutine of its own
// (work that only matters while the clock is read: it pauses with it).
func newCoarseClock(ctx context.Context, tick time.Duration, onTick func()) *coarseClock {
	c := &coarseClock{wake: make(chan struct{}, 1)}
	c.ns.Store(time.Now().UnixNano())
	go c.run(ctx, tick, onTick)
	return c
}

func (c *coarseClock) now() time.Time {
	if c.asleep.Load() {
		// Stale by the whole pause: read the time itself, and restart
		// the ticks.
		if c.asleep.CompareAndSwap(true, false) {
			c.wakes.Add(1)
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
		t := time.Now()
		c.ns.Store(t.UnixNano())
		return t
	}
	if !c.read.Load() {
		c.read.Store(true) // written once per tick, not per read
	}
	return time.Unix(0, c.ns.Load())
}

func (c *coarseClock) run(ctx context.Context, tick time.Duration, onTick func()) {
	t := time.NewTicker(tick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.ns.Store(now.UnixNano())
			if onTick != nil {
				onTick()
			}
		}
		if c.read.Swap(false) {
			idle = 0
			continue
		}
		if idle++; idle < coarseIdleTicks {
			continue
		}
		t.Stop()
		c.asleep.Store(true)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		c.ns.Store(time.Now().UnixNano())
		t.Reset(tick)
		idle = 0
	}
}
