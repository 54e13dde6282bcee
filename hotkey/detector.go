package hotkey

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// DetectorConfig configures a Detector. Start from DefaultDetectorConfig:
// zero fields are errors, not defaults.
type DetectorConfig struct {
	// Threshold is the rate, in reads per second, at or above which a key
	// is hot.
	Threshold float64
	// Window is the span rates are measured over (sliding).
	Window time.Duration
	// TopK bounds the keys tracked as candidates, hence the hot keys.
	TopK int
	// Width is the sketch's counters per row, a power of two. The
	// overestimate is at most e/Width of the window's reads (see doc.go).
	Width int
	// Depth is the sketch's rows: the bound holds with probability
	// 1-e^-Depth.
	Depth int
	// MaxKeyLen: longer keys are never hot, so a candidate costs at most
	// this many bytes of key.
	MaxKeyLen int
}

// DefaultDetectorConfig returns 500 reads/s over 1s, 64 candidates and a
// 4096x4 sketch (128 KiB), keys up to 1 KiB.
func DefaultDetectorConfig() DetectorConfig {
	return DetectorConfig{
		Threshold: 500,
		Window:    time.Second,
		TopK:      64,
		Width:     4096,
		Depth:     4,
		MaxKeyLen: 1024,
	}
}

// Limits that keep the memory budget and the arithmetic sane.
const (
	maxWindow = 24 * time.Hour // 32-bit counters; 2*Window must not overflow
	maxTopK   = 1 << 16
	maxWidth  = 1 << 24
	maxDepth  = 16
)

// Validate reports every problem in c, joined, one per line.
func (c DetectorConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("hotkey: detector: "+format, args...))
	}
	if !(c.Threshold > 0) || math.IsInf(c.Threshold, 0) {
		add("threshold must be a positive number of reads per second, got %v", c.Threshold)
	}
	if c.Window <= 0 || c.Window > maxWindow {
		add("window must be in (0, %v], got %v", maxWindow, c.Window)
	}
	if c.TopK < 1 || c.TopK > maxTopK {
		add("top_k must be in [1, %d], got %d", maxTopK, c.TopK)
	}
	if c.Width < 1 || c.Width > maxWidth || c.Width&(c.Width-1) != 0 {
		add("width must be a power of two in [1, %d], got %d", maxWidth, c.Width)
	}
	if c.Depth < 1 || c.Depth > maxDepth {
		add("depth must be in [1, %d], got %d", maxDepth, c.Depth)
	}
	if c.MaxKeyLen < 1 {
		add("max_key_len must be at least 1 byte, got %d", c.MaxKeyLen)
	}
	return errors.Join(errs...)
}

// candidateOverhead estimates a candidate's memory beside its key bytes:
// its map slot (string header, hash, control byte, load factor), counted
// twice because a change builds the new table while readers may still hold
// the old one.
const candidateOverhead = 64

// memoryBytes is the memory the config implies: the sketch plus TopK
// candidates with keys of MaxKeyLen. The Detector's own fields (a few
// hundred bytes) are not counted.
func (c DetectorConfig) memoryBytes() int64 {
	return int64(c.Width)*int64(c.Depth)*8 + int64(c.TopK)*(int64(c.MaxKeyLen)+candidateOverhead)
}

// HotKey is a hot key and its estimated rate.
type HotKey struct {
	Key  string
	Rate float64 // reads per second over the window
}

// Detector finds the keys read at or above a rate. It is safe for
// concurrent use.
type Detector struct {
	now       func() time.Time
	window    time.Duration
	perNano   float64 // 1/window in ns, to weigh without dividing
	thr       float64 // Threshold as reads per window
	perSecond float64 // window reads -> reads per second
	topK      int
	depth     int
	widthLog  uint
	mask      uint32
	maxKeyLen int
	memory    int64

	// counts is the sketch, Depth rows of Width words. Each word holds
	// two 32-bit counters, the current and the previous sub-window's (the
	// epoch says which half is which), so one atomic add both counts a
	// read and returns the counts it is estimated from.
	counts []atomic.Uint64
	epoch  atomic.Pointer[epoch]
	// cands is the candidate table, copy-on-write: a read of a hot key
	// looks it up without a lock, and it changes only when a key enters
	// or leaves.
	cands atomic.Pointer[candSet]
	// floor, when not 0, holds the float64 bits of the lowest candidate
	// estimate last found with the table full (by a newcomer turned away
	// or let in): a newcomer at or below it would not get in, so it does
	// not take the lock to try. Reset at each rotation, so it is at most
	// one sub-window stale.
	floor atomic.Uint64

	mu sync.Mutex // rotation and candidate changes
}

// epoch is one sub-window: it started at start, and its count is in the
// half of each word at bit shift (0 or 32); the other half is the
// previous sub-window's.
type epoch struct {
	start time.Time
	shift uint
}

// candSet maps a candidate key to its hash. Never modified once published.
type candSet struct {
	m map[string]uint64
}

// NewDetector returns a Detector reading time from now, with its metric
// on reg (nil: unregistered).
func NewDetector(cfg DetectorConfig, now func() time.Time, reg prometheus.Registerer) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		return nil, errors.New("hotkey: detector: now is nil")
	}
	d := &Detector{
		now:       now,
		window:    cfg.Window,
		perNano:   1 / float64(cfg.Window),
		thr:       cfg.Threshold * cfg.Window.Seconds(),
		perSecond: 1 / cfg.Window.Seconds(),
		topK:      cfg.TopK,
		depth:     cfg.Depth,
		widthLog:  uint(bits.TrailingZeros(uint(cfg.Width))),
		mask:      uint32(cfg.Width - 1),
		maxKeyLen: cfg.MaxKeyLen,
		memory:    cfg.memoryBytes(),
		counts:    make([]atomic.Uint64, cfg.Width*cfg.Depth),
	}
	d.epoch.Store(&epoch{start: now()})
	d.cands.Store(&candSet{m: map[string]uint64{}})
	if reg != nil {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "hot_keys", Help: "Keys currently read at or above the hot threshold."},
			func() float64 { return float64(d.hotCount()) })
		if err := reg.Register(g); err != nil {
			return nil, fmt.Errorf("hotkey: detector: registering metrics: %w", err)
		}
	}
	return d, nil
}

// MemoryBytes is the fixed memory budget of d's config.
func (d *Detector) MemoryBytes() int64 { return d.memory }

// Observe counts one read of key and reports whether key is hot now.
// It allocates nothing unless key enters the candidate table.
func (d *Detector) Observe(key []byte) bool {
	if len(key) > d.maxKeyLen {
		return false
	}
	h := xxhash.Sum64(key)
	t := d.now()
	e, el := d.epochAt(t)
	wc, wp := d.weights(el)
	inc := uint64(1) << e.shift
	// One hash, Depth indexes (Kirsch-Mitzenmacher): h1 + i*h2.
	h1, h2 := uint32(h), uint32(h>>32)|1
	est := math.MaxFloat64
	for i := range d.depth {
		w := d.counts[i<<d.widthLog+int((h1+uint32(i)*h2)&d.mask)].Add(inc)
		if v := float64(uint32(w>>e.shift))*wc + float64(uint32(w>>(32-e.shift)))*wp; v < est {
			est = v
		}
	}
	if est < d.thr {
		return false
	}
	return d.admit(key, h, est, t)
}

// IsHot reports whether key is hot now, without counting a read.
func (d *Detector) IsHot(key []byte) bool {
	if len(key) > d.maxKeyLen {
		return false
	}
	h, ok := d.cands.Load().m[string(key)]
	if !ok {
		return false
	}
	e, el := d.epochAt(d.now())
	wc, wp := d.weights(el)
	return d.estimate(e, h, wc, wp) >= d.thr
}

// Hot returns the hot keys, highest rate first (equal rates by key).
func (d *Detector) Hot() []HotKey {
	cs := d.cands.Load()
	e, el := d.epochAt(d.now())
	wc, wp := d.weights(el)
	var hot []HotKey
	for k, h := range cs.m {
		if est := d.estimate(e, h, wc, wp); est >= d.thr {
			hot = append(hot, HotKey{Key: k, Rate: est * d.perSecond})
		}
	}
	slices.SortFunc(hot, func(a, b HotKey) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return hot
}

// hotCount is len(Hot()) without allocating, for the gauge.
func (d *Detector) hotCount() int {
	cs := d.cands.Load()
	e, el := d.epochAt(d.now())
	wc, wp := d.weights(el)
	n := 0
	for _, h := range cs.m {
		if d.estimate(e, h, wc, wp) >= d.thr {
			n++
		}
	}
	return n
}

// epochAt returns the sub-window at t, rotating if t is past its end, and
// how far into it t is. If another goroutine holds the lock (rotating or
// admitting a key), it returns the old epoch rather than wait: weights
// still estimates correctly from it, and this read counts toward what is
// about to be the previous sub-window.
func (d *Detector) epochAt(t time.Time) (*epoch, time.Duration) {
	e := d.epoch.Load()
	el := t.Sub(e.start)
	if el < d.window || !d.mu.TryLock() {
		return e, el
	}
	e = d.rotateLocked(t)
	d.mu.Unlock()
	return e, t.Sub(e.start)
}

// weights returns the weights of the current and previous counts for an
// estimate el into the current sub-window: the windowed count is
// cur + prev*(1-el/Window), assuming the previous sub-window's reads were
// spread evenly. Past the sub-window's end (rotation not done yet), its
// count is the previous one's, decaying the same way.
func (d *Detector) weights(el time.Duration) (wc, wp float64) {
	switch {
	case el < 0: // the clock stepped back: count both, an upper bound
		return 1, 1
	case el < d.window:
		return 1, 1 - float64(el)*d.perNano
	case el < 2*d.window:
		return 2 - float64(el)*d.perNano, 0
	default:
		return 0, 0
	}
}

// estimate is the count-min estimate of the reads of hash h in the window.
func (d *Detector) estimate(e *epoch, h uint64, wc, wp float64) float64 {
	h1, h2 := uint32(h), uint32(h>>32)|1
	est := math.MaxFloat64
	for i := range d.depth {
		w := d.counts[i<<d.widthLog+int((h1+uint32(i)*h2)&d.mask)].Load()
		if v := float64(uint32(w>>e.shift))*wc + float64(uint32(w>>(32-e.shift)))*wp; v < est {
			est = v
		}
	}
	return est
}

// rotateLocked starts the sub-window containing t: the current counts
// become the previous ones and the old previous ones are zeroed to count
// anew (both are zeroed if a whole sub-window passed unobserved).
// Sub-windows stay on the grid start+n*Window. Then candidates below the
// threshold leave the table.
//
// Zeroing happens before the new epoch is published: readers still on the
// old one meanwhile see a lower previous count, never a count that belongs
// to no window. A read that loaded the old epoch and adds after the
// rotation counts toward the previous sub-window: an error of the reads in
// flight, not of the window.
func (d *Detector) rotateLocked(t time.Time) *epoch {
	e := d.epoch.Load()
	el := t.Sub(e.start)
	if el < d.window {
		return e // rotated by another goroutine
	}
	n := el / d.window
	ne := &epoch{start: e.start.Add(n * d.window), shift: e.shift}
	if n == 1 {
		ne.shift = 32 - e.shift
		keep := ^(uint64(math.MaxUint32) << ne.shift)
		for i := range d.counts {
			d.counts[i].And(keep)
		}
	} else {
		for i := range d.counts {
			d.counts[i].Store(0)
		}
	}
	d.epoch.Store(ne)
	d.floor.Store(0)

	wc, wp := d.weights(t.Sub(ne.start))
	cs := d.cands.Load()
	var keep map[string]uint64
	for k, h := range cs.m {
		if d.estimate(ne, h, wc, wp) >= d.thr {
			continue
		}
		if keep == nil {
			keep = copyCands(cs.m, len(cs.m))
		}
		delete(keep, k)
	}
	if keep != nil {
		d.cands.Store(&candSet{m: keep})
	}
	return ne
}

// admit puts key, estimated at est >= threshold, in the candidate table
// if it is there already, there is room, or it beats the lowest candidate,
// which it then replaces. It reports whether key is a candidate.
func (d *Detector) admit(key []byte, h uint64, est float64, t time.Time) bool {
	if _, ok := d.cands.Load().m[string(key)]; ok {
		return true
	}
	if f := d.floor.Load(); f != 0 && est <= math.Float64frombits(f) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.cands.Load()
	if _, ok := cs.m[string(key)]; ok {
		return true
	}
	if len(cs.m) < d.topK {
		m := copyCands(cs.m, len(cs.m)+1)
		m[string(key)] = h
		d.cands.Store(&candSet{m: m})
		return true
	}
	// Full: compare with fresh estimates, since candidates' rates change.
	e := d.epoch.Load()
	wc, wp := d.weights(t.Sub(e.start))
	minKey, minEst, next := "", math.MaxFloat64, math.MaxFloat64
	for k, kh := range cs.m {
		switch v := d.estimate(e, kh, wc, wp); {
		case v < minEst:
			minKey, minEst, next = k, v, minEst
		case v < next:
			next = v
		}
	}
	if est <= minEst {
		d.floor.Store(math.Float64bits(minEst))
		return false
	}
	// The floor rises with each replacement, so when many keys hover
	// around the lowest candidate (or the sketch is saturated and every
	// key looks hot) the table settles instead of churning on every read.
	d.floor.Store(math.Float64bits(min(next, est)))
	m := copyCands(cs.m, len(cs.m))
	delete(m, minKey)
	m[string(key)] = h
	d.cands.Store(&candSet{m: m})
	return true
}

// copyCands returns a copy of m with room for size entries.
func copyCands(m map[string]uint64, size int) map[string]uint64 {
	c := make(map[string]uint64, size)
	for k, v := range m {
		c[k] = v
	}
	return c
}
