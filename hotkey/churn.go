package hotkey

import (
	"fmt"
	"sync"
	"time"
)

// ChurnConfig configures a Churn.
type ChurnConfig struct {
	// Window is the sliding window invalidations are counted over; > 0.
	Window time.Duration
	// Limit: a key invalidated more than Limit times within Window is
	// write-hot. 0 turns the check off (no key is write-hot).
	Limit int
}

// DefaultChurnConfig counts over 1s and calls a key write-hot from its
// fifth invalidation in that window.
func DefaultChurnConfig() ChurnConfig {
	return ChurnConfig{Window: time.Second, Limit: 4}
}

// Validate reports what makes c unusable.
func (c ChurnConfig) Validate() error {
	if c.Window <= 0 {
		return fmt.Errorf("hotkey: churn: window must be positive, got %v", c.Window)
	}
	if c.Limit < 0 {
		return fmt.Errorf("hotkey: churn: limit must be >= 0 (0: off), got %d", c.Limit)
	}
	return nil
}

// churnSlots is the counters per row; two rows are indexed by the two
// halves of a key's hash, and a key's count is the smaller of its two.
const churnSlots = 2048

// Churn counts invalidations per key in fixed memory (two rows of
// churnSlots counters for each of two sub-windows, 32 KB), like the
// detector's sketch: a count only overestimates (another key sharing both
// slots adds to it), so a key may be taken for write-hot, never the
// reverse. The rate is the current sub-window's count plus the previous
// one's weighted by how much of it is still inside the sliding window.
// Safe for concurrent use.
type Churn struct {
	now func() time.Time

	mu        sync.Mutex
	cfg       ChurnConfig
	start     time.Time // the current sub-window's start
	cur, prev [2][churnSlots]uint32
}

// NewChurn returns an empty Churn reading time from now.
func NewChurn(cfg ChurnConfig, now func() time.Time) (*Churn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		return nil, fmt.Errorf("hotkey: churn: now is nil")
	}
	return &Churn{now: now, cfg: cfg, start: now()}, nil
}

// SetConfig changes the window and the limit; counts are kept.
func (c *Churn) SetConfig(cfg ChurnConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	c.cfg = cfg
	c.mu.Unlock()
	return nil
}

func churnIndex(hash uint64) (uint32, uint32) {
	return uint32(hash) % churnSlots, uint32(hash>>32) % churnSlots
}

// rotateLocked moves to the sub-window holding now and returns the part
// of the current one elapsed (0..1).
func (c *Churn) rotateLocked(now time.Time) float64 {
	w := c.cfg.Window
	el := now.Sub(c.start)
	if el < 0 { // the clock went back: count in the current sub-window
		return 0
	}
	if el >= w {
		if el >= 2*w {
			c.prev = [2][churnSlots]uint32{}
			c.start = now
		} else {
			c.prev = c.cur
			c.start = c.start.Add(w)
		}
		c.cur = [2][churnSlots]uint32{}
		el = now.Sub(c.start)
	}
	return float64(el) / float64(w)
}

// Record counts one invalidation of the key whose hash (xxhash.Sum64) is
// hash.
func (c *Churn) Record(hash uint64) {
	a, b := churnIndex(hash)
	c.mu.Lock()
	if c.cfg.Limit > 0 {
		c.rotateLocked(c.now())
		if c.cur[0][a] < ^uint32(0) {
			c.cur[0][a]++
		}
		if c.cur[1][b] < ^uint32(0) {
			c.cur[1][b]++
		}
	}
	c.mu.Unlock()
}

// Rate returns the estimated invalidations of the key within the window.
func (c *Churn) Rate(hash uint64) float64 {
	a, b := churnIndex(hash)
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.rotateLocked(c.now())
	r0 := float64(c.cur[0][a]) + float64(c.prev[0][a])*(1-f)
	r1 := float64(c.cur[1][b]) + float64(c.prev[1][b])*(1-f)
	return min(r0, r1)
}

// Hot reports whether the key was invalidated more than Limit times within
// the window (always false with Limit 0).
func (c *Churn) Hot(hash uint64) bool {
	c.mu.Lock()
	limit := c.cfg.Limit
	c.mu.Unlock()
	return limit > 0 && c.Rate(hash) > float64(limit)
}
