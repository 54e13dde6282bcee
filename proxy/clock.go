package proxy

import (
	"context"
	"sync/atomic"
	"time"
)

// newCoarseClock returns a clock that reads a time refreshed every tick
// until ctx ends: cheap for callers that need millisecond accuracy only.
// onTick, if not nil, runs on the clock's goroutine after each refresh, for
// periodic work too small to deserve a goroutine of its own.
func newCoarseClock(ctx context.Context, tick time.Duration, onTick func()) func() time.Time {
	var ns atomic.Int64
	ns.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				ns.Store(now.UnixNano())
				if onTick != nil {
					onTick()
				}
			}
		}
	}()
	return func() time.Time { return time.Unix(0, ns.Load()) }
}
