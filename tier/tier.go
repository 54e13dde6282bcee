package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// Config configures hot-key detection and the local tier.
type Config struct {
	Detector hotkey.DetectorConfig
	// Tier serves hot keys' GET replies, and their Cacheable commands'
	// (reads.go), from memory when true.
	Tier       bool
	TierConfig hotkey.TierConfig
	// Prefixes: every key under one of these is admitted to the tier, hot
	// or not ("cache these" mode).
	Prefixes []string
	// MaxLag bounds how stale the tier may be for writes made outside
	// rproxy: when the tracking connection does not answer a probe within
	// it, the tier empties and stops serving until it does.
	MaxLag time.Duration
	// MissWait turns miss collapsing on (proxy's tiering.go): readers of a
	// missing hot key wait up to this long for the first reader's fill.
	// 0 = off.
	MissWait time.Duration
	// Churn is the admission rule for written keys: a key invalidated
	// more than Churn.Limit times per Churn.Window (a write through this
	// rproxy, or a tracking push) is not stored in the tier until it has
	// been quiet enough; it is read from Redis meanwhile. Limit 0: off.
	Churn hotkey.ChurnConfig
	// TrackingDial, if set, dials the tracking connection instead of
	// Upstream.Dial (tests use it to slow invalidations down).
	TrackingDial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Tier variants: the reply bytes for a RESP2 and a RESP3 GET.
const (
	variantResp2 uint8 = 2
	variantResp3 uint8 = 3
)

// fillQueue bounds the keys waiting to be filled; beyond it requests are
// dropped (the next read of the key asks again).
const fillQueue = 1024

// fillBatch is the most keys one fill round trip carries.
const fillBatch = 64

// Engine glues the hotkey package to the upstream through the tracking
// connection (see the package comment for the coherence rules).
//
// Everything but the tracking connection can change at run time (Set): the
// detector and the tier in place, the rest through atomics read on the
// request path.
type Engine struct {
	det   *hotkey.Detector
	tier  *hotkey.Tier // nil: the tier was off at start (no tracking connection)
	track *upstream.Pool
	// On a cluster: a tracking connection per node (RESP3 pools of a
	// cluster of their own), and which nodes' connections are up. The tier
	// serves only while every master's is.
	trackCluster *upstream.Cluster
	trackRouter  *upstream.Router
	nodeUp       map[string]bool
	// enabled: the tier serves and is filled (Config.Tier); false
	// turns it off without closing the tracking connection.
	enabled  atomic.Bool
	prefixes atomic.Pointer[[][]byte]
	// gate collapses misses (MissWait); missOn: MissWait > 0.
	gate   *hotkey.MissGate
	missOn atomic.Bool
	churn  *hotkey.Churn
	maxLag atomic.Int64  // nanoseconds
	lagSet chan struct{} // wakes the probe loop when maxLag changes
	// wake wakes a probe loop that waits while nothing is cached
	// (probeLoop): a fill was queued, or the tier turned on.
	wake    chan struct{}
	cfg     atomic.Pointer[Config] // the settings in force
	now     func() time.Time
	log     *zap.Logger
	metrics *tierMetrics

	queue   chan fillReq
	filling atomic.Int64 // fills begun and not yet stored or dropped
	// resp2 runs the RESP2 reads of command fills (tierReads): the shared
	// RESP2 connections. nil: only RESP3 variants of commands are filled.
	resp2 interface{ Do(*upstream.Batch) }

	mu      sync.Mutex
	pending map[string]struct{} // fills queued or under way (pendingKey)
	// armed: write-hot keys Redis tracks for this rproxy (read on the
	// tracking connection since their last invalidation), so that their
	// writes keep being counted without storing them. At most armedMax.
	armed  map[string]struct{}
	armedN atomic.Int64 // len(armed), read without mu
	connUp bool         // the tracking connection is up
	lagOK  bool         // the last probe came back within MaxLag

	closing bool // under mu: stopping is expected, not a warning

	// onKey, if set before the tracking connection starts, is called with
	// every key of a tracking push (salted copies, package salt).
	onKey atomic.Pointer[func(key []byte)]
	// onFlush, likewise, is called on a push that says a database was
	// flushed.
	onFlush atomic.Pointer[func()]

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type tierMetrics struct {
	fills        prometheus.Counter
	fillsRefused prometheus.Counter
	churnRefused prometheus.Counter
	pushes       prometheus.Counter
	barriers     prometheus.Counter
	serving      prometheus.Gauge
	lagStops     prometheus.Counter
	probeSeconds prometheus.Histogram
}

func newTierMetrics(reg prometheus.Registerer) *tierMetrics {
	m := &tierMetrics{
		fills: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tier_fills_total", Help: "Keys read from Redis into the local tier."}),
		fillsRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tier_fills_refused_total", Help: "Fills not stored because the key was invalidated while they were in flight."}),
		churnRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tier_fills_write_hot_total", Help: "Fills not stored because the key is invalidated too often (hotkeys.write_limit): it is read from Redis."}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tracking_invalidations_total", Help: "Invalidation messages received from Redis client tracking."}),
		barriers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tracking_barriers_total", Help: "Writes with unknown keys (scripts, EXEC) that waited for the tracking connection to catch up."}),
		serving: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tier_serving", Help: "1 while the tier serves (tracking connection up, within max lag), else 0."}),
		lagStops: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tier_stops_total", Help: "Times the tier emptied and stopped serving because tracking was lost or lagged."}),
		probeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "rproxy", Subsystem: "hotkey",
			Name: "tracking_probe_seconds", Help: "Round trip of the tracking connection's probe: an upper bound of the invalidation lag.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
	}
	if reg != nil {
		reg.MustRegister(m.fills, m.fillsRefused, m.churnRefused, m.pushes, m.barriers, m.serving, m.lagStops, m.probeSeconds)
	}
	return m
}

// Deps is what an Engine takes from its surroundings.
type Deps struct {
	// Upstream is the shared connections' config: the tracking
	// connection is made from it (RESP3, one connection, CLIENT TRACKING
	// ON). Its Now, when set (tests), is the engine's clock; else
	// time.Now, and Coarse for the detector.
	Upstream upstream.Config
	Cluster  *upstream.ClusterConfig // nil: a standalone upstream
	Coarse   func() time.Time
	// RESP2 runs the RESP2 reads of command fills (the shared RESP2
	// connections). nil: only RESP3 variants of commands are filled.
	RESP2           interface{ Do(*upstream.Batch) }
	UpstreamMetrics *upstream.Metrics
	Registry        prometheus.Registerer // nil: no metrics registered
	Log             *zap.Logger
}

// New starts an Engine: with cfg.Tier, its tracking connection and the
// fill and probe loops, stopped by Close.
func New(cfg Config, d Deps) (*Engine, error) {
	ucfg, cluster, coarse, um, reg, log := d.Upstream, d.Cluster, d.Coarse, d.UpstreamMetrics, d.Registry, d.Log
	now := ucfg.Now
	ctx, cancel := context.WithCancel(context.Background())
	detectorNow := now
	if now == nil {
		// time.Now costs ~45ns on this kind of VM, as much as the whole
		// detector update; rates need a fraction of the window's accuracy.
		now, detectorNow = time.Now, coarse
	}
	det, err := hotkey.NewDetector(cfg.Detector, detectorNow, reg)
	if err != nil {
		cancel()
		return nil, err
	}
	h := &Engine{det: det, now: now, log: log, metrics: newTierMetrics(reg), cancel: cancel, lagSet: make(chan struct{}, 1), wake: make(chan struct{}, 1), resp2: d.RESP2}
	if h.gate, err = hotkey.NewMissGate(missGateConfig(cfg.MissWait), now, reg); err != nil {
		cancel()
		return nil, err
	}
	// Every acknowledged write is counted: the coarse clock, as for the
	// detector (the window is a second; time.Now showed in SET profiles).
	if h.churn, err = hotkey.NewChurn(cfg.Churn, detectorNow); err != nil {
		cancel()
		return nil, err
	}
	h.missOn.Store(cfg.MissWait > 0)
	h.maxLag.Store(int64(cfg.MaxLag))
	h.setPrefixes(cfg.Prefixes)
	c := cfg
	h.cfg.Store(&c)
	if !cfg.Tier {
		return h, nil
	}
	if h.tier, err = hotkey.NewTier(cfg.TierConfig, now, reg); err != nil {
		cancel()
		return nil, err
	}
	h.tier.SetServing(false) // until the tracking connection is up
	h.enabled.Store(true)
	h.queue = make(chan fillReq, fillQueue)
	h.pending = make(map[string]struct{})
	h.armed = make(map[string]struct{})
	ucfg.Protocol = 3
	ucfg.Connections = 1
	ucfg.GatherYields = 0
	ucfg.Setup = [][]byte{resp.AppendCommandString(nil, "CLIENT", "TRACKING", "ON")}
	ucfg.OnPush = h.onPush
	ucfg.OnState = h.onState
	if cfg.TrackingDial != nil {
		ucfg.Dial = cfg.TrackingDial
	}
	if cluster != nil {
		// Each master tracks the keys read through its own connection
		// and pushes their invalidations on it.
		tc := *cluster
		tc.Protocols, tc.ReplicaReads, tc.OnNodeState = []int{3}, false, h.onNodeState
		h.nodeUp = make(map[string]bool)
		trackCluster, err := upstream.NewCluster(ucfg, tc, um, log.Named("tracking"))
		if err != nil {
			cancel()
			return nil, err
		}
		// Its connections may already have reported (onNodeState), before
		// it was known here: take it under mu and look at them again.
		h.mu.Lock()
		h.trackCluster = trackCluster
		h.connUp = h.mastersTrackedLocked()
		h.applyLocked()
		h.mu.Unlock()
		h.trackRouter = trackCluster.Router(3)
	} else if h.track, err = upstream.NewPool(ucfg, um, log.Named("tracking")); err != nil {
		cancel()
		return nil, err
	}
	h.wg.Add(2)
	go func() { defer h.wg.Done(); h.fillLoop(ctx) }()
	go func() { defer h.wg.Done(); h.probeLoop(ctx) }()
	return h, nil
}

// Validate reports what makes c unusable, at start or in a reload.
func (c Config) Validate() error {
	var errs []error
	if err := c.Detector.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.TierConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxLag <= 0 {
		errs = append(errs, fmt.Errorf("hotkey: max lag must be positive, got %v", c.MaxLag))
	}
	if err := c.Churn.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MissWait < 0 {
		errs = append(errs, fmt.Errorf("hotkey: miss wait must be >= 0 (0 turns miss collapsing off), got %v", c.MissWait))
	}
	for i, p := range c.Prefixes {
		if p == "" {
			errs = append(errs, fmt.Errorf("hotkey: prefix %d is empty: it would cache every key", i))
		}
	}
	return errors.Join(errs...)
}

// Set applies cfg while clients are served; an error changes nothing.
// Turning the tier on needs the tracking connection, made at start only
// when the tier was on then.
func (h *Engine) Set(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Tier && h.tier == nil {
		return errors.New("hotkey: the local tier was off at start (no tracking connection): turning it on needs a restart")
	}
	if err := h.det.SetConfig(cfg.Detector); err != nil {
		return err // Validate has checked it
	}
	if h.tier != nil {
		if err := h.tier.SetConfig(cfg.TierConfig); err != nil {
			return err // Validate has checked it
		}
	}
	if err := h.churn.SetConfig(cfg.Churn); err != nil {
		return err // Validate has checked it
	}
	h.setPrefixes(cfg.Prefixes)
	if err := h.gate.SetConfig(missGateConfig(cfg.MissWait)); err != nil {
		return err // Validate has checked it
	}
	if was := h.missOn.Swap(cfg.MissWait > 0); was && cfg.MissWait == 0 {
		h.gate.Clear() // turned off: nobody stays held
	}
	if h.maxLag.Swap(int64(cfg.MaxLag)) != int64(cfg.MaxLag) {
		select {
		case h.lagSet <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	if h.tier != nil {
		h.setEnabled(cfg.Tier)
	}
	cfg.TrackingDial = nil // not changeable: the connection exists
	h.cfg.Store(&cfg)
	return nil
}

func (h *Engine) setPrefixes(ps []string) {
	b := make([][]byte, len(ps))
	for i, p := range ps {
		b[i] = []byte(p)
	}
	h.prefixes.Store(&b)
}

// setEnabled turns the tier on or off by configuration. Off empties it at
// once; on serves again once the tracking connection is up and within
// max lag (fills begun while it was off are refused).
func (h *Engine) setEnabled(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.enabled.Swap(on) == on {
		return
	}
	if on {
		h.log.Info("local tier turned on by configuration")
	} else {
		h.log.Info("local tier turned off by configuration: emptied, detection goes on")
	}
	h.applyLocked() // off: not counted as a stop
	if on {
		h.wakeProbe()
	}
}

func (h *Engine) Close() {
	if h.track == nil && h.trackCluster == nil {
		h.cancel()
		return
	}
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.cancel()
	if h.trackCluster != nil {
		h.trackCluster.Close()
	} else {
		h.track.Close()
	}
	h.wg.Wait()
}

// MissOn reports whether miss collapsing is on (Config.MissWait > 0).
func (h *Engine) MissOn() bool { return h.missOn.Load() }

// Config returns the settings in force.
func (h *Engine) Config() Config { return *h.cfg.Load() }

// HotKeys returns the keys detected as hot, highest rate first.
func (h *Engine) HotKeys() []hotkey.HotKey { return h.det.Hot() }

// Stats returns the tier's figures, and false when the tier was off at
// start.
func (h *Engine) Stats() (hotkey.TierStats, bool) {
	if h.tier == nil {
		return hotkey.TierStats{}, false
	}
	return h.tier.Stats(), true
}

// Clustered reports whether tracking runs per cluster master: then Redis
// pushes writes to any key read with TrackDo, which salted copies follow.
func (h *Engine) Clustered() bool { return h.trackRouter != nil }

// Begin starts a read of key made outside the tier's fills (a salted
// copy's origin, on the tracking connection): Current then says whether
// the key was invalidated, or tracking lost, since. Only while the tier
// is on.
func (h *Engine) Begin(key []byte) hotkey.Token { return h.tier.Begin(key) }

// Current reports whether nothing invalidated key since tok was taken.
func (h *Engine) Current(tok hotkey.Token, key []byte) bool { return h.tier.Current(tok, key) }

// OnKey sets f to be called with every key of a tracking push. Set it
// before clients are served.
func (h *Engine) OnKey(f func(key []byte)) { h.onKey.Store(&f) }

// OnFlush has f called on every push that says a database was flushed
// (FLUSHALL, FLUSHDB), whoever flushed it; set before the tracking
// connection starts.
func (h *Engine) OnFlush(f func()) { h.onFlush.Store(&f) }

// TrackingUp reports whether reads on the tracking connection are tracked
// now (the tier serves: connection up, within max lag).
func (h *Engine) TrackingUp() bool {
	return h.tier != nil && h.tier.Serving()
}

// OwnsConn reports whether addr is the local address of a tracking
// connection, as Redis lists it (CLIENT LIST, MONITOR).
func (h *Engine) OwnsConn(addr string) bool {
	if h.trackCluster != nil {
		return h.trackCluster.HasConn(addr)
	}
	return h.track != nil && h.track.HasConn(addr)
}

// TrackDo runs a batch on the tracking connection: the one, or on a
// cluster each command's master's.
func (h *Engine) TrackDo(b *upstream.Batch) {
	if h.trackRouter != nil {
		h.trackRouter.Do(b)
		return
	}
	h.track.Do(b)
}

// Lookup returns the tier's reply for GET key in protocol proto.
func (h *Engine) Lookup(key []byte, proto int) ([]byte, bool) {
	if h.tier == nil || !h.enabled.Load() {
		return nil, false
	}
	v := variantResp2
	if proto == 3 {
		v = variantResp3
	}
	return h.tier.Get(key, v)
}

// LookupVariant returns the tier's reply for a Cacheable command: variant
// is the protocol byte followed by the command's bytes.
func (h *Engine) LookupVariant(key, variant []byte) ([]byte, bool) {
	if h.tier == nil || !h.enabled.Load() {
		return nil, false
	}
	return h.tier.GetVariant(key, variant)
}

// Observe counts a read of key (keyHash: xxhash.Sum64(key)): hot says
// whether the key is hot, fill whether the tier should hold it (hot, or
// under a cached prefix).
func (h *Engine) Observe(key []byte, keyHash uint64) (hot, fill bool) {
	hot = h.det.ObserveHash(key, keyHash)
	return hot, h.tier != nil && h.enabled.Load() && (hot || h.UnderPrefix(key))
}

func (h *Engine) UnderPrefix(key []byte) bool {
	for _, p := range *h.prefixes.Load() {
		if bytes.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// fillReq is a queued fill: a GET's (variant nil: both protocols' replies)
// or a Cacheable command's, variant being the protocol byte and the
// command's bytes.
type fillReq struct {
	key, variant []byte
	// trackOnly: the key is write-hot; read its PTTL on the tracking
	// connection so that Redis pushes its next invalidation (counted), and
	// store nothing.
	trackOnly bool
}

// pendingKey names a fill in pending: GETs and commands apart.
func (r fillReq) pendingKey() string {
	if r.trackOnly {
		return "t" + string(r.key)
	}
	if r.variant == nil {
		return "g" + string(r.key)
	}
	return "c" + string(r.variant)
}

func (h *Engine) RequestFill(key []byte) {
	h.enqueueFill(fillReq{key: key})
}

// RequestFillVariant asks for a fill of a Cacheable command: variant is
// the protocol byte followed by the command's bytes, key its key.
func (h *Engine) RequestFillVariant(key, variant []byte) {
	if variant[0] == 2 && h.resp2 == nil {
		return
	}
	h.enqueueFill(fillReq{key: key, variant: variant})
}

// enqueueFill queues r unless it is queued already; r's bytes are copied.
func (h *Engine) enqueueFill(r fillReq) {
	if !h.tier.Serving() {
		return
	}
	writeHot := h.churn.Hot(xxhash.Sum64(r.key))
	h.mu.Lock()
	defer h.mu.Unlock()
	if writeHot {
		if _, ok := h.armed[string(r.key)]; ok {
			return // Redis will push its next write
		}
		r = fillReq{key: r.key, trackOnly: true}
	}
	pk := r.pendingKey()
	if _, ok := h.pending[pk]; ok {
		return
	}
	q := fillReq{key: []byte(string(r.key)), trackOnly: r.trackOnly}
	if r.variant != nil {
		q.variant = []byte(string(r.variant))
	}
	select {
	case h.queue <- q:
		h.pending[pk] = struct{}{}
	default: // full: a later read asks again
		return
	}
	h.wakeProbe()
}

// wakeProbe wakes a probe loop waiting while the tier is idle.
func (h *Engine) wakeProbe() {
	select {
	case h.wake <- struct{}{}:
	default: // a wake-up is waiting already
	}
}

// Invalidate drops key from the tier; fills begun before fail.
// hash is xxhash.Sum64(key), for a caller that also calls Written.
func (h *Engine) Invalidate(key []byte, hash uint64) {
	if h.tier != nil {
		h.tier.InvalidateHash(key, hash)
		h.disarm(key)
	}
}

// Written is Invalidate for a write Redis has acknowledged: it also
// releases the readers held for the key's fill, and counts the write for
// admission (Churn).
func (h *Engine) Written(key []byte, hash uint64) {
	if h.tier != nil {
		h.tier.InvalidateHash(key, hash)
		h.disarm(key)
		h.churn.Record(hash)
	}
	h.gate.Written(key)
}

// armedMax bounds the write-hot keys remembered as tracked; beyond it the
// set is emptied (each such key then costs one more tracking read).
const armedMax = 4096

// disarm forgets that Redis tracks key for us: called after the key was
// invalidated (tier.Invalidate), so that a fill which read it before the
// invalidation cannot leave it marked (see fillLoop).
func (h *Engine) disarm(key []byte) {
	if h.armedN.Load() == 0 {
		return
	}
	h.mu.Lock()
	if _, ok := h.armed[string(key)]; ok {
		delete(h.armed, string(key))
		h.armedN.Store(int64(len(h.armed)))
	}
	h.mu.Unlock()
}

func (h *Engine) Clear() {
	if h.tier != nil {
		h.tier.Clear()
		h.mu.Lock()
		h.disarmAllLocked()
		h.mu.Unlock()
	}
	h.gate.Clear()
}

// disarmAllLocked forgets every armed key: after a clear, or when tracking
// was lost.
func (h *Engine) disarmAllLocked() {
	clear(h.armed)
	h.armedN.Store(0)
}

// MissGate returns the miss gate when miss collapsing is on, else nil.
func (h *Engine) MissGate() *hotkey.MissGate {
	if !h.missOn.Load() {
		return nil
	}
	return h.gate
}

// missGateConfig is the gate's config for hotkeys.miss_wait (0: off, the
// gate then only keeps its metrics).
func missGateConfig(wait time.Duration) hotkey.MissGateConfig {
	c := hotkey.DefaultMissGateConfig()
	if wait > 0 {
		c.Wait = wait
	}
	return c
}

// Barrier returns once every invalidation Redis sent before this call has
// been applied: the tracking connection answers in order.
func (h *Engine) Barrier() {
	// Nothing to wait for if nothing is cached and no fill that could have
	// read an old value is under way. filling is read first: a fill counted
	// there has not stored yet, and one that begins after this check reads
	// after the write.
	if h.tier == nil || (h.filling.Load() == 0 && h.tier.Stats().Entries == 0) {
		return
	}
	h.metrics.barriers.Inc()
	if !h.ping() {
		// The connection failed: OnState(false) has emptied the tier.
		h.Clear()
	}
}

var pingCmd = resp.AppendCommandString(nil, "PING")

// ping sends PING on the tracking connection and reports whether it was
// answered: its reply follows every push Redis queued before it.
//
// On a cluster it pings every master's tracking connection.
func (h *Engine) ping() bool {
	b := upstream.NewBatch()
	if h.trackRouter != nil {
		for _, slot := range h.trackRouter.Shards() {
			b.AddSlot(pingCmd, slot)
		}
		if b.Len() == 0 {
			return false // no slot map yet
		}
	} else {
		b.Add(pingCmd)
	}
	h.TrackDo(b)
	for i := range b.Len() {
		if r := b.Reply(i); len(r) == 0 || r[0] != '+' {
			return false
		}
	}
	return true
}

// fillLoop reads queued fills, up to fillBatch per round trip, and stores
// their replies with the key's PTTL unless the key was invalidated
// meanwhile.
//
// A GET is read as GET then PTTL on the tracking connection, and its RESP2
// reply derived (they differ only for a missing key). A Cacheable command
// is read as PTTL then the command, so that Redis tracks the key from
// before the command runs (PTTL is a read): a write between the two is
// invalidated. Its RESP3 reply is the tracking connection's; a RESP2 reply
// cannot be derived without decoding, so it is read again on a shared
// RESP2 connection once the tracking read is answered: the key is tracked
// by then, so any write before that read is invalidated after it, and the
// fill's token refuses the copy or the invalidation drops it.
func (h *Engine) fillLoop(ctx context.Context) {
	b, b2 := upstream.NewBatch(), upstream.NewBatch()
	var reqs []fillReq
	var toks []hotkey.Token
	var at2 []int // per request: its reply's index in b2, or -1
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-h.queue:
			reqs = append(reqs[:0], r)
		}
	more:
		for len(reqs) < fillBatch {
			select {
			case r := <-h.queue:
				reqs = append(reqs, r)
			default:
				break more
			}
		}
		b.Reset()
		b2.Reset()
		toks, at2 = toks[:0], at2[:0]
		h.filling.Add(1)
		for _, r := range reqs {
			toks = append(toks, h.tier.Begin(r.key)) // before the read leaves
			slot := upstream.SlotAny
			if h.trackRouter != nil {
				slot = upstream.Slot(r.key)
			}
			if r.trackOnly {
				b.AddSlot(resp.AppendCommand(nil, []byte("PTTL"), r.key), slot)
				b.AddSlot(pingCmd, slot) // keeps two replies per request
			} else if r.variant == nil {
				b.AddSlot(resp.AppendCommand(nil, []byte("GET"), r.key), slot)
				b.AddSlot(resp.AppendCommand(nil, []byte("PTTL"), r.key), slot)
			} else {
				b.AddSlot(resp.AppendCommand(nil, []byte("PTTL"), r.key), slot)
				b.AddSlot(r.variant[1:], slot)
			}
			at2 = append(at2, -1)
		}
		sent := h.now()
		h.TrackDo(b)
		h.noteFillRoundTrip(h.now().Sub(sent))
		for i, r := range reqs {
			if !r.trackOnly && r.variant != nil && r.variant[0] == 2 {
				slot := upstream.SlotAny
				if h.trackRouter != nil {
					slot = upstream.Slot(r.key)
				}
				b2.AddSlot(r.variant[1:], slot)
				at2[i] = b2.Len() - 1
			}
		}
		if b2.Len() > 0 {
			h.resp2.Do(b2)
		}
		rtt := h.now().Sub(sent)
		for i, r := range reqs {
			switch {
			case r.trackOnly:
			case h.churn.Hot(xxhash.Sum64(r.key)):
				// Became write-hot while the fill was queued.
				h.metrics.churnRefused.Inc()
			case r.variant == nil:
				h.store(toks[i], r.key, b.Reply(2*i), b.Reply(2*i+1), rtt)
			case at2[i] >= 0:
				h.storeVariant(toks[i], r, b.Reply(2*i), b2.Reply(at2[i]), rtt)
			default:
				h.storeVariant(toks[i], r, b.Reply(2*i), b.Reply(2*i+1), rtt)
			}
		}
		h.filling.Add(-1)
		h.mu.Lock()
		for i, r := range reqs {
			delete(h.pending, r.pendingKey())
			// A write-hot key read above is tracked by Redis unless it was
			// invalidated since (its token is stale): remember it, so that
			// its reads do not ask again before the next push. Checked
			// under mu, which disarm takes after the invalidation.
			if r.trackOnly && h.tier.Current(toks[i], r.key) {
				if len(h.armed) >= armedMax {
					clear(h.armed)
				}
				h.armed[string(r.key)] = struct{}{}
				h.armedN.Store(int64(len(h.armed)))
				h.metrics.churnRefused.Inc()
			}
			reqs[i] = fillReq{}
		}
		h.mu.Unlock()
	}
}

// storeVariant caches a Cacheable command's reply, read after the PTTL
// pttl, for at most the key's remaining life less the fill's round trip.
// Errors are not cached. A missing key (PTTL -2) is cached like a value:
// it was tracked from the PTTL on, so its creation is invalidated.
func (h *Engine) storeVariant(tok hotkey.Token, r fillReq, pttl, reply []byte, rtt time.Duration) {
	ms, ok := resp.Int(pttl)
	if !ok || len(reply) == 0 || reply[0] == '-' || reply[0] == '!' || ms == 0 {
		return
	}
	ttl := time.Duration(0) // no TTL on Redis (or no key): the tier's cap applies
	if ms > 0 {
		if ttl = time.Duration(ms)*time.Millisecond - rtt; ttl <= 0 {
			return
		}
	}
	if h.tier.PutVariant(tok, r.key, r.variant, reply, ttl) {
		h.metrics.fills.Inc()
		return
	}
	h.metrics.fillsRefused.Inc()
}

var resp2Null = []byte("$-1\r\n")

// store caches a fill. rtt is the fill's round trip: PTTL was measured at
// some point within it, so the entry's life is cut by it to end no later
// than the key on Redis.
func (h *Engine) store(tok hotkey.Token, key, get, pttl []byte, rtt time.Duration) {
	ms, ok := resp.Int(pttl)
	if len(get) == 0 || (get[0] != '$' && get[0] != '_') || !ok {
		return // an error (WRONGTYPE, upstream down): nothing to cache
	}
	if ms == 0 || (ms == -2 && get[0] != '_') {
		return
	}
	ttl := time.Duration(0) // no TTL on Redis: the tier's cap applies
	if ms > 0 {
		if ttl = time.Duration(ms)*time.Millisecond - rtt; ttl <= 0 {
			return
		}
	}
	r2 := get
	if get[0] == '_' {
		r2 = resp2Null
	}
	// RESP3 only differs from RESP2 here for a missing key.
	if h.tier.Put(tok, key, variantResp3, get, ttl) && h.tier.Put(tok, key, variantResp2, r2, ttl) {
		h.metrics.fills.Inc()
		return
	}
	h.tier.Invalidate(key) // do not leave one variant behind
	h.metrics.fillsRefused.Inc()
}

// onPush applies Redis's invalidation messages: [invalidate, [keys...]], or
// [invalidate, null] after FLUSHALL/FLUSHDB.
func (h *Engine) onPush(push []byte) {
	v, err := resp.Parse(push)
	if err != nil || len(v.Elems) != 2 || !bytes.Equal(v.Elems[0].Str, []byte("invalidate")) {
		return
	}
	h.metrics.pushes.Inc()
	if v.Elems[1].Null {
		h.Clear()
		if f := h.onFlush.Load(); f != nil {
			(*f)()
		}
		return
	}
	for _, k := range v.Elems[1].Elems {
		h.Written(k.Str, xxhash.Sum64(k.Str))
		if f := h.onKey.Load(); f != nil {
			(*f)(k.Str)
		} // Redis has applied the change: held readers read again
	}
}

// onState follows the tracking connection: while it is down, Redis tracks
// nothing for rproxy, so the tier must not serve.
func (h *Engine) onState(up bool) {
	h.mu.Lock()
	h.connUp = up
	h.applyLocked()
	h.mu.Unlock()
}

// applyLocked serves only while the tier is on, the connection is up and
// not lagging.
func (h *Engine) applyLocked() {
	enabled := h.enabled.Load()
	on := h.connUp && h.lagOK && enabled
	if on == h.tier.Serving() {
		return
	}
	h.tier.SetServing(on)
	if on {
		h.metrics.serving.Set(1)
		h.log.Info("local tier serving")
		return
	}
	h.metrics.serving.Set(0)
	h.disarmAllLocked()
	if h.closing || !enabled {
		return
	}
	h.metrics.lagStops.Inc()
	h.log.Warn("local tier emptied and stopped", zap.Bool("tracking_up", h.connUp), zap.Bool("within_lag", h.lagOK))
}

// probeLoop measures the tracking connection's round trip every quarter of
// MaxLag: invalidations queue on that connection ahead of the probe, so a
// late probe means invalidations may be late too.
// MaxLag is read at each probe; a change wakes the loop.
//
// While the tier is off by configuration, or serves but holds nothing and
// fills nothing, no late invalidation can make anything stale, and the
// loop waits for the next fill instead of probing: each probe is a PING
// that Redis counts, logs and shows (INFO commandstats, SLOWLOG, MONITOR),
// four a second per master from every rproxy, caching or not. The fill
// that wakes the loop may be stored before the woken probe returns; it
// read through the same connection, so its own round trip stands in for
// that probe (noteFillRoundTrip). A tier that does not serve is probed on:
// only a probe turns it back on.
func (h *Engine) probeLoop(ctx context.Context) {
	done := make(chan bool, 1)
	for {
		maxLag := time.Duration(h.maxLag.Load())
		interval := max(maxLag/4, time.Millisecond)
		start := time.Now()
		go func() { done <- h.ping() }()
		timer := time.NewTimer(maxLag)
		var ok, late bool
		select {
		case ok = <-done:
		case <-timer.C:
			late = true
			h.setLag(false)
			ok = <-done // the upstream timeout bounds this wait
		case <-ctx.Done():
			timer.Stop()
			<-done
			return
		}
		timer.Stop()
		h.metrics.probeSeconds.Observe(time.Since(start).Seconds())
		h.setLag(ok && !late)
		var wait <-chan time.Time
		if !h.idle() {
			wait = time.After(interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		case <-h.lagSet:
		case <-h.wake:
		}
	}
}

// idle reports whether the tier is off by configuration, or serves,
// holds nothing and has no fill queued or under way. A wake-up left from fills the loop did not wait
// for is dropped first, so that one queued after this call is kept: a
// fill is pending (under mu) from its queueing until it is stored.
func (h *Engine) idle() bool {
	select {
	case <-h.wake:
	default:
	}
	if !h.enabled.Load() {
		return true
	}
	if !h.tier.Serving() {
		return false
	}
	h.mu.Lock()
	n := len(h.pending)
	h.mu.Unlock()
	return n == 0 && h.tier.Stats().Entries == 0
}

// noteFillRoundTrip counts a fill's round trip on the tracking connection
// as a probe that came back late when it took longer than MaxLag: the
// fill that woke an idle probe loop is stored without waiting for it.
func (h *Engine) noteFillRoundTrip(rtt time.Duration) {
	if rtt > time.Duration(h.maxLag.Load()) {
		h.setLag(false)
	}
}

// onNodeState follows a cluster node's tracking connection.
func (h *Engine) onNodeState(addr string, up bool) {
	h.mu.Lock()
	h.nodeUp[addr] = up
	h.connUp = h.mastersTrackedLocked()
	h.applyLocked()
	h.mu.Unlock()
}

// mastersTrackedLocked reports whether every master of the slot map has
// its tracking connection up. The map may change without a node's
// connection changing (a failover): the probe loop asks again.
func (h *Engine) mastersTrackedLocked() bool {
	if h.trackCluster == nil {
		return false // still being made: New looks again once it is
	}
	masters := h.trackCluster.MasterAddrs()
	for _, a := range masters {
		if !h.nodeUp[a] {
			return false
		}
	}
	return len(masters) > 0
}

func (h *Engine) setLag(ok bool) {
	h.mu.Lock()
	if h.trackCluster != nil {
		h.connUp = h.mastersTrackedLocked()
	}
	h.lagOK = ok
	h.applyLocked()
	h.mu.Unlock()
}
