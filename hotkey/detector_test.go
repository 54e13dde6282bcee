package hotkey

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// clock is a fake clock, safe for concurrent use. It starts on a whole
// second, so the detector's sub-windows start on whole seconds too.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(1_700_000_000 * int64(time.Second))
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTestDetector(t testing.TB, cfg DetectorConfig, c *clock) *Detector {
	t.Helper()
	d, err := NewDetector(cfg, c.now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *Detector) candidates() int { return len(d.sk.Load().cands.Load().m) }

// readAt reads key every period for span, and returns the offset of the
// first read that Observe called hot (-1: none).
func readAt(d *Detector, c *clock, key string, period, span time.Duration) time.Duration {
	first := time.Duration(-1)
	for at := time.Duration(0); at < span; at += period {
		if d.Observe([]byte(key)) && first < 0 {
			first = at
		}
		c.advance(period)
	}
	return first
}

// TestHotWithinOneWindow: a key read at 2x Threshold is hot within one
// Window, whether it starts at a sub-window's start or in its middle.
func TestHotWithinOneWindow(t *testing.T) {
	cfg := DefaultDetectorConfig() // 500 reads/s over 1s
	c := newClock()
	d := newTestDetector(t, cfg, c)
	// From a sub-window's start: exactly the 500th read (at 499ms).
	if first := readAt(d, c, "k", time.Millisecond, time.Second); first != 499*time.Millisecond {
		t.Fatalf("hot first at %v, want 499ms", first)
	}
	// At 999ms the estimate is the 1000 reads of the last second.
	c.advance(-time.Millisecond)
	if hot := d.Hot(); len(hot) != 1 || hot[0].Key != "k" || hot[0].Rate != 1000 {
		t.Fatalf("Hot() = %v, want [{k 1000}]", hot)
	}

	// At 1.6x from the middle of a sub-window: 400 reads by its end, then
	// the new one's j-th read at j*1.25ms estimates (j+1) + 400*(1-j/800),
	// 500 at j=198 (747.5ms after the first read; float rounding may take
	// one more read). A true sliding window would say 625ms: the previous
	// sub-window's weight delays it, but not past one Window.
	c = newClock()
	d = newTestDetector(t, cfg, c)
	c.advance(cfg.Window / 2)
	first := readAt(d, c, "k", 1250*time.Microsecond, 2*time.Second)
	if first != 747500*time.Microsecond && first != 748750*time.Microsecond {
		t.Fatalf("hot first at %v, want 747.5ms", first)
	}
}

// TestHalfThresholdNeverHot: a key read at 0.5x Threshold is never hot,
// however the reads fall on the sub-windows.
func TestHalfThresholdNeverHot(t *testing.T) {
	c := newClock()
	d := newTestDetector(t, DefaultDetectorConfig(), c)
	c.advance(300 * time.Millisecond)
	if first := readAt(d, c, "k", 4*time.Millisecond, 3*time.Second); first >= 0 {
		t.Fatalf("a key at 250 reads/s was hot at %v", first)
	}
	if d.IsHot([]byte("k")) || len(d.Hot()) != 0 || d.candidates() != 0 {
		t.Fatalf("a key at 250 reads/s is hot: %v", d.Hot())
	}
}

// TestStopsBeingHot: a key no longer read is not hot one Window after its
// last read when it was read below 4x Threshold, and two Windows after in
// any case.
func TestStopsBeingHot(t *testing.T) {
	for _, tc := range []struct {
		name         string
		period, span time.Duration
		after        time.Duration // still hot this long after the last read
	}{
		{"2x, stops at a sub-window's end", time.Millisecond, 2 * time.Second, 0},
		{"2x, stops mid sub-window", time.Millisecond, 1500 * time.Millisecond, 0},
		{"5x, stops mid sub-window", 400 * time.Microsecond, 1500 * time.Millisecond, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			reg := prometheus.NewRegistry()
			d, err := NewDetector(DefaultDetectorConfig(), c.now, reg)
			if err != nil {
				t.Fatal(err)
			}
			readAt(d, c, "k", tc.period, tc.span)
			c.advance(-tc.period) // back to the last read
			if !d.IsHot([]byte("k")) || gauge(t, reg, "rproxy_hotkey_hot_keys") != 1 {
				t.Fatal("not hot at its last read")
			}
			c.advance(time.Second - time.Nanosecond)
			if d.IsHot([]byte("k")) != (tc.after > 0) {
				t.Fatalf("hot one window after its last read: %v, want %v", d.IsHot([]byte("k")), tc.after > 0)
			}
			c.advance(time.Second)
			if d.IsHot([]byte("k")) || len(d.Hot()) != 0 || gauge(t, reg, "rproxy_hotkey_hot_keys") != 0 {
				t.Fatalf("hot two windows after its last read: %v", d.Hot())
			}
			if d.candidates() != 0 {
				t.Fatalf("%d candidates left after rotation", d.candidates())
			}
		})
	}
}

// TestScanNamesNoHotKey: 1,000,000 distinct keys read once each in one
// Window name no hot key, never allocate, and never grow the candidates.
// (100,000 under the race detector, over the same Window.)
func TestScanNamesNoHotKey(t *testing.T) {
	n, step := 1_000_000, time.Microsecond
	if raceEnabled {
		n, step = 100_000, 10*time.Microsecond
	}
	c := newClock()
	d := newTestDetector(t, DefaultDetectorConfig(), c)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	key := make([]byte, 0, 32)
	hot := 0
	for i := range n {
		key = strconv.AppendInt(append(key[:0], "scan:"...), int64(i), 10)
		if d.Observe(key) {
			hot++
		}
		c.advance(step)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if hot != 0 || len(d.Hot()) != 0 || d.candidates() != 0 {
		t.Fatalf("a scan named hot keys: %d reads called hot, Hot() = %v", hot, d.Hot())
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > d.MemoryBytes() {
		t.Fatalf("the heap grew by %d bytes during the scan, budget %d", grown, d.MemoryBytes())
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		key = strconv.AppendInt(append(key[:0], "more:"...), int64(i), 10)
		d.Observe(key)
	})
	if allocs != 0 {
		t.Fatalf("Observe of a cold key allocates %v times", allocs)
	}
}

// TestCandidatesBounded: with more keys above Threshold than TopK, at most
// TopK are tracked and named, and they are the fastest.
func TestCandidatesBounded(t *testing.T) {
	cfg := DefaultDetectorConfig()
	cfg.TopK = 4
	cfg.Threshold = 100
	c := newClock()
	d := newTestDetector(t, cfg, c)
	// Key i is read every (i+1) ms: 1000/(i+1) reads/s, all above 100.
	for tick := 0; tick < 2000; tick++ {
		for i := range 9 {
			if tick%(i+1) == 0 {
				d.Observe([]byte(strconv.Itoa(i)))
			}
			if n := d.candidates(); n > cfg.TopK {
				t.Fatalf("%d candidates, TopK %d", n, cfg.TopK)
			}
		}
		c.advance(time.Millisecond)
	}
	hot := d.Hot()
	var names []string
	for _, h := range hot {
		names = append(names, h.Key)
	}
	if got := strings.Join(names, ","); got != "0,1,2,3" {
		t.Fatalf("Hot() names %s, want 0,1,2,3 (%v)", got, hot)
	}
}

// TestSaturatedSketchSettles: when every key looks hot (a sketch far too
// narrow for the traffic), the table stays within TopK and stops changing
// on every read.
func TestSaturatedSketchSettles(t *testing.T) {
	cfg := DefaultDetectorConfig()
	cfg.Threshold = 1 // every key is hot
	c := newClock()
	d := newTestDetector(t, cfg, c)
	key := make([]byte, 0, 16)
	rng := rand.New(rand.NewPCG(3, 4))
	read := func() {
		key = strconv.AppendInt(append(key[:0], "k"...), rng.Int64N(1<<20), 10)
		d.Observe(key)
		c.advance(time.Microsecond)
		if n := d.candidates(); n > cfg.TopK {
			t.Fatalf("%d candidates, TopK %d", n, cfg.TopK)
		}
	}
	for range 50_000 {
		read()
	}
	// Entering the table allocates the new table and the key: rarely, not
	// on every read.
	if allocs := testing.AllocsPerRun(5000, read); allocs > 0.01 {
		t.Fatalf("%v allocations per read: the table churns", allocs)
	}
}

// TestZipf: on a skewed stream the hot keys are those whose true count
// reaches the threshold (the sketch may add at most e/Width*N), fastest
// first.
func TestZipf(t *testing.T) {
	cfg := DefaultDetectorConfig()
	cfg.Threshold = 2000
	c := newClock()
	d := newTestDetector(t, cfg, c)
	const n = 200_000
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 99_999)
	counts := map[string]int{}
	for range n {
		k := "user:" + strconv.FormatUint(z.Uint64(), 10)
		counts[k]++
		d.Observe([]byte(k))
		c.advance(cfg.Window / n)
	}
	c.advance(-1) // still in the first sub-window: estimates are counts
	hot := d.Hot()
	named := map[string]bool{}
	for i, h := range hot {
		named[h.Key] = true
		if i > 0 && h.Rate > hot[i-1].Rate {
			t.Fatalf("Hot() not by rate: %v", hot)
		}
		if h.Rate < float64(counts[h.Key]) {
			t.Fatalf("%s estimated at %v, below its true %d", h.Key, h.Rate, counts[h.Key])
		}
		if bound := math.E / float64(cfg.Width) * n; float64(counts[h.Key]) < cfg.Threshold-bound {
			t.Fatalf("%s named hot with %d reads, more than %v under the threshold", h.Key, counts[h.Key], bound)
		}
	}
	want, most := 0, 0
	for k, v := range counts {
		if v >= int(cfg.Threshold) {
			want++
			if !named[k] {
				t.Errorf("%s read %d times in the window, not named hot", k, v)
			}
		}
		most = max(most, v)
	}
	if len(hot) < want || want < 3 || counts[hot[0].Key] != most {
		t.Fatalf("Hot() = %v, want %d keys led by the one read %d times", hot, want, most)
	}
}

// TestLongKeysNeverHot: a key over MaxKeyLen is not counted.
func TestLongKeysNeverHot(t *testing.T) {
	cfg := DefaultDetectorConfig()
	cfg.MaxKeyLen = 8
	c := newClock()
	d := newTestDetector(t, cfg, c)
	if first := readAt(d, c, "123456789", 100*time.Microsecond, time.Second); first >= 0 || len(d.Hot()) != 0 {
		t.Fatal("a key over MaxKeyLen was hot")
	}
	if first := readAt(d, c, "12345678", 100*time.Microsecond, time.Second); first < 0 {
		t.Fatal("a key of MaxKeyLen was not hot")
	}
}

// TestConcurrentDetector runs readers of a hot key and of distinct keys,
// each advancing the shared clock (so sub-windows rotate under them), with
// queries in between; run with -race.
func TestConcurrentDetector(t *testing.T) {
	cfg := DefaultDetectorConfig()
	cfg.Window = 10 * time.Millisecond
	cfg.Threshold = 10_000 // 100 reads per window
	c := newClock()
	reg := prometheus.NewRegistry()
	d, err := NewDetector(cfg, c.now, reg)
	if err != nil {
		t.Fatal(err)
	}
	const workers, reads = 4, 2000
	var wg sync.WaitGroup
	var coldHot atomic.Int64
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := make([]byte, 0, 32)
			for i := range reads {
				d.Observe([]byte("hot"))
				key = fmt.Appendf(key[:0], "cold:%d:%d", w, i)
				if d.Observe(key) {
					coldHot.Add(1)
				}
				c.advance(5 * time.Microsecond)
				if i%100 == 0 {
					d.Hot()
					d.IsHot([]byte("hot"))
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for range 50 {
			gauge(t, reg, "rproxy_hotkey_hot_keys")
			runtime.Gosched()
		}
	}()
	close(start)
	wg.Wait()
	// 8000 reads of "hot" over 40ms of fake time: about 2000 per window.
	if hot := d.Hot(); len(hot) != 1 || hot[0].Key != "hot" || !d.IsHot([]byte("hot")) {
		t.Fatalf("Hot() = %v, want [hot]", hot)
	}
	if coldHot.Load() != 0 {
		t.Fatalf("%d reads of cold keys called hot", coldHot.Load())
	}
}

func TestDetectorValidate(t *testing.T) {
	if err := DefaultDetectorConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	err := DetectorConfig{Width: 1000, Threshold: math.NaN()}.Validate()
	if err == nil {
		t.Fatal("zero config accepted")
	}
	msg := err.Error()
	for _, want := range []string{"threshold", "window", "top_k", "width must be a power of two in [1, 16777216], got 1000", "depth", "max_key_len"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if lines := strings.Count(msg, "\n") + 1; lines != 6 {
		t.Errorf("%d problems reported, want 6:\n%s", lines, msg)
	}
	if _, err := NewDetector(DetectorConfig{}, time.Now, nil); err == nil {
		t.Error("NewDetector accepted an invalid config")
	}
	if _, err := NewDetector(DefaultDetectorConfig(), nil, nil); err == nil {
		t.Error("NewDetector accepted a nil clock")
	}
}

func TestDetectorMemoryBytes(t *testing.T) {
	d := newTestDetector(t, DefaultDetectorConfig(), newClock())
	if got, want := d.MemoryBytes(), int64(4096*4*8+64*(1024+candidateOverhead)); got != want {
		t.Fatalf("MemoryBytes() = %d, want %d", got, want)
	}
}

// TestDetectorRegistries: detectors on two fresh registries do not clash;
// a second one on the same registry is an error, not a panic.
func TestDetectorRegistries(t *testing.T) {
	r1, r2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	for _, reg := range []prometheus.Registerer{r1, r2, nil, nil} {
		if _, err := NewDetector(DefaultDetectorConfig(), time.Now, reg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewDetector(DefaultDetectorConfig(), time.Now, r1); err == nil {
		t.Fatal("two detectors registered on one registry")
	}
}

// gauge returns the value of the unlabelled gauge or counter name in reg.
func gauge(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Error(err)
		return math.NaN()
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Errorf("no metric %s", name)
	return math.NaN()
}

func BenchmarkObserveUniform(b *testing.B) {
	var ns int64
	base := time.Unix(1_700_000_000, 0)
	// 1M reads per second of fake time: a busy proxy.
	now := func() time.Time { ns += 1000; return base.Add(time.Duration(ns)) }
	d, err := NewDetector(DefaultDetectorConfig(), now, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user:session:%d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d.Observe(keys[i&(len(keys)-1)])
	}
}

func BenchmarkObserveHot(b *testing.B) {
	var ns int64
	base := time.Unix(1_700_000_000, 0)
	now := func() time.Time { ns += 1000; return base.Add(time.Duration(ns)) }
	d, err := NewDetector(DefaultDetectorConfig(), now, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := [][]byte{[]byte("hot:a"), []byte("hot:b"), []byte("hot:c"), []byte("hot:d")}
	for range 10_000 {
		for _, k := range keys {
			d.Observe(k)
		}
	}
	if len(d.Hot()) != len(keys) {
		b.Fatal("keys not hot")
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if !d.Observe(keys[i&3]) {
			b.Fatal("a hot key not hot")
		}
	}
}

// realClockConfig: a threshold high enough that the sketch is not
// saturated at the ~10-20M reads/s a benchmark with the real clock makes
// (the defaults are sized for up to ~750k reads/s, see doc.go).
func realClockConfig() DetectorConfig {
	cfg := DefaultDetectorConfig()
	cfg.Threshold = 1e6
	return cfg
}

// BenchmarkObserveUniformParallel: the sketch under contention, with the
// real clock.
func BenchmarkObserveUniformParallel(b *testing.B) {
	d, err := NewDetector(realClockConfig(), time.Now, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user:session:%d", i)
	}
	var seed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(7919))
		for pb.Next() {
			d.Observe(keys[i&(len(keys)-1)])
			i++
		}
	})
}

// BenchmarkObserveUniformRealClock: as BenchmarkObserveUniform, reading
// time.Now as the proxy does.
func BenchmarkObserveUniformRealClock(b *testing.B) {
	d, err := NewDetector(realClockConfig(), time.Now, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user:session:%d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d.Observe(keys[i&(len(keys)-1)])
	}
}

// TestDetectorSetConfig: a new threshold applies at once to the counts
// already made, a lower TopK keeps the highest rates, a new window starts
// afresh, and an invalid config changes nothing.
func TestDetectorSetConfig(t *testing.T) {
	cfg := DefaultDetectorConfig() // 500 reads/s over 1s
	c := newClock()
	d := newTestDetector(t, cfg, c)
	// Keys read at 400, 300, 200 and 100 reads/s for one window: none hot.
	for tick := 0; tick < 1000; tick++ {
		for i := 1; i <= 4; i++ {
			if tick%10 < 5-i {
				d.Observe([]byte("k" + strconv.Itoa(i)))
			}
		}
		c.advance(time.Millisecond)
	}
	c.advance(-time.Millisecond)
	if hot := d.Hot(); len(hot) != 0 {
		t.Fatalf("hot before the change: %v", hot)
	}
	// Lowered to 150/s: k1..k3 are hot on their next read, with the
	// counts already made.
	cfg.Threshold = 150
	if err := d.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		hot := d.Observe([]byte("k" + strconv.Itoa(i)))
		if want := i <= 3; hot != want {
			t.Errorf("k%d hot = %v after threshold 150, want %v", i, hot, want)
		}
	}
	if hot := d.Hot(); len(hot) != 3 || hot[0].Key != "k1" {
		t.Fatalf("Hot() after threshold 150 = %v", hot)
	}
	// TopK 2 keeps the two highest rates.
	cfg.TopK = 2
	if err := d.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if hot := d.Hot(); len(hot) != 2 || hot[0].Key != "k1" || hot[1].Key != "k2" {
		t.Fatalf("Hot() after top_k 2 = %v, want k1, k2", hot)
	}
	if d.candidates() != 2 {
		t.Fatalf("%d candidates after top_k 2", d.candidates())
	}
	if got, want := d.MemoryBytes(), cfg.memoryBytes(); got != want {
		t.Fatalf("MemoryBytes = %d, want %d", got, want)
	}
	// An invalid config is refused and changes nothing.
	bad := cfg
	bad.Threshold = -1
	if err := d.SetConfig(bad); err == nil {
		t.Fatal("negative threshold accepted")
	}
	if d.Config() != cfg || len(d.Hot()) != 2 {
		t.Fatalf("a refused config changed the detector: %+v, %v", d.Config(), d.Hot())
	}
	// Raised back: nothing is hot.
	cfg.Threshold = 500
	d.SetConfig(cfg)
	if hot := d.Hot(); len(hot) != 0 {
		t.Fatalf("Hot() after threshold 500 = %v", hot)
	}
	// A new window starts counting afresh.
	cfg.Threshold, cfg.Window = 150, 2*time.Second
	if err := d.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if hot := d.Hot(); len(hot) != 0 || d.Observe([]byte("k1")) {
		t.Fatalf("counts survived a new window: %v", hot)
	}
	// 150/s over 2s is 300 reads.
	if first := readAt(d, c, "k1", time.Millisecond, 2*time.Second); first != 298*time.Millisecond {
		t.Fatalf("hot first at %v with the new window, want 298ms (the 300th read)", first)
	}
}

// TestDetectorSetConfigConcurrent: settings change while readers count
// (run with -race); the table never exceeds the larger TopK in use.
func TestDetectorSetConfigConcurrent(t *testing.T) {
	cfg := DefaultDetectorConfig()
	cfg.Threshold, cfg.TopK = 10, 8
	c := newClock()
	d := newTestDetector(t, cfg, c)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				d.Observe([]byte(strconv.Itoa((i * (g + 1)) % 50)))
				if i%100 == 0 {
					c.advance(time.Millisecond)
					d.Hot()
				}
			}
		}()
	}
	for i := range 200 {
		next := cfg
		next.TopK = 4 + i%5
		next.Threshold = float64(5 + i%20)
		if i%50 == 0 {
			next.Window = time.Duration(1+i%3) * time.Second
		}
		if err := d.SetConfig(next); err != nil {
			t.Fatal(err)
		}
		if n := d.candidates(); n > 8 {
			t.Fatalf("%d candidates with top_k at most 8", n)
		}
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
}

// GET /hotkeys serves HotKeys as JSON: snake_case field names.
func TestHotKeyJSON(t *testing.T) {
	b, err := json.Marshal([]HotKey{{Key: "user:1", Rate: 812.5}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `[{"key":"user:1","rate":812.5}]`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}
