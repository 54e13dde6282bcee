package hotkey

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MissGateConfig configures a MissGate.
type MissGateConfig struct {
	// Wait is the longest a reader of a missing key is held for the key's
	// fill; > 0.
	Wait time.Duration
	// AbsentFor: a key whose fill did not come within Wait is learned
	// absent and its readers are not held for this long (or until the key
	// is written); > 0.
	AbsentFor time.Duration
	// MaxKeys bounds the keys gated at once; misses of further keys pass.
	MaxKeys int
}

// DefaultMissGateConfig holds readers up to 200ms, learns a key absent
// for 10s, and gates up to 4096 keys.
func DefaultMissGateConfig() MissGateConfig {
	return MissGateConfig{Wait: 200 * time.Millisecond, AbsentFor: 10 * time.Second, MaxKeys: 4096}
}

// Validate reports every problem in c, joined.
func (c MissGateConfig) Validate() error {
	var errs []error
	if c.Wait <= 0 {
		errs = append(errs, fmt.Errorf("hotkey: miss gate: wait must be positive, got %v", c.Wait))
	}
	if c.AbsentFor <= 0 {
		errs = append(errs, fmt.Errorf("hotkey: miss gate: absent_for must be positive, got %v", c.AbsentFor))
	}
	if c.MaxKeys < 1 {
		errs = append(errs, fmt.Errorf("hotkey: miss gate: max_keys must be at least 1, got %d", c.MaxKeys))
	}
	return errors.Join(errs...)
}

// MissGate collapses cache-aside stampedes: when readers of a key get no
// value, the first of them (the filler) takes its miss and goes on to fill
// the key; the others are held until the key is written (Written) or the
// wait ends, and then read it again. A key whose fill does not come within
// the wait is learned absent, and its readers are not held again until it
// is written or AbsentFor has passed. It is safe for concurrent use.
//
// The gate decides only who waits and for what; reading again is the
// caller's, so a held reader's reply is still one Redis gave during its
// call.
type MissGate struct {
	now     func() time.Time
	cfg     atomic.Pointer[MissGateConfig]
	entries atomic.Int64 // len(keys): Written skips the lock while none

	mu   sync.Mutex
	keys map[string]*missState

	m missMetrics
}

// missState is one gated key: filling (done open until the key is
// written; until: Wait after the filler's miss, after which a miss learns
// the key absent) or learned absent (done nil, until the end of the
// memory).
type missState struct {
	filler int64
	until  time.Time
	done   chan struct{}
}

type missMetrics struct {
	fillers, waits, timeouts, absent prometheus.Counter
}

// NewMissGate returns a gate reading time from now, with its metrics on
// reg (nil: unregistered).
func NewMissGate(cfg MissGateConfig, now func() time.Time, reg prometheus.Registerer) (*MissGate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		return nil, errors.New("hotkey: miss gate: now is nil")
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey", Name: name, Help: help})
	}
	g := &MissGate{now: now, keys: make(map[string]*missState), m: missMetrics{
		fillers:  c("miss_fillers_total", "Misses of a hot key whose reader was left to fill it while later readers wait."),
		waits:    c("miss_waits_total", "Reads of a missing hot key held for its fill instead of each going to the database."),
		timeouts: c("miss_wait_timeouts_total", "Held reads whose wait ended with no write to the key (then read again from Redis)."),
		absent:   c("miss_absent_keys_total", "Keys learned absent: no fill followed a miss within the wait, so their readers are not held."),
	}}
	g.cfg.Store(&cfg)
	if reg != nil {
		if err := registerAll(reg, g.m.fillers, g.m.waits, g.m.timeouts, g.m.absent); err != nil {
			return nil, fmt.Errorf("hotkey: miss gate: registering metrics: %w", err)
		}
	}
	return g, nil
}

// SetConfig changes the settings for misses from now on.
func (g *MissGate) SetConfig(cfg MissGateConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	g.cfg.Store(&cfg)
	return nil
}

// Miss records that reader (a session's id) got no value for key. It
// returns a channel closed when the key is written, and when to stop
// waiting (Wait from now), if the reader should wait; a nil channel when it should take
// its reply as it is: it is the filler, the key is learned absent, or the
// gate is full.
func (g *MissGate) Miss(key []byte, reader int64) (<-chan struct{}, time.Time) {
	cfg := g.cfg.Load()
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.keys[string(key)]
	switch {
	case ok && st.done != nil && now.Before(st.until):
		if st.filler == reader {
			return nil, time.Time{} // the filler reading again before it writes
		}
		g.m.waits.Inc()
		return st.done, now.Add(cfg.Wait) // each reader is held at most Wait
	case ok && st.done != nil && now.Before(st.until.Add(cfg.AbsentFor)):
		// The wait ended with no write and readers still miss: nobody
		// fills it. Learn it. (A filling much older than that says
		// nothing about now: a new filler below.)
		st.done, st.until = nil, now.Add(cfg.AbsentFor)
		g.m.absent.Inc()
		return nil, time.Time{}
	case ok && now.Before(st.until):
		return nil, time.Time{} // learned absent
	case !ok && len(g.keys) >= cfg.MaxKeys && !g.sweepLocked(now):
		return nil, time.Time{}
	}
	// A new miss (or an absence forgotten): this reader fills.
	g.keys[string(key)] = &missState{filler: reader, until: now.Add(cfg.Wait), done: make(chan struct{})}
	g.entries.Store(int64(len(g.keys)))
	g.m.fillers.Inc()
	return nil, time.Time{}
}

// sweepLocked drops absences that have ended and fills nobody waits for
// any more; it reports whether there is room.
func (g *MissGate) sweepLocked(now time.Time) bool {
	for k, st := range g.keys {
		if !now.Before(st.until) { // its waiters' own timers have ended
			delete(g.keys, k)
		}
	}
	g.entries.Store(int64(len(g.keys)))
	return len(g.keys) < g.cfg.Load().MaxKeys
}

// Wait holds a reader Miss told to wait until done is closed (the key was
// written: true) or until (false).
func (g *MissGate) Wait(done <-chan struct{}, until time.Time) bool {
	d := until.Sub(g.now())
	if d <= 0 {
		select {
		case <-done:
			return true
		default:
			g.m.timeouts.Inc()
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		g.m.timeouts.Inc()
		return false
	}
}

// Present is Written for a reader that found a value: the key has been
// filled, however the write came (one the caller could not see, or one
// that landed before the miss was recorded), so it is not learned absent.
func (g *MissGate) Present(key []byte) { g.Written(key) }

// Written releases the readers waiting for key and forgets that it was
// missing or absent: call it once a write to key is acknowledged, or
// Redis has said it changed (an invalidation).
func (g *MissGate) Written(key []byte) {
	if g.entries.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.keys[string(key)]; ok {
		if st.done != nil {
			close(st.done)
		}
		delete(g.keys, string(key))
		g.entries.Store(int64(len(g.keys)))
	}
}

// Clear releases every waiting reader and forgets every key (a database
// emptied, an unknown write, tracking lost).
func (g *MissGate) Clear() {
	if g.entries.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, st := range g.keys {
		if st.done != nil {
			close(st.done)
		}
		delete(g.keys, k)
	}
	g.entries.Store(0)
}
