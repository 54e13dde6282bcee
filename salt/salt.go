package salt

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// Config configures salted fan-out of hot keys on a cluster upstream:
// a hot key's GETs are spread over copies of it kept on other masters.
type Config struct {
	// Copies is how many masters serve a salted key's reads, the key's own
	// master (the origin) included; at most the cluster's masters. >= 2.
	Copies int
	// TTL bounds how long a copy lives (it also never outlives the origin's
	// own expiry), so nothing is left once the key cools.
	TTL time.Duration
	// Prefixes: keys under them are salted whether or not they are hot.
	Prefixes []string
	// IntN picks a copy for each read; nil means math/rand/v2.IntN.
	IntN func(n int) int
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.Copies < 2 || c.Copies > 16 {
		errs = append(errs, fmt.Errorf("salt: salted copies must be between 2 and 16, got %d", c.Copies))
	}
	if c.TTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("salt: salted copies' TTL must be at least 1ms, got %v", c.TTL))
	}
	return errors.Join(errs...)
}

// maxSaltedKeys bounds the keys with copies at once; more are read from
// their origin only.
const maxSaltedKeys = 4096

// saltMarker separates a key from its copy number in a copy's name. It
// holds no brace, so it never makes or breaks a hash tag.
const saltMarker = "#rproxy-copy-"

// IsCopyName reports whether key is the name of a salted copy, which no
// client wrote (SCAN through rproxy leaves them out).
func IsCopyName(key []byte) bool { return bytes.Contains(key, []byte(saltMarker)) }

// Engine keeps, for each salted key, the names of its copies: one per
// master other than the origin's, chosen from the live slot map.
//
// Coherence with writes through this rproxy: a write to a salted key
// raises the key's writing count and generation before it is sent and,
// once Redis acknowledged it, deletes every copy (and raises the
// generation again) before the client sees the reply. A fill (a read that
// missed a copy and read the origin) is made only if no write was under
// way when it read the origin and none has begun since; that last check
// and the fill's send are one step under the key's mutex, and copy
// updates go on one connection per copy (Router.SendOrdered), so a write
// that begins later deletes the copy after the fill lands. After a write
// is acknowledged, no copy holds an older value. A copy update that fails
// sends the key's reads to its origin until its copies have expired.
type Engine struct {
	cfg      Config
	cluster  *upstream.Cluster
	ordered  *upstream.Router // copy updates: one connection per copy, in order
	prefixes [][]byte
	now      func() time.Time
	log      *zap.Logger
	metrics  *saltMetrics

	mu   sync.RWMutex // every salted GET reads keys; a new key writes it
	keys map[string]*Key

	// pending counts, by a hash of the key, writes under way to keys that
	// had no salted state when they began: a key given state meanwhile (a
	// read made it salted) fills no copy while its bucket counts one, since
	// its origin may still change under the read (BeginWrite, FillGen).
	pending [pendingBuckets]atomic.Int32
	seed    maphash.Seed
	// flushing counts flushes (FLUSHALL, FLUSHDB) under way through
	// rproxy, and epoch is raised when each begins and ends: a fill is made
	// only if no flush was under way, begun or ended since it read the
	// origin (Gen).
	flushing atomic.Int32
	epoch    atomic.Int64

	settling sync.WaitGroup // background waits: Settle's and copyDeletes.waitInBackground's (Close waits for them)
}

// Key is one salted key's copies and coherence counters.
type Key struct {
	key   []byte
	names atomic.Pointer[saltNames]
	// mu orders a fill's last check and send against a write's start.
	mu      sync.Mutex
	gen     atomic.Int64
	writing atomic.Int64
	used    atomic.Int64 // unix ms of the last salted read
	// bypassUntil (unix ms): after a failed copy update, reads go to the
	// origin until any copy left behind has expired.
	bypassUntil atomic.Int64
	// filling has bit i set while a fill of copy i is unacknowledged: a
	// read that misses the copy meanwhile sends none, so fills held by
	// Redis (a CLIENT PAUSE, a failover's) do not pile up.
	filling atomic.Uint32
	// pending is the engine's count of writes under way, begun without
	// salted state, to keys of this key's bucket.
	pending *atomic.Int32
}

// pendingBuckets is how many buckets Engine.pending counts writes in: a
// write in flight holds the fills of keys newly salted in its bucket only.
const pendingBuckets = 1024

// saltNames are a key's copies for one version of the slot map: [0] is
// the origin.
type saltNames struct {
	version uint64
	names   [][]byte
	slots   []int
	gets    [][]byte // GET <name>, encoded
	// retired are the previous map's copies that this one no longer
	// names: no read uses them, but they may live until their TTL, and a
	// later map could name them again, so writes delete them too.
	retiredNames [][]byte
	retiredSlots []int
}

// deletable calls f with every copy a write must delete.
func (n *saltNames) deletable(f func(name []byte, slot int)) {
	for i := 1; i < len(n.names); i++ {
		f(n.names[i], n.slots[i])
	}
	for i, name := range n.retiredNames {
		f(name, n.retiredSlots[i])
	}
}

type saltMetrics struct {
	reads   *prometheus.CounterVec
	missing prometheus.Counter
	fills   prometheus.Counter
	deletes prometheus.Counter
	keys    prometheus.GaugeFunc
}

func New(cfg Config, c *upstream.Cluster, now func() time.Time, reg prometheus.Registerer, log *zap.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.IntN == nil {
		cfg.IntN = rand.IntN
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Engine{cfg: cfg, cluster: c, now: now, log: log, keys: make(map[string]*Key), seed: maphash.MakeSeed()}
	if c != nil { // nil only in tests of the key table
		s.ordered = c.Router(2)
	}
	for _, p := range cfg.Prefixes {
		s.prefixes = append(s.prefixes, []byte(p))
	}
	const ns, sub = "rproxy", "hotkey"
	s.metrics = &saltMetrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "salt_reads_total",
			Help: "GETs of salted keys by where they were served: copy_hit, copy_miss (then the origin, filling the copy), copy_joined (a coalesced copy read) or origin."}, []string{"outcome"}),
		missing: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "salt_missing_keys_total",
			Help: "Salted keys found missing at their origin: read from the origin for hotkeys.salt.ttl (or until written through rproxy)."}),
		fills: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "salt_copy_fills_total",
			Help: "Salted copies written after a read missed them."}),
		deletes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "salt_copy_deletes_total",
			Help: "Salted copies deleted because their key was written through rproxy (or a fill raced a write)."}),
	}
	s.metrics.keys = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "salt_keys",
		Help: "Keys with salted copies being served or still alive."}, func() float64 {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return float64(len(s.keys))
	})
	for _, o := range []string{"copy_hit", "copy_miss", "copy_joined", "origin"} {
		s.metrics.reads.WithLabelValues(o)
	}
	if reg != nil {
		for _, m := range []prometheus.Collector{s.metrics.reads, s.metrics.missing, s.metrics.fills, s.metrics.deletes, s.metrics.keys} {
			if err := reg.Register(m); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Listed reports whether key is salted by configuration.
func (s *Engine) Listed(key []byte) bool {
	for _, p := range s.prefixes {
		if bytes.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// get returns key's salted state, creating it; nil when the table is full.
func (s *Engine) get(key []byte) *Key {
	s.mu.RLock()
	sk := s.keys[string(key)]
	s.mu.RUnlock()
	if sk == nil {
		sk = s.add(key)
		if sk == nil {
			return nil
		}
	}
	// The last use only matters to a second (sweepLocked allows for it): a
	// hot key's readers do not all write it.
	if now := s.now().UnixMilli(); now-sk.used.Load() >= 1000 {
		sk.used.Store(now)
	}
	return sk
}

// add makes key's salted state; nil when the table is full.
func (s *Engine) add(key []byte) *Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	sk := s.keys[string(key)]
	if sk == nil {
		if len(s.keys) >= maxSaltedKeys {
			s.sweepLocked()
		}
		if len(s.keys) >= maxSaltedKeys {
			return nil
		}
		sk = &Key{key: append([]byte(nil), key...), pending: &s.pending[s.bucket(key)]}
		sk.used.Store(s.now().UnixMilli())
		s.keys[string(sk.key)] = sk
	}
	return sk
}

// Lookup returns key's salted state if it has one.
func (s *Engine) Lookup(key []byte) *Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.keys) == 0 {
		return nil
	}
	return s.keys[string(key)]
}

// sweepLocked forgets keys not read through a copy for longer than a
// copy lives (plus the second by which get may leave the last use
// behind): none of their copies can be left.
func (s *Engine) sweepLocked() {
	cutoff := s.now().Add(-2*s.cfg.TTL - time.Second).UnixMilli()
	for k, sk := range s.keys {
		if sk.used.Load() < cutoff && sk.writing.Load() == 0 {
			delete(s.keys, k)
		}
	}
}

// current returns the key's copies for the live slot map, choosing them
// again when the map has changed since.
func (s *Engine) current(sk *Key) *saltNames {
	v := s.cluster.MapVersion()
	old := sk.names.Load()
	if old != nil && old.version == v {
		return old
	}
	n := &saltNames{version: v}
	origin := upstream.Slot(sk.key)
	n.add(sk.key, origin)
	used := map[int]bool{s.cluster.Owner(origin): true}
	want := min(s.cfg.Copies, s.cluster.Masters())
	// Copy numbers in order, keeping the first that lands on each master
	// not yet used: deterministic for a slot map, so every rproxy with the
	// same map names the same copies.
	for i := 1; i < 64*want && len(n.names) < want; i++ {
		name := saltedName(sk.key, i)
		slot := upstream.Slot(name)
		owner := s.cluster.Owner(slot)
		if owner < 0 || used[owner] {
			continue
		}
		used[owner] = true
		n.add(name, slot)
	}
	if old != nil {
		for i := 1; i < len(old.names); i++ {
			if !slices.ContainsFunc(n.names, func(x []byte) bool { return bytes.Equal(x, old.names[i]) }) {
				n.retiredNames = append(n.retiredNames, old.names[i])
				n.retiredSlots = append(n.retiredSlots, old.slots[i])
			}
		}
	}
	sk.names.Store(n)
	return n
}

func (n *saltNames) add(name []byte, slot int) {
	n.names = append(n.names, name)
	n.slots = append(n.slots, slot)
	n.gets = append(n.gets, resp.AppendCommand(nil, []byte("GET"), name))
}

// saltedName is copy i of key: the marker and number go at the end of the
// key's hash tag when it has one (so the copy hashes by the salted tag),
// else at the end of the key.
func saltedName(key []byte, i int) []byte {
	salt := saltMarker + strconv.Itoa(i)
	at := len(key)
	if _, end, ok := upstream.HashTag(key); ok {
		at = end
	}
	out := make([]byte, 0, len(key)+len(salt))
	out = append(out, key[:at]...)
	out = append(out, salt...)
	return append(out, key[at:]...)
}

// checkReply reports whether a copy update succeeded, and handles a
// failed one: the key is read from its origin
// only until any copy it may have left has expired.
func (s *Engine) checkReply(sk *Key, b *upstream.Batch, what string) bool {
	r := b.Reply(0)
	if len(r) == 0 || (r[0] != '-' && r[0] != '!') {
		return true
	}
	sk.bypassUntil.Store(s.now().Add(s.cfg.TTL).UnixMilli())
	s.log.Warn("salted fan-out: "+what+" failed; the key is read from its origin until its copies expire",
		zap.ByteString("reply", bytes.TrimSpace(r)), zap.Duration("for_seconds", s.cfg.TTL))
	return false
}

// copyDeletes are DELs of salted copies sent on the ordered connections,
// each with the key it deletes for.
type copyDeletes struct {
	sent   []*upstream.Batch
	owners []*Key
}

// add sends a DEL of each of sk's copies, behind any fill of it sent
// before on the same connections.
func (d *copyDeletes) add(s *Engine, sk *Key) {
	s.current(sk).deletable(func(name []byte, slot int) {
		b := upstream.NewBatch()
		b.AddSlot(resp.AppendCommand(nil, []byte("DEL"), name), slot)
		s.ordered.SendOrdered(b)
		d.sent, d.owners = append(d.sent, b), append(d.owners, sk)
	})
}

// wait waits for the DELs' replies, counts them, and returns the keys
// whose deletion failed (nil: none), which checkReply sends to their
// origin until the copies expire.
func (d *copyDeletes) wait(s *Engine, what string) map[*Key]bool {
	var failed map[*Key]bool
	for i, b := range d.sent {
		b.Wait()
		if !s.checkReply(d.owners[i], b, what) {
			if failed == nil {
				failed = map[*Key]bool{}
			}
			failed[d.owners[i]] = true
		}
	}
	s.metrics.deletes.Add(float64(len(d.sent)))
	return failed
}

// waitInBackground waits for the DELs off the caller's goroutine (a
// tracking connection's reader); Close waits for it.
func (d *copyDeletes) waitInBackground(s *Engine, what string) {
	if len(d.sent) == 0 {
		return
	}
	s.settling.Add(1)
	go func() {
		defer s.settling.Done()
		d.wait(s, what)
	}()
}

// Read is a GET of one of a salted key's copies.
type Read struct {
	key   *Key
	names *saltNames
	copy  int
}

// Slot is the copy's hash slot.
func (r Read) Slot() int { return r.names.slots[r.copy] }

// Cmd is GET of the copy, encoded.
func (r Read) Cmd() []byte { return r.names.gets[r.copy] }

// Origin is the salted key itself.
func (r Read) Origin() []byte { return r.key.key }

// ReadOrigin adds to b the origin's GET and PTTL, read when the copy
// missed (Fill takes their replies).
func (r Read) ReadOrigin(b *upstream.Batch) {
	b.AddSlot(resp.AppendCommand(nil, []byte("GET"), r.key.key), r.names.slots[0])
	b.AddSlot(resp.AppendCommand(nil, []byte("PTTL"), r.key.key), r.names.slots[0])
}

// Gen is what a read of the origin for a fill saw (FillGen): the fill is
// made only if it is still current when the read is answered.
type Gen struct {
	key   int64 // the key's generation; negative: no fill
	epoch int64 // the engine's flush epoch
}

// NoFill is the Gen of a read that fills no copy.
var NoFill = Gen{key: -1}

// FillGen returns the Gen of a fill that reads r's origin now, or NoFill
// when a write is under way: one begun on the key, one begun before the
// key was salted in its bucket, or a flush.
func (s *Engine) FillGen(r Read) Gen {
	sk := r.key
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.writing.Load() > 0 || sk.pending.Load() > 0 || s.flushing.Load() > 0 {
		return NoFill
	}
	return Gen{key: sk.gen.Load(), epoch: s.epoch.Load()}
}

// Pick chooses where a salted GET of key reads: one of its copies, at
// random (ok), or its origin (false: read it as usual), which it is also
// while a failed copy update's copies may live, or when the table is full.
func (s *Engine) Pick(key []byte) (r Read, ok bool) {
	sk := s.get(key)
	if sk == nil || s.now().UnixMilli() < sk.bypassUntil.Load() {
		return Read{}, false
	}
	n := s.current(sk)
	i := s.cfg.IntN(len(n.names))
	if i == 0 {
		s.metrics.reads.WithLabelValues("origin").Inc()
		return Read{}, false
	}
	return Read{key: sk, names: n, copy: i}, true
}

// Joined counts a copy read that joined one in flight (coalesced): its
// leader handles a miss.
func (s *Engine) Joined() { s.metrics.reads.WithLabelValues("copy_joined").Inc() }

// CountReads counts copy reads answered by the copy (hits) and that
// missed it (misses, then read from the origin).
func (s *Engine) CountReads(hits, misses int) {
	s.metrics.reads.WithLabelValues("copy_hit").Add(float64(hits))
	if misses > 0 {
		s.metrics.reads.WithLabelValues("copy_miss").Add(float64(misses))
	}
}

// Write is a write begun by BeginWrite or BeginFlush (or held by Hold),
// for EndWrites.
type Write struct {
	key    *Key        // the key's salted state; nil: it had none
	bucket int32       // else the pending bucket counting it
	flush  *flushWrite // or a flush
}

// flushWrite is a flush under way: the keys that had fills unacknowledged
// when it began.
type flushWrite struct{ filling []*Key }

// BeginFlush marks a FLUSHALL or FLUSHDB as under way, before it is sent:
// no copy is filled until it ends (EndWrites). The flush empties the
// copies with their origins, but a fill sent before it on another
// connection (fills go on RESP2 connections, a RESP3 client's flush on
// RESP3 ones) may land after it and bring the old value back: the keys
// with fills unacknowledged now have their copies deleted again once the
// flush is acknowledged, behind those fills.
func (s *Engine) BeginFlush() Write {
	s.flushing.Add(1)
	s.epoch.Add(1)
	fw := &flushWrite{}
	s.mu.RLock()
	for _, sk := range s.keys {
		// Under the key's mutex: a fill checks flushing and marks itself
		// filling under it, so it is either seen here or refused.
		sk.mu.Lock()
		if sk.filling.Load() != 0 {
			fw.filling = append(fw.filling, sk)
		}
		sk.mu.Unlock()
	}
	s.mu.RUnlock()
	return Write{flush: fw}
}

// bucket is key's index in pending.
func (s *Engine) bucket(key []byte) int32 {
	return int32(maphash.Bytes(s.seed, key) % pendingBuckets)
}

// BeginWrite marks key as being written, before the write is sent; every
// write is ended by EndWrites once Redis acknowledged it. A key without
// salted state is counted in its pending bucket: a read that salts it
// before the write ends fills no copy, since the origin it reads may be
// the old value.
func (s *Engine) BeginWrite(key []byte) Write {
	b := s.bucket(key)
	// Counted before the lookup: a read that salts the key after the
	// lookup missed sees the count when it takes its FillGen.
	s.pending[b].Add(1)
	sk := s.Lookup(key)
	if sk == nil {
		return Write{bucket: b}
	}
	s.pending[b].Add(-1)
	sk.mu.Lock()
	sk.writing.Add(1)
	sk.gen.Add(1)
	sk.mu.Unlock()
	return Write{key: sk}
}

// Held is the writes of an open transaction's queued commands, which
// Redis runs at its EXEC: begun when each is queued and held until the
// EXEC's reply (Take, then EndWrites), so that no copy is filled in
// between with the value the EXEC replaces. Each salted key and pending
// bucket is held once, so it is bounded by the table and the buckets.
type Held struct {
	keys    map[*Key]struct{}
	buckets map[int32]struct{}
	flush   *flushWrite
}

// HoldFlush begins a flush into h unless h holds one already.
func (s *Engine) HoldFlush(h *Held) {
	if h.flush == nil {
		h.flush = s.BeginFlush().flush
	}
}

// Hold begins a write of key into h unless h holds it already (then the
// write begun again is undone: a generation raised once more only refuses
// a fill that raced it).
func (s *Engine) Hold(h *Held, key []byte) {
	w := s.BeginWrite(key)
	if w.key != nil {
		if _, ok := h.keys[w.key]; !ok {
			if h.keys == nil {
				h.keys = make(map[*Key]struct{})
			}
			h.keys[w.key] = struct{}{}
			return
		}
		w.key.writing.Add(-1)
		return
	}
	if _, ok := h.buckets[w.bucket]; !ok {
		if h.buckets == nil {
			h.buckets = make(map[int32]struct{})
		}
		h.buckets[w.bucket] = struct{}{}
		return
	}
	s.pending[w.bucket].Add(-1)
}

// Empty reports whether h holds no write.
func (h *Held) Empty() bool { return len(h.keys) == 0 && len(h.buckets) == 0 && h.flush == nil }

// Take appends h's writes to dst, for EndWrites, and empties h.
func (h *Held) Take(dst []Write) []Write {
	for sk := range h.keys {
		dst = append(dst, Write{key: sk})
	}
	for b := range h.buckets {
		dst = append(dst, Write{bucket: b})
	}
	if h.flush != nil {
		dst = append(dst, Write{flush: h.flush})
	}
	clear(h.keys)
	clear(h.buckets)
	h.flush = nil
	return dst
}

// EndWrites runs once Redis acknowledged the writes (or, for held ones,
// the transaction ended): it deletes the copies of their salted keys,
// waits for the deletions, and ends the writes.
func (s *Engine) EndWrites(writes []Write) {
	var dels copyDeletes
	salted, flushes := 0, 0
	for _, w := range writes {
		switch {
		case w.flush != nil:
			flushes++
			for _, sk := range w.flush.filling {
				dels.add(s, sk)
			}
		case w.key == nil:
			s.pending[w.bucket].Add(-1)
		default:
			salted++
			dels.add(s, w.key)
		}
	}
	if salted == 0 && flushes == 0 {
		return
	}
	failed := dels.wait(s, "deleting a salted copy after a write")
	for range flushes {
		s.epoch.Add(1)
		s.flushing.Add(-1)
	}
	for _, w := range writes {
		if sk := w.key; sk != nil {
			sk.mu.Lock()
			sk.gen.Add(1)
			sk.writing.Add(-1)
			sk.mu.Unlock()
			if !failed[sk] {
				sk.bypassUntil.Store(0) // written: a missing key may exist now
			}
		}
	}
}

// Fills are copy fills sent and not yet acknowledged.
type Fills struct {
	sent   []*upstream.Batch
	owners []*Key
	copies []int
}

// Fill handles the origin's replies to a copy read that missed (val: its
// GET's, pttl: its PTTL's): it sends the copy's fill into f if gen (from
// FillGen, or NoFill) is still current (the key's generation and the
// flush epoch), no write or flush is under way and no fill of that copy is
// unacknowledged. A missing origin sends the key's reads to it for a
// copy's TTL.
func (s *Engine) Fill(f *Fills, r Read, gen Gen, val, pttlReply []byte) {
	sk := r.key
	v, isBulk := resp.Payload(val, '$')
	if resp.IsNull(val) {
		// A hot missing key: its copies would only add a second read
		// per GET. Read the origin (coalesced) until a copy could have
		// lived, or until it is written through rproxy.
		sk.bypassUntil.Store(s.now().Add(s.cfg.TTL).UnixMilli())
		s.metrics.missing.Inc()
	}
	if !isBulk || gen.key < 0 {
		return
	}
	ttl := s.cfg.TTL.Milliseconds()
	pttl, ok := resp.Int(pttlReply)
	if !ok || pttl == -2 || pttl == 0 {
		return // gone, expiring, or not a number: no copy
	}
	if pttl > 0 {
		ttl = min(ttl, pttl)
	}
	n := r.names
	fill := upstream.NewBatch()
	fill.AddSlot(resp.AppendCommand(nil, []byte("SET"), n.names[r.copy], v, []byte("PX"), []byte(strconv.FormatInt(ttl, 10))), n.slots[r.copy])
	// The check and the send are one step with respect to a write's
	// start (BeginWrite): a write that begins after it queues its DEL
	// behind this SET on the same connection.
	bit := uint32(1) << r.copy
	sk.mu.Lock()
	if sk.gen.Load() == gen.key && s.epoch.Load() == gen.epoch && s.flushing.Load() == 0 && sk.writing.Load() == 0 && sk.filling.Load()&bit == 0 {
		sk.filling.Or(bit)
		s.ordered.SendOrdered(fill)
		f.sent, f.owners, f.copies = append(f.sent, fill), append(f.owners, sk), append(f.copies, r.copy)
	}
	sk.mu.Unlock()
}

// Settle handles the fills sent into f once Redis has answered them,
// without holding up the reads that sent them, which have their values
// from the origin: a fill is a write, which Redis may hold (a CLIENT
// PAUSE, a failover's pause) while it serves reads. Coherence does not
// wait for it: a write that begins after a fill was sent deletes the copy
// behind it on the same connection.
func (s *Engine) Settle(f *Fills) {
	if len(f.sent) == 0 {
		return
	}
	s.settling.Add(1)
	go func(f Fills) {
		defer s.settling.Done()
		for i, b := range f.sent {
			b.Wait()
			s.checkReply(f.owners[i], b, "filling a salted copy")
			f.owners[i].filling.And(^(uint32(1) << f.copies[i]))
			s.metrics.fills.Inc()
		}
	}(*f)
}

// Close waits for the fills Settle follows, and the deletions followed in
// the background (OriginWritten, FlushSeen), to be answered or failed: it
// is called once the upstream connections are closed, which fails those
// still unanswered, so that nothing logs after the proxy has shut down.
func (s *Engine) Close() { s.settling.Wait() }

// FlushSeen handles a flush that a tracking push reported, whoever made it
// (sent to a master directly, through another rproxy, or this one's): a
// fill whose read of the origin came before it is refused, and every
// salted key's copies are deleted, behind any fill already sent. A flush
// sent to one master alone leaves the copies other masters keep of its
// keys, which tracking reports only as "flushed". The deletions run in the
// background (Close waits for them), not on the tracking connection's
// reader.
func (s *Engine) FlushSeen() {
	s.epoch.Add(1)
	var dels copyDeletes
	s.mu.RLock()
	for _, sk := range s.keys {
		sk.mu.Lock() // in order with the key's fills (Fill)
		dels.add(s, sk)
		sk.mu.Unlock()
	}
	s.mu.RUnlock()
	dels.waitInBackground(s, "deleting a salted copy after a flush")
}

// OriginWritten deletes a salted key's copies when a tracking push
// says its origin was written (by any rproxy or client): copies filled
// from a tracked read are gone within the tracking lag and a DEL's round
// trip. The generation is raised under the key's mutex, so a fill that
// read the old value either is refused or was queued before the DELs on
// the same connections.
func (s *Engine) OriginWritten(key []byte) {
	sk := s.Lookup(key)
	if sk == nil {
		return
	}
	var dels copyDeletes
	sk.mu.Lock()
	sk.gen.Add(1)
	dels.add(s, sk)
	sk.mu.Unlock()
	dels.waitInBackground(s, "deleting a salted copy after a tracked write")
}
