package hotkey

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"
)

// TierConfig configures a Tier. Start from DefaultTierConfig: zero fields
// are errors, not defaults.
type TierConfig struct {
	// MaxBytes is the budget: every entry costs its key, its replies and
	// the overhead estimates entryOverhead and variantOverhead.
	MaxBytes int64
	// TTLCap is the longest a reply is served: a safety net for
	// invalidations that never arrive.
	TTLCap time.Duration
}

// DefaultTierConfig returns a 64 MiB tier whose replies live at most 10s.
func DefaultTierConfig() TierConfig {
	return TierConfig{MaxBytes: 64 << 20, TTLCap: 10 * time.Second}
}

// Validate reports every problem in c, joined, one per line.
func (c TierConfig) Validate() error {
	var errs []error
	if c.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("hotkey: tier: max_bytes must be positive, got %d", c.MaxBytes))
	}
	if c.TTLCap <= 0 {
		errs = append(errs, fmt.Errorf("hotkey: tier: ttl_cap must be positive, got %v", c.TTLCap))
	}
	return errors.Join(errs...)
}

// Overhead estimates on amd64, counted against MaxBytes besides key and
// reply bytes, so that many small entries cannot exceed the budget
// unseen.
const (
	// entryOverhead: the entry (key header, size, variants header: 48),
	// the LRU's list element (links, key, value: 64), its map slot with
	// load factor (32) and the key's allocation rounding (16).
	entryOverhead = 160
	// variantOverhead: a variant (reply header, expiry, id: 56) and the
	// reply's allocation rounding (8).
	variantOverhead = 64
)

// slotCount is the number of invalidation generations kept; a key's slot
// is its hash modulo slotCount. Two keys sharing a slot only cost each
// other fills.
const slotCount = 4096

// Tier is a local cache of reply bytes, by key and variant, bounded in
// bytes, evicting the least recently used key. It is safe for concurrent
// use.
type Tier struct {
	now func() time.Time
	// maxB and ttlCap (nanoseconds) change with SetConfig and are read by
	// Put before it takes the lock.
	maxB    atomic.Int64
	ttlCap  atomic.Int64
	mu      sync.Mutex
	lru     *simplelru.LRU[string, *entry]
	bytes   int64
	serving bool
	// Fill generations: gen counts invalidations and clears; slots[s] is
	// the gen of the last invalidation of a key in slot s, cleared the gen
	// of the last Clear (or serving change). A fill begun at gen g may
	// store only if neither moved past g.
	gen     uint64
	cleared uint64
	slots   [slotCount]uint64

	hits, misses             atomic.Uint64 // counted outside the lock
	invalidations, evictions uint64
	// removing is the counter the LRU's eviction callback charges: set by
	// each caller that removes, since the callback cannot tell why.
	removing *uint64
}

// entry is one key's replies. Its fields change only under Tier.mu; a
// reply's bytes never change once stored (replaced, never mutated), so a
// reply handed out by Get stays valid.
type entry struct {
	key      string
	size     int64 // bytes charged: key, replies and overheads
	variants []stored
}

// stored is one variant's reply.
type stored struct {
	id      string
	expires time.Time
	reply   []byte
}

// maxVariants bounds the replies kept per key (a key read with many
// different ranges): beyond it, storing a new variant drops the oldest.
const maxVariants = 16

// idCost is what a variant's id is charged: its bytes, or nothing for the
// one-byte ids of Get and Put, which are shared (byteIDs).
func idCost(id string) int64 {
	if len(id) <= 1 {
		return 0
	}
	return int64(len(id))
}

// byteIDs are the one-byte variant ids of Get and Put, so they cost no
// allocation.
var byteIDs = func() (ids [256]string) {
	for i := range ids {
		ids[i] = string([]byte{byte(i)})
	}
	return ids
}()

// Token is a fill's ticket, taken by Begin before the value is read.
type Token struct {
	t   *Tier
	gen uint64
}

// TierStats are a Tier's figures. Entries, Invalidations and Evictions
// count keys (with all their variants).
type TierStats struct {
	Entries int   // keys held
	Bytes   int64 // bytes charged against MaxBytes
	Hits    uint64
	Misses  uint64
	// Invalidations: keys removed by Invalidate, Clear or SetServing(false).
	Invalidations uint64
	// Evictions: keys removed for the byte budget, or because their last
	// reply expired.
	Evictions uint64
}

// NewTier returns an empty, serving tier reading time from now, with its
// metrics on reg (nil: unregistered).
func NewTier(cfg TierConfig, now func() time.Time, reg prometheus.Registerer) (*Tier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		return nil, errors.New("hotkey: tier: now is nil")
	}
	t := &Tier{now: now, serving: true}
	t.maxB.Store(cfg.MaxBytes)
	t.ttlCap.Store(int64(cfg.TTLCap))
	t.removing = &t.evictions
	// The LRU counts entries only: no limit there, the byte budget is
	// enforced here, and the callback keeps the byte count right whatever
	// removes an entry.
	lru, err := simplelru.NewLRU(math.MaxInt, func(_ string, e *entry) {
		t.bytes -= e.size
		*t.removing++
	})
	if err != nil {
		return nil, fmt.Errorf("hotkey: tier: %w", err)
	}
	t.lru = lru
	if reg != nil {
		if err := registerAll(reg, t.collectors()...); err != nil {
			return nil, fmt.Errorf("hotkey: tier: registering metrics: %w", err)
		}
	}
	return t, nil
}

// view returns key's bytes as a string without copying, for lookups only:
// the LRU's map uses it to hash and compare and keeps the key it stored
// at insertion, never this one, and the caller does not change key during
// the call. It saves an allocation per Get.
func view(key []byte) string {
	return unsafe.String(unsafe.SliceData(key), len(key))
}

// Get is GetVariant with a one-byte variant id.
func (t *Tier) Get(key []byte, variant uint8) ([]byte, bool) {
	return t.get(key, byteIDs[variant], nil)
}

// GetVariant returns the reply stored for (key, variant) if the tier is
// serving and the reply has not expired. A variant names one reply of the
// key (say, a protocol and a command's bytes); it is compared in full.
// The reply must not be modified.
func (t *Tier) GetVariant(key, variant []byte) ([]byte, bool) {
	return t.get(key, "", variant)
}

// get looks variant up by id, or by vb when id is empty.
//
// The clock is read only for a reply found, after the lock is released:
// a miss costs no clock read, and a hit holds the lock for the lookup
// only. The reply was current when the lock was held, so an invalidation
// completing meanwhile is one that completed after this Get started.
func (t *Tier) get(key []byte, id string, vb []byte) ([]byte, bool) {
	t.mu.Lock()
	if !t.serving {
		t.mu.Unlock()
		t.misses.Add(1)
		return nil, false
	}
	e, ok := t.lru.Get(view(key))
	if !ok {
		t.mu.Unlock()
		t.misses.Add(1)
		return nil, false
	}
	i := -1
	if id != "" {
		i = e.find(id)
	} else {
		i = e.findBytes(vb)
	}
	if i < 0 {
		t.mu.Unlock()
		t.misses.Add(1)
		return nil, false
	}
	v := e.variants[i]
	t.mu.Unlock()
	if t.now().Before(v.expires) {
		t.hits.Add(1)
		return v.reply, true
	}
	t.expire(key, v)
	t.misses.Add(1)
	return nil, false
}

// expire drops the expired reply v of key, unless it was replaced or
// dropped since it was read.
func (t *Tier) expire(key []byte, v stored) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.lru.Peek(view(key))
	if !ok {
		return
	}
	if i := e.find(v.id); i >= 0 && e.variants[i].expires.Equal(v.expires) &&
		unsafe.SliceData(e.variants[i].reply) == unsafe.SliceData(v.reply) {
		t.dropVariantLocked(e, i)
	}
}

// Begin starts a fill of key: call it before the value is read (before the
// command leaves for Redis), and pass the token to Put. The token records
// only the generation, so it is checked against the key given to Put.
func (t *Tier) Begin(key []byte) Token {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Token{t: t, gen: t.gen}
}

// Put is PutVariant with a one-byte variant id.
func (t *Tier) Put(tok Token, key []byte, variant uint8, reply []byte, ttl time.Duration) bool {
	return t.put(tok, key, byteIDs[variant], reply, ttl)
}

// PutVariant is Put for a variant named by bytes (see GetVariant). A key
// keeps at most 16 variants: a new one beyond that drops the oldest.
func (t *Tier) PutVariant(tok Token, key, variant, reply []byte, ttl time.Duration) bool {
	if len(variant) == 0 {
		return false
	}
	return t.put(tok, key, string(variant), reply, ttl)
}

// put stores a copy of reply for (key, variant), served for
// min(TTLCap, ttl) (ttl <= 0: TTLCap), unless since tok was taken key
// was invalidated (or another key in its slot), the tier was cleared, or
// serving stopped or resumed. It reports whether the reply was stored. A
// reply too big for the whole budget is not stored, and the variant's
// older reply, if any, is dropped.
func (t *Tier) put(tok Token, key []byte, variant string, reply []byte, ttl time.Duration) bool {
	if tok.t != t {
		return false // zero or another tier's token
	}
	life := time.Duration(t.ttlCap.Load())
	if ttl > 0 && ttl < life {
		life = ttl
	}
	slot := xxhash.Sum64(key) % slotCount
	now := t.now()
	maxB := t.maxB.Load()
	size := int64(len(reply)) + idCost(variant) + variantOverhead // one variant's charge
	tooBig := int64(len(key))+entryOverhead+size > maxB
	var nv stored
	if !tooBig { // copied before the lock, to hold it shorter
		nv = stored{id: variant, expires: now.Add(life), reply: make([]byte, len(reply))}
		copy(nv.reply, reply)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.serving || t.cleared > tok.gen || t.slots[slot] > tok.gen {
		return false
	}
	e, ok := t.lru.Get(view(key))
	if tooBig {
		if ok {
			if i := e.find(variant); i >= 0 {
				t.dropVariantLocked(e, i)
			}
		}
		return false
	}
	if !ok {
		e = &entry{key: string(key), size: int64(len(key)) + entryOverhead}
		t.lru.Add(e.key, e)
		t.bytes += e.size
	}
	// Expired replies of this key go first, to make room.
	for i := len(e.variants) - 1; i >= 0; i-- {
		if v := &e.variants[i]; v.id != variant && !now.Before(v.expires) {
			t.removeVariant(e, i)
		}
	}
	if i := e.find(variant); i >= 0 {
		t.resize(e, int64(len(reply)-len(e.variants[i].reply)))
		e.variants[i] = nv
	} else {
		if len(e.variants) >= maxVariants {
			t.removeOldestVariant(e)
		}
		e.variants = append(e.variants, nv)
		t.resize(e, size)
	}
	if e.size > maxB {
		// This reply fits the budget but not with the key's other
		// variants: keep only this one.
		i := e.find(variant)
		e.variants[0], e.variants[i] = e.variants[i], e.variants[0]
		for len(e.variants) > 1 {
			t.removeVariant(e, len(e.variants)-1)
		}
	}
	t.evictLocked(now, e)
	return true
}

// evictLocked removes least recently used keys while over budget (never
// keep, just stored and within the budget alone), and the oldest key if
// all its replies have expired, so dead entries do not wait for the
// budget.
func (t *Tier) evictLocked(now time.Time, keep *entry) {
	t.removing = &t.evictions
	for maxB := t.maxB.Load(); t.bytes > maxB; {
		if _, e, ok := t.lru.GetOldest(); !ok || e == keep {
			break
		}
		t.lru.RemoveOldest()
	}
	if _, e, ok := t.lru.GetOldest(); ok && e != keep && e.expired(now) {
		t.lru.RemoveOldest()
	}
}

// SetConfig changes the budget and the TTL cap while the tier runs; an
// invalid cfg changes nothing. A lower budget evicts least recently used
// keys down to it at once; a lower cap shortens the replies held to at
// most the new cap from now, so no reply is served longer than it from
// the change on. Replies stored from now on use the new values.
func (t *Tier) SetConfig(cfg TierConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxB.Store(cfg.MaxBytes)
	if old := time.Duration(t.ttlCap.Swap(int64(cfg.TTLCap))); cfg.TTLCap < old {
		limit := now.Add(cfg.TTLCap)
		for _, e := range t.lru.Values() {
			for i := range e.variants {
				if v := &e.variants[i]; v.expires.After(limit) {
					v.expires = limit
				}
			}
		}
	}
	t.evictLocked(now, nil)
	return nil
}

// Config returns the tier's current settings.
func (t *Tier) Config() TierConfig {
	return TierConfig{MaxBytes: t.maxB.Load(), TTLCap: time.Duration(t.ttlCap.Load())}
}

// Invalidate drops every variant of key; fills of key begun before fail.
func (t *Tier) Invalidate(key []byte) { t.InvalidateHash(key, xxhash.Sum64(key)) }

// InvalidateHash is Invalidate for a caller that has hashed key
// (xxhash.Sum64) already.
func (t *Tier) InvalidateHash(key []byte, hash uint64) {
	slot := hash % slotCount
	t.mu.Lock()
	t.gen++
	t.slots[slot] = t.gen
	t.removing = &t.invalidations
	t.lru.Remove(view(key))
	t.mu.Unlock()
}

// Clear drops every key; fills begun before fail.
func (t *Tier) Clear() {
	t.mu.Lock()
	t.clearLocked()
	t.mu.Unlock()
}

func (t *Tier) clearLocked() {
	t.gen++
	t.cleared = t.gen
	t.removing = &t.invalidations
	t.lru.Purge()
}

// SetServing turns serving on or off. Off clears the tier, and Get misses
// and Put refuses until it is on again. Turning it on also fails the fills
// begun while it was off: their values were read while invalidations may
// have been lost.
func (t *Tier) SetServing(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !on {
		t.serving = false
		t.clearLocked()
		return
	}
	if !t.serving {
		t.serving = true
		t.gen++
		t.cleared = t.gen
	}
}

// Serving reports whether the tier serves.
func (t *Tier) Serving() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.serving
}

// Stats returns the tier's figures.
func (t *Tier) Stats() TierStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TierStats{
		Entries:       t.lru.Len(),
		Bytes:         t.bytes,
		Hits:          t.hits.Load(),
		Misses:        t.misses.Load(),
		Invalidations: t.invalidations,
		Evictions:     t.evictions,
	}
}

func (e *entry) find(id string) int {
	for i := range e.variants {
		if e.variants[i].id == id {
			return i
		}
	}
	return -1
}

func (e *entry) findBytes(id []byte) int {
	for i := range e.variants {
		if e.variants[i].id == string(id) { // compared without a copy
			return i
		}
	}
	return -1
}

func (e *entry) expired(now time.Time) bool {
	for i := range e.variants {
		if now.Before(e.variants[i].expires) {
			return false
		}
	}
	return true
}

// resize charges delta more bytes to e.
func (t *Tier) resize(e *entry, delta int64) {
	e.size += delta
	t.bytes += delta
}

// removeVariant removes e's variant i, keeping the entry. The order of
// the others may change.
func (t *Tier) removeVariant(e *entry, i int) {
	t.resize(e, -int64(len(e.variants[i].reply))-idCost(e.variants[i].id)-variantOverhead)
	last := len(e.variants) - 1
	e.variants[i] = e.variants[last]
	e.variants[last] = stored{} // release the reply
	e.variants = e.variants[:last]
}

// removeOldestVariant removes the variant that expires first (replies of
// one key are stored for about the same life: the first stored).
func (t *Tier) removeOldestVariant(e *entry) {
	oldest := 0
	for i := range e.variants {
		if e.variants[i].expires.Before(e.variants[oldest].expires) {
			oldest = i
		}
	}
	t.removeVariant(e, oldest)
}

// dropVariantLocked removes an expired or superseded variant, and the key
// with it when it was the last (an eviction).
func (t *Tier) dropVariantLocked(e *entry, i int) {
	t.removeVariant(e, i)
	if len(e.variants) == 0 {
		t.removing = &t.evictions
		t.lru.Remove(e.key)
	}
}

func (t *Tier) collectors() []prometheus.Collector {
	counter := func(name, help string, f func(TierStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: name, Help: help}, func() float64 { return float64(f(t.Stats())) })
	}
	gauge := func(name, help string, f func(TierStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: name, Help: help}, func() float64 { return f(t.Stats()) })
	}
	return []prometheus.Collector{
		counter("tier_hits_total", "Reads served from the local tier.",
			func(s TierStats) uint64 { return s.Hits }),
		counter("tier_misses_total", "Reads the local tier could not serve.",
			func(s TierStats) uint64 { return s.Misses }),
		counter("tier_invalidations_total", "Keys dropped from the local tier by invalidation or clearing.",
			func(s TierStats) uint64 { return s.Invalidations }),
		counter("tier_evictions_total", "Keys dropped from the local tier for its byte budget or expiry.",
			func(s TierStats) uint64 { return s.Evictions }),
		gauge("tier_entries", "Keys held in the local tier.",
			func(s TierStats) float64 { return float64(s.Entries) }),
		gauge("tier_bytes", "Bytes charged against the local tier's budget (keys, replies, overheads).",
			func(s TierStats) float64 { return float64(s.Bytes) }),
	}
}

// registerAll registers cs on reg, all or none.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// Current reports whether a fill of key begun with tok could still store:
// neither key (nor another key in its slot) was invalidated, nor the tier
// cleared, since tok was taken.
func (t *Tier) Current(tok Token, key []byte) bool {
	if tok.t != t {
		return false
	}
	slot := xxhash.Sum64(key) % slotCount
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.serving && t.cleared <= tok.gen && t.slots[slot] <= tok.gen
}
