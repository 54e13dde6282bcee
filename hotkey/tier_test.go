package hotkey

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
)

func newTestTier(t testing.TB, cfg TierConfig, c *clock) *Tier {
	t.Helper()
	tr, err := NewTier(cfg, c.now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// fill begins and puts reply for (key, variant) with the tier's cap.
func fill(tr *Tier, key string, variant uint8, reply string) bool {
	return tr.Put(tr.Begin([]byte(key)), []byte(key), variant, []byte(reply), 0)
}

func get(tr *Tier, key string, variant uint8) (string, bool) {
	r, ok := tr.Get([]byte(key), variant)
	return string(r), ok
}

func mustGet(t *testing.T, tr *Tier, key string, variant uint8, want string) {
	t.Helper()
	if got, ok := get(tr, key, variant); !ok || got != want {
		t.Fatalf("Get(%s, %d) = %q, %v; want %q", key, variant, got, ok, want)
	}
}

func mustMiss(t *testing.T, tr *Tier, key string, variant uint8) {
	t.Helper()
	if got, ok := get(tr, key, variant); ok {
		t.Fatalf("Get(%s, %d) = %q, want a miss", key, variant, got)
	}
}

// TestFillRefusedAfterInvalidate: a fill begun before an invalidation of
// its key is refused; one begun after succeeds.
func TestFillRefusedAfterInvalidate(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	k := []byte("k")
	tok := tr.Begin(k)
	tr.Invalidate(k)
	if tr.Put(tok, k, 2, []byte("$3\r\nold\r\n"), 0) {
		t.Fatal("a fill begun before the invalidation was stored")
	}
	mustMiss(t, tr, "k", 2)
	tok = tr.Begin(k)
	if !tr.Put(tok, k, 2, []byte("$3\r\nnew\r\n"), 0) {
		t.Fatal("a fill begun after the invalidation was refused")
	}
	mustGet(t, tr, "k", 2, "$3\r\nnew\r\n")
	// One token serves every variant of the fill.
	if !tr.Put(tok, k, 3, []byte("$3\r\nnew\r\n"), 0) {
		t.Fatal("second variant of the same fill refused")
	}
	// An invalidation drops every variant.
	tr.Invalidate(k)
	mustMiss(t, tr, "k", 2)
	mustMiss(t, tr, "k", 3)
	if s := tr.Stats(); s.Invalidations != 1 || s.Entries != 0 || s.Bytes != 0 {
		t.Fatalf("stats after invalidating one key: %+v", s)
	}
	// Neither a zero token nor another tier's is accepted.
	if tr.Put(Token{}, k, 2, []byte("x"), 0) {
		t.Fatal("a zero token was accepted")
	}
	other := newTestTier(t, DefaultTierConfig(), newClock())
	if tr.Put(other.Begin(k), k, 2, []byte("x"), 0) {
		t.Fatal("another tier's token was accepted")
	}
}

// TestSlots: invalidating another key refuses a fill only if the two keys
// share a slot (a lost fill, never a stale one).
func TestSlots(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	slot := func(k string) uint64 { return xxhash.Sum64String(k) % slotCount }
	var same, other string
	for i := 0; same == "" || other == ""; i++ {
		k := "k" + strconv.Itoa(i)
		switch {
		case k == "k0":
		case slot(k) == slot("k0") && same == "":
			same = k
		case slot(k) != slot("k0") && other == "":
			other = k
		}
	}
	tok := tr.Begin([]byte("k0"))
	tr.Invalidate([]byte(other))
	if !tr.Put(tok, []byte("k0"), 0, []byte("v"), 0) {
		t.Fatal("invalidating a key in another slot refused the fill")
	}
	tok = tr.Begin([]byte("k0"))
	tr.Invalidate([]byte(same))
	if tr.Put(tok, []byte("k0"), 0, []byte("v"), 0) {
		t.Fatal("invalidating a key in the same slot did not refuse the fill")
	}
	mustGet(t, tr, "k0", 0, "v") // the earlier fill stays: only k0's own invalidation drops it
}

// TestClearBetweenBeginAndPut: a fill begun before Clear is refused.
func TestClearBetweenBeginAndPut(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	fill(tr, "a", 0, "1")
	fill(tr, "b", 0, "2")
	tok := tr.Begin([]byte("c"))
	tr.Clear()
	if tr.Put(tok, []byte("c"), 0, []byte("3"), 0) {
		t.Fatal("a fill begun before Clear was stored")
	}
	mustMiss(t, tr, "a", 0)
	mustMiss(t, tr, "b", 0)
	if s := tr.Stats(); s.Entries != 0 || s.Bytes != 0 || s.Invalidations != 2 {
		t.Fatalf("stats after Clear: %+v", s)
	}
	if !fill(tr, "c", 0, "3") {
		t.Fatal("a fill begun after Clear was refused")
	}
}

// TestServingOffBetween: SetServing(false) empties the tier and refuses
// fills; fills begun before or while it was off are refused after it is
// on again.
func TestServingOffBetween(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	if !tr.Serving() {
		t.Fatal("a new tier does not serve")
	}
	fill(tr, "a", 0, "1")
	before := tr.Begin([]byte("a"))
	tr.SetServing(false)
	if tr.Serving() {
		t.Fatal("still serving")
	}
	mustMiss(t, tr, "a", 0)
	if tr.Put(before, []byte("a"), 0, []byte("2"), 0) {
		t.Fatal("Put stored while not serving")
	}
	during := tr.Begin([]byte("a"))
	if tr.Put(during, []byte("a"), 0, []byte("2"), 0) {
		t.Fatal("Put stored while not serving")
	}
	tr.SetServing(true)
	if tr.Put(before, []byte("a"), 0, []byte("2"), 0) || tr.Put(during, []byte("a"), 0, []byte("2"), 0) {
		t.Fatal("a fill begun before serving resumed was stored")
	}
	if !fill(tr, "a", 0, "3") {
		t.Fatal("a fill begun after serving resumed was refused")
	}
	tok := tr.Begin([]byte("a"))
	tr.SetServing(true) // already on: nothing changes
	if !tr.Put(tok, []byte("a"), 0, []byte("4"), 0) {
		t.Fatal("SetServing(true) while serving refused a fill")
	}
	mustGet(t, tr, "a", 0, "4")
}

// TestExpiry: a reply lives min(TTLCap, ttl), expiring at exactly that
// moment.
func TestExpiry(t *testing.T) {
	c := newClock()
	tr := newTestTier(t, TierConfig{MaxBytes: 1 << 20, TTLCap: 10 * time.Second}, c)
	put := func(key string, ttl time.Duration) {
		t.Helper()
		if !tr.Put(tr.Begin([]byte(key)), []byte(key), 0, []byte(key), ttl) {
			t.Fatalf("Put(%s) refused", key)
		}
	}
	put("cap", 0)
	put("negative", -1)
	put("long", time.Hour)
	put("short", 3*time.Second)
	c.advance(3*time.Second - 1)
	mustGet(t, tr, "short", 0, "short")
	c.advance(1)
	mustMiss(t, tr, "short", 0)
	c.advance(7*time.Second - 1)
	for _, k := range []string{"cap", "negative", "long"} {
		mustGet(t, tr, k, 0, k)
	}
	c.advance(1)
	for _, k := range []string{"cap", "negative", "long"} {
		mustMiss(t, tr, k, 0)
	}
	if s := tr.Stats(); s.Evictions != 4 || s.Entries != 0 || s.Bytes != 0 {
		t.Fatalf("stats after expiry: %+v", s)
	}

	// A key with one expired variant keeps the other.
	tok := tr.Begin([]byte("k"))
	tr.Put(tok, []byte("k"), 2, []byte("two"), time.Second)
	tr.Put(tok, []byte("k"), 3, []byte("three"), 0)
	c.advance(time.Second)
	mustMiss(t, tr, "k", 2)
	mustGet(t, tr, "k", 3, "three")
	if s := tr.Stats(); s.Entries != 1 || s.Bytes != int64(1+entryOverhead+5+variantOverhead) {
		t.Fatalf("stats after one variant expired: %+v", s)
	}
}

// TestByteBudget: the least recently used key goes first, and the budget
// is never exceeded.
func TestByteBudget(t *testing.T) {
	const size = 1 + entryOverhead + 100 + variantOverhead // a key "a".."z", 100 bytes of reply
	tr := newTestTier(t, TierConfig{MaxBytes: 3 * size, TTLCap: time.Minute}, newClock())
	reply := strings.Repeat("x", 100)
	for _, k := range []string{"a", "b", "c"} {
		fill(tr, k, 0, reply)
	}
	if s := tr.Stats(); s.Bytes != 3*size || s.Entries != 3 || s.Evictions != 0 {
		t.Fatalf("stats at the budget: %+v", s)
	}
	mustGet(t, tr, "a", 0, reply) // b is now the least recently used
	fill(tr, "d", 0, reply)
	mustMiss(t, tr, "b", 0)
	for _, k := range []string{"a", "c", "d"} {
		mustGet(t, tr, k, 0, reply)
	}
	if s := tr.Stats(); s.Bytes != 3*size || s.Entries != 3 || s.Evictions != 1 {
		t.Fatalf("stats after one eviction: %+v", s)
	}
	// A bigger reply evicts as many keys as it needs.
	fill(tr, "e", 0, strings.Repeat("y", 100+size))
	if s := tr.Stats(); s.Bytes > 3*size || s.Entries != 2 || s.Evictions != 3 {
		t.Fatalf("stats after a double-size reply: %+v", s)
	}
	mustGet(t, tr, "d", 0, reply)
}

// TestTooBig: a reply bigger than the whole budget is not stored, and
// the older reply of that variant goes.
func TestTooBig(t *testing.T) {
	const max = 1000
	tr := newTestTier(t, TierConfig{MaxBytes: max, TTLCap: time.Minute}, newClock())
	fill(tr, "k", 0, "small")
	fill(tr, "k", 1, "other")
	big := strings.Repeat("x", max-1-entryOverhead-variantOverhead+1)
	if fill(tr, "k", 0, big) {
		t.Fatal("a reply over the budget was stored")
	}
	mustMiss(t, tr, "k", 0)
	mustGet(t, tr, "k", 1, "other")
	if fill(tr, "j", 0, big) {
		t.Fatal("a reply over the budget was stored")
	}
	if !fill(tr, "j", 0, big[1:]) {
		t.Fatal("a reply of exactly the budget was refused")
	}
	if s := tr.Stats(); s.Bytes != max || s.Entries != 1 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestVariants: variants are separate replies of one key.
func TestVariants(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	fill(tr, "k", 2, "$1\r\nv\r\n")
	mustMiss(t, tr, "k", 3)
	mustMiss(t, tr, "other", 2)
	fill(tr, "k", 3, "_\r\n")
	mustGet(t, tr, "k", 2, "$1\r\nv\r\n")
	mustGet(t, tr, "k", 3, "_\r\n")
	if s := tr.Stats(); s.Entries != 1 || s.Hits != 2 || s.Misses != 2 ||
		s.Bytes != int64(1+entryOverhead+7+variantOverhead+3+variantOverhead) {
		t.Fatalf("stats: %+v", s)
	}
}

// TestRepliesNeverChange: Put copies, and a new reply replaces the old
// slice rather than overwriting it.
func TestRepliesNeverChange(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	in := []byte("$3\r\none\r\n")
	tr.Put(tr.Begin([]byte("k")), []byte("k"), 0, in, 0)
	copy(in, "XXXXXXXXX")
	old, _ := tr.Get([]byte("k"), 0)
	fill(tr, "k", 0, "$3\r\ntwo\r\n")
	if string(old) != "$3\r\none\r\n" {
		t.Fatalf("a reply handed out changed to %q", old)
	}
	mustGet(t, tr, "k", 0, "$3\r\ntwo\r\n")
}

func TestTierValidate(t *testing.T) {
	if err := DefaultTierConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := TierConfig{MaxBytes: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "max_bytes") || !strings.Contains(err.Error(), "ttl_cap") {
		t.Fatalf("Validate() = %v", err)
	}
	if _, err := NewTier(TierConfig{}, time.Now, nil); err == nil {
		t.Fatal("NewTier accepted an invalid config")
	}
	if _, err := NewTier(DefaultTierConfig(), nil, nil); err == nil {
		t.Fatal("NewTier accepted a nil clock")
	}
}

// TestTierMetrics: the metrics follow Stats, two tiers on two registries
// do not clash, a second on the same registry is an error.
func TestTierMetrics(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	tr, err := NewTier(DefaultTierConfig(), c.now, reg)
	if err != nil {
		t.Fatal(err)
	}
	fill(tr, "a", 0, "1")
	fill(tr, "b", 0, "2")
	get(tr, "a", 0)
	get(tr, "c", 0)
	tr.Invalidate([]byte("b"))
	c.advance(time.Hour)
	get(tr, "a", 0) // expired: a miss and an eviction
	for name, want := range map[string]float64{
		"rproxy_hotkey_tier_hits_total":          1,
		"rproxy_hotkey_tier_misses_total":        2,
		"rproxy_hotkey_tier_invalidations_total": 1,
		"rproxy_hotkey_tier_evictions_total":     1,
		"rproxy_hotkey_tier_entries":             0,
		"rproxy_hotkey_tier_bytes":               0,
	} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if _, err := NewTier(DefaultTierConfig(), c.now, prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTier(DefaultTierConfig(), c.now, reg); err == nil {
		t.Fatal("two tiers registered on one registry")
	}
	// The detector's metrics live beside the tier's.
	if _, err := NewDetector(DefaultDetectorConfig(), c.now, reg); err != nil {
		t.Fatal(err)
	}
}

// TestTierConcurrent: readers, a filler and an invalidator race. "Redis"
// is a versioned value: the invalidator bumps the version (a write), then
// invalidates, then publishes the version as done. A reader that starts
// after version v was done must never get an older value.
func TestTierConcurrent(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	keys := [][]byte{[]byte("k0"), []byte("k1"), []byte("k2")}
	var redis [3]atomic.Uint64 // each key's current version
	var done [3]atomic.Uint64  // the last version whose invalidation completed
	const writes, readers = 150, 2
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var hits atomic.Int64

	wg.Add(1)
	go func() { // invalidator
		defer wg.Done()
		defer close(stop)
		for i := range writes {
			k := i % len(keys)
			v := redis[k].Add(1)
			if i%30 == 29 {
				tr.Clear()
			} else {
				tr.Invalidate(keys[k])
			}
			done[k].Store(v)
			if i%10 == 9 {
				// Let the filler and the readers through: wait for a
				// hit after this write, so the race is exercised.
				for h := hits.Load(); hits.Load() == h; {
					runtime.Gosched()
				}
			}
		}
	}()
	wg.Add(1)
	go func() { // filler
		defer wg.Done()
		var buf [8]byte
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := i % len(keys)
			tok := tr.Begin(keys[k])
			binary.BigEndian.PutUint64(buf[:], redis[k].Load()) // the read, after Begin
			tr.Put(tok, keys[k], uint8(i%2), buf[:], 0)
		}
	}()
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(keys)
				floor := done[k].Load()
				r, ok := tr.Get(keys[k], uint8(i%2))
				if !ok {
					continue
				}
				hits.Add(1)
				if v := binary.BigEndian.Uint64(r); v < floor {
					t.Errorf("%s: got version %d after the invalidation of version %d completed", keys[k], v, floor)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := tr.Stats(); s.Bytes < 0 || (s.Entries == 0) != (s.Bytes == 0) {
		t.Fatalf("inconsistent stats: %+v", s)
	}
}

func BenchmarkGetHit(b *testing.B) {
	c := newClock()
	tr := newTestTier(b, DefaultTierConfig(), c)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("user:session:" + strconv.Itoa(i))
		tr.Put(tr.Begin(keys[i]), keys[i], 2, bytes.Repeat([]byte("v"), 100), 0)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := tr.Get(keys[i&(len(keys)-1)], 2); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkGetMiss(b *testing.B) {
	c := newClock()
	tr := newTestTier(b, DefaultTierConfig(), c)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("user:session:" + strconv.Itoa(i))
		tr.Put(tr.Begin(keys[i]), keys[i], 2, []byte("v"), 0)
		keys[i] = []byte("user:absent:" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := tr.Get(keys[i&(len(keys)-1)], 2); ok {
			b.Fatal("hit")
		}
	}
}

// TestScanStaysInBudget: filling far more distinct keys than fit (a scan in
// "cache these" mode) keeps the tier's count within MaxBytes, and the Go
// heap it really holds within 1.5x of it (the per-entry overhead estimate
// is honest).
func TestScanStaysInBudget(t *testing.T) {
	n := 2_000_000
	if raceEnabled {
		n = 200_000
	}
	cfg := DefaultTierConfig()
	cfg.MaxBytes = 16 << 20
	tr := newTestTier(t, cfg, newClock())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	key := make([]byte, 0, 32)
	reply := []byte("$16\r\n0123456789abcdef\r\n")
	for i := range n {
		key = strconv.AppendInt(append(key[:0], "scan:"...), int64(i), 10)
		tr.Put(tr.Begin(key), key, 2, reply, 0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := tr.Stats()
	if st.Bytes > cfg.MaxBytes || st.Evictions == 0 {
		t.Fatalf("tier counts %d bytes (budget %d), %d evictions", st.Bytes, cfg.MaxBytes, st.Evictions)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys filled: %d entries kept, %d bytes counted, heap grew %d bytes (budget %d)", n, st.Entries, st.Bytes, grown, cfg.MaxBytes)
	if grown > cfg.MaxBytes*3/2 {
		t.Fatalf("the heap grew by %d bytes for a %d-byte tier", grown, cfg.MaxBytes)
	}
	runtime.KeepAlive(tr)
}

// TestTierSetConfig: a lower budget evicts down to it at once, least
// recently used first; a lower TTL cap shortens what is held to at most
// the new cap from the change; a higher cap applies to new replies only;
// an invalid config changes nothing.
func TestTierSetConfig(t *testing.T) {
	const size = 1 + entryOverhead + 100 + variantOverhead
	c := newClock()
	tr := newTestTier(t, TierConfig{MaxBytes: 4 * size, TTLCap: time.Minute}, c)
	reply := strings.Repeat("x", 100)
	for _, k := range []string{"a", "b", "c", "d"} {
		fill(tr, k, 0, reply)
	}
	mustGet(t, tr, "a", 0, reply) // b is the least recently used
	if err := tr.SetConfig(TierConfig{MaxBytes: 2 * size, TTLCap: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.Bytes != 2*size || s.Entries != 2 || s.Evictions != 2 {
		t.Fatalf("stats after halving the budget: %+v", s)
	}
	mustMiss(t, tr, "b", 0)
	mustMiss(t, tr, "c", 0)
	mustGet(t, tr, "a", 0, reply)
	mustGet(t, tr, "d", 0, reply)

	// Cap 1m -> 5s: "a" (stored with a 1m life) expires 5s from now.
	c.advance(10 * time.Second)
	if err := tr.SetConfig(TierConfig{MaxBytes: 3 * size, TTLCap: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	tr.Put(tr.Begin([]byte("e")), []byte("e"), 0, []byte(reply), 0) // 5s life
	c.advance(5*time.Second - 1)
	mustGet(t, tr, "a", 0, reply)
	mustGet(t, tr, "e", 0, reply)
	c.advance(1)
	mustMiss(t, tr, "a", 0)
	mustMiss(t, tr, "e", 0)
	// Raised again: new replies live longer.
	if err := tr.SetConfig(TierConfig{MaxBytes: 3 * size, TTLCap: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fill(tr, "f", 0, reply)
	c.advance(30 * time.Minute)
	mustGet(t, tr, "f", 0, reply)

	if err := tr.SetConfig(TierConfig{MaxBytes: 0, TTLCap: time.Second}); err == nil {
		t.Fatal("zero budget accepted")
	}
	if got := tr.Config(); got != (TierConfig{MaxBytes: 3 * size, TTLCap: time.Hour}) {
		t.Fatalf("a refused config changed the tier: %+v", got)
	}
}
