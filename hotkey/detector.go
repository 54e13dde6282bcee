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
// Its JSON form (GET /hotkeys) is {"key": ..., "rate": ...}.
type HotKey struct {
	Key  string  `json:"key"`
	Rate float64 `json:"rate"` // reads per second over the window
}

// Detector finds the keys read at or above a rate. It is safe for
// concurrent use. Its settings can change while it runs (SetConfig).
type Detector struct {
	now func() time.Time
	// sk is the sketch and candidate table of the current settings; one
	// atomic load per call finds it, and SetConfig replaces it when the
	// window or the sketch's shape changes.
	sk atomic.Pointer[sketch]

	cfgMu sync.Mutex // SetConfig
	cfg   DetectorConfig
}

// sketch is a Detector's counting state for one window and shape.
type sketch struct {
	window    time.Duration
	perNano   float64 // 1/window in ns, to weigh without dividing
	perSecond float64 // window reads -> reads per second
	depth     int
	widthLog  uint
	mask      uint32
	maxKeyLen int
	// thr holds the float64 bits of Threshold as reads per window: it can
	// change in place (SetConfig), so it is loaded atomically.
	thr atomic.Uint64
	// memory is MemoryBytes; it changes with TopK.
	memory atomic.Int64

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

	mu   sync.Mutex // rotation and candidate changes
	topK int        // under mu
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
	d := &Detector{now: now, cfg: cfg}
	d.sk.Store(newSketch(cfg, now()))
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

func newSketch(cfg DetectorConfig, start time.Time) *sketch {
	s := &sketch{
		window:    cfg.Window,
		perNano:   1 / float64(cfg.Window),
		perSecond: 1 / cfg.Window.Seconds(),
		depth:     cfg.Depth,
		widthLog:  uint(bits.TrailingZeros(uint(cfg.Width))),
		mask:      uint32(cfg.Width - 1),
		maxKeyLen: cfg.MaxKeyLen,
		counts:    make([]atomic.Uint64, cfg.Width*cfg.Depth),
		topK:      cfg.TopK,
	}
	s.thr.Store(math.Float64bits(cfg.Threshold * cfg.Window.Seconds()))
	s.memory.Store(cfg.memoryBytes())
	s.epoch.Store(&epoch{start: start})
	s.cands.Store(&candSet{m: map[string]uint64{}})
	return s
}

// Config returns the detector's current settings.
func (d *Detector) Config() DetectorConfig {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	return d.cfg
}

// SetConfig changes the detector's settings while it runs; an invalid cfg
// changes nothing. Threshold and TopK change in place, keeping the counts:
// keys are hot or not by the new threshold at once, and a lowered TopK
// drops the candidates with the lowest estimates. A new Window, Width,
// Depth or MaxKeyLen starts counting afresh (the old counts are of another
// window or shape): no key is hot until it has been read at the threshold
// again, within one or two windows (see the package documentation).
func (d *Detector) SetConfig(cfg DetectorConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	old := d.cfg
	d.cfg = cfg
	if cfg.Window != old.Window || cfg.Width != old.Width || cfg.Depth != old.Depth || cfg.MaxKeyLen != old.MaxKeyLen {
		d.sk.Store(newSketch(cfg, d.now()))
		return nil
	}
	s := d.sk.Load()
	s.thr.Store(math.Float64bits(cfg.Threshold * cfg.Window.Seconds()))
	s.memory.Store(cfg.memoryBytes())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topK = cfg.TopK
	s.floor.Store(0) // the table's room or its members change
	cs := s.cands.Load()
	if len(cs.m) <= cfg.TopK {
		return nil
	}
	// Keep the TopK highest estimates.
	e := s.epoch.Load()
	wc, wp := s.weights(d.now().Sub(e.start))
	type kv struct {
		k   string
		h   uint64
		est float64
	}
	all := make([]kv, 0, len(cs.m))
	for k, h := range cs.m {
		all = append(all, kv{k, h, s.estimate(e, h, wc, wp)})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if c := cmp.Compare(b.est, a.est); c != 0 {
			return c
		}
		return cmp.Compare(a.k, b.k)
	})
	m := make(map[string]uint64, cfg.TopK)
	for _, c := range all[:cfg.TopK] {
		m[c.k] = c.h
	}
	s.cands.Store(&candSet{m: m})
	return nil
}

// MemoryBytes is the fixed memory budget of d's config.
func (d *Detector) MemoryBytes() int64 { return d.sk.Load().memory.Load() }

// Observe counts one read of key and reports whether key is hot now.
// It allocates nothing unless key enters the candidate table.
func (d *Detector) Observe(key []byte) bool {
	return d.ObserveHash(key, xxhash.Sum64(key))
}

// ObserveHash is Observe for a caller that has already computed
// xxhash.Sum64(key) (it must be exactly that).
func (d *Detector) ObserveHash(key []byte, h uint64) bool {
	s := d.sk.Load()
	if len(key) > s.maxKeyLen {
		return false
	}
	t := d.now()
	e, el := s.epochAt(t)
	wc, wp := s.weights(el)
	inc := uint64(1) << e.shift
	// One hash, Depth indexes (Kirsch-Mitzenmacher): h1 + i*h2.
	h1, h2 := uint32(h), uint32(h>>32)|1
	est := math.MaxFloat64
	for i := range s.depth {
		w := s.counts[i<<s.widthLog+int((h1+uint32(i)*h2)&s.mask)].Add(inc)
		if v := float64(uint32(w>>e.shift))*wc + float64(uint32(w>>(32-e.shift)))*wp; v < est {
			est = v
		}
	}
	if est < s.threshold() {
		return false
	}
	return s.admit(key, h, est, t)
}

// IsHot reports whether key is hot now, without counting a read.
func (d *Detector) IsHot(key []byte) bool {
	s := d.sk.Load()
	if len(key) > s.maxKeyLen {
		return false
	}
	h, ok := s.cands.Load().m[string(key)]
	if !ok {
		return false
	}
	e, el := s.epochAt(d.now())
	wc, wp := s.weights(el)
	return s.estimate(e, h, wc, wp) >= s.threshold()
}

// Hot returns the hot keys, highest rate first (equal rates by key).
func (d *Detector) Hot() []HotKey {
	s := d.sk.Load()
	cs := s.cands.Load()
	e, el := s.epochAt(d.now())
	wc, wp := s.weights(el)
	thr := s.threshold()
	var hot []HotKey
	for k, h := range cs.m {
		if est := s.estimate(e, h, wc, wp); est >= thr {
			hot = append(hot, HotKey{Key: k, Rate: est * s.perSecond})
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
	s := d.sk.Load()
	cs := s.cands.Load()
	e, el := s.epochAt(d.now())
	wc, wp := s.weights(el)
	thr := s.threshold()
	n := 0
	for _, h := range cs.m {
		if s.estimate(e, h, wc, wp) >= thr {
			n++
		}
	}
	return n
}

// threshold is Threshold as reads per window.
func (s *sketch) threshold() float64 { return math.Float64frombits(s.thr.Load()) }

// epochAt returns the sub-window at t, rotating if t is past its end, and
// how far into it t is. Past the end it waits for the lock (once per
// window): returning the old epoch instead, while a goroutine that holds
// the lock to admit a key is descheduled, would count every read made
// meanwhile toward the sub-window about to become the previous one, which
// the rotation then weighs by how late it came, so a hot key could drop
// out of the table (TestConcurrentDetector caught it under -race).
func (s *sketch) epochAt(t time.Time) (*epoch, time.Duration) {
	e := s.epoch.Load()
	el := t.Sub(e.start)
	if el < s.window {
		return e, el
	}
	s.mu.Lock()
	e = s.rotateLocked(t)
	s.mu.Unlock()
	return e, t.Sub(e.start)
}

// weights returns the weights of the current and previous counts for an
// estimate el into the current sub-window: the windowed count is
// cur + prev*(1-el/Window), assuming the previous sub-window's reads were
// spread evenly. Past the sub-window's end (rotation not done yet), its
// count is the previous one's, decaying the same way.
func (s *sketch) weights(el time.Duration) (wc, wp float64) {
	switch {
	case el < 0: // the clock stepped back: count both, an upper bound
		return 1, 1
	case el < s.window:
		return 1, 1 - float64(el)*s.perNano
	case el < 2*s.window:
		return 2 - float64(el)*s.perNano, 0
	default:
		return 0, 0
	}
}

// estimate is the count-min estimate of the reads of hash h in the window.
func (s *sketch) estimate(e *epoch, h uint64, wc, wp float64) float64 {
	h1, h2 := uint32(h), uint32(h>>32)|1
	est := math.MaxFloat64
	for i := range s.depth {
		w := s.counts[i<<s.widthLog+int((h1+uint32(i)*h2)&s.mask)].Load()
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
func (s *sketch) rotateLocked(t time.Time) *epoch {
	e := s.epoch.Load()
	el := t.Sub(e.start)
	if el < s.window {
		return e // rotated by another goroutine
	}
	n := el / s.window
	ne := &epoch{start: e.start.Add(n * s.window), shift: e.shift}
	if n == 1 {
		ne.shift = 32 - e.shift
		keep := ^(uint64(math.MaxUint32) << ne.shift)
		for i := range s.counts {
			s.counts[i].And(keep)
		}
	} else {
		for i := range s.counts {
			s.counts[i].Store(0)
		}
	}
	s.epoch.Store(ne)
	s.floor.Store(0)

	wc, wp := s.weights(t.Sub(ne.start))
	thr := s.threshold()
	cs := s.cands.Load()
	var keep map[string]uint64
	for k, h := range cs.m {
		if s.estimate(ne, h, wc, wp) >= thr {
			continue
		}
		if keep == nil {
			keep = copyCands(cs.m, len(cs.m))
		}
		delete(keep, k)
	}
	if keep != nil {
		s.cands.Store(&candSet{m: keep})
	}
	return ne
}

// admit puts key, estimated at est >= threshold, in the candidate table
// if it is there already, there is room, or it beats the lowest candidate,
// which it then replaces. It reports whether key is a candidate.
func (s *sketch) admit(key []byte, h uint64, est float64, t time.Time) bool {
	if _, ok := s.cands.Load().m[string(key)]; ok {
		return true
	}
	if f := s.floor.Load(); f != 0 && est <= math.Float64frombits(f) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.cands.Load()
	if _, ok := cs.m[string(key)]; ok {
		return true
	}
	if len(cs.m) < s.topK {
		m := copyCands(cs.m, len(cs.m)+1)
		m[string(key)] = h
		s.cands.Store(&candSet{m: m})
		return true
	}
	// Full: compare with fresh estimates, since candidates' rates change.
	e := s.epoch.Load()
	wc, wp := s.weights(t.Sub(e.start))
	minKey, minEst, next := "", math.MaxFloat64, math.MaxFloat64
	for k, kh := range cs.m {
		switch v := s.estimate(e, kh, wc, wp); {
		case v < minEst:
			minKey, minEst, next = k, v, minEst
		case v < next:
			next = v
		}
	}
	if est <= minEst {
		s.floor.Store(math.Float64bits(minEst))
		return false
	}
	// The floor rises with each replacement, so when many keys hover
	// around the lowest candidate (or the sketch is saturated and every
	// key looks hot) the table settles instead of churning on every read.
	s.floor.Store(math.Float64bits(min(next, est)))
	m := copyCands(cs.m, len(cs.m))
	delete(m, minKey)
	m[string(key)] = h
	s.cands.Store(&candSet{m: m})
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
