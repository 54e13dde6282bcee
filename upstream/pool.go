package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/resp"
)

// Config configures one Pool: the shared connections of one protocol.
type Config struct {
	Address     string // host:port of the Redis server
	Connections int    // how many shared connections
	Protocol    int    // 2 or 3: RESP version the connections speak (3 sends HELLO 3 on connect)
	// Username and Password authenticate every connection (AUTH, or HELLO 3
	// AUTH); empty Password means none for the default user. An empty
	// Username is "default"; another user always logs in (a nopass user
	// with an empty password).
	Username string
	Password string
	// Credentials, when set, stand for Username and Password (Login):
	// rproxy's own upstream user, whose password a reload may change.
	Credentials *Credentials
	DialTimeout time.Duration // bound on dial plus handshake
	// Timeout bounds how long a request waits with no reply progress: after it,
	// everything waiting on the connection fails, and the connection is
	// reset, or drained (conn.startDrain) where Redis answers nothing.
	Timeout    time.Duration
	BackoffMin time.Duration // first reconnect delay, doubled per failure
	BackoffMax time.Duration // reconnect delay cap

	// StallDivert, when > 0, sends new batches around a shared connection
	// whose oldest request has seen no reply for this long: to another
	// connection of the pool that is not stalled, or else to one of up to
	// Connections spare connections, dialled when every shared one is
	// stalled and closed after spareQuiet without a stall. Redis stops
	// reading a connection at a write while writes are paused (CLIENT PAUSE
	// WRITE, FAILOVER); without this the reads of every client behind it
	// wait too. Off (0) for pools with Setup or OnPush (a tracking
	// connection's state is its own) and for SendOn.
	StallDivert time.Duration
	// BacklogDivert, when > 0, sends a small batch (at most a sixteenth of
	// it) around a shared connection holding at least this many bytes of
	// commands not yet answered (Redis reads them before the batch), with
	// the bytes of the replies they are expected to get (Batch.size): to
	// another connection of the pool with room under it, or else a spare,
	// dialled at the first such batch and closed after spareQuiet without
	// one. Pipelines of large values then no longer delay every other
	// client's reads behind them; directly, Redis reads each client's
	// connection in turn. Off (0) for pools with Setup or OnPush, and for
	// SendOn, which keeps its connection.
	BacklogDivert int

	// GatherYields is how many times the writer may yield, while the queue
	// keeps growing, to gather more commands into one write (0: none).
	GatherYields int
	// GatherProgress, if set, counts activity that, like a growing queue,
	// keeps the writer gathering (reads joining coalesced flights).
	GatherProgress func() uint64
	// SendSeq numbers writes to the upstream, shared by every pool of a
	// proxy so that sends and acknowledgements can be ordered (coalescing);
	// nil gives the pool its own.
	SendSeq *atomic.Uint64

	// Setup holds commands sent after the handshake on every new shared
	// connection, each of which must not fail (e.g. CLIENT TRACKING ON).
	Setup [][]byte
	// OnPush, if set, receives every RESP3 push frame a shared connection
	// reads, in stream order with the replies, on the reader goroutine. The
	// bytes are valid only during the call.
	OnPush func(push []byte)
	// OnState, if set, is called with true when a shared connection is up
	// (after Setup) and with false when it is lost, before the requests
	// waiting on it are failed.
	OnState func(up bool)

	Now  func() time.Time                                                     // injected clock; nil means time.Now
	Dial func(ctx context.Context, network, address string) (net.Conn, error) // nil means a net.Dialer

	// TLS, when not nil, wraps every connection in TLS (see Dial); nil is
	// plain TCP. An empty ServerName means the host of Address.
	TLS *tls.Config
	// TLSRoots, if set, gives the CAs that verify Redis at each dial in
	// place of TLS.RootCAs (nil: the system's), so that a reload's new
	// upstream.tls.ca_file applies to the connections dialled after it.
	TLSRoots func() *x509.CertPool
	// TLSOtherName, when TLS.ServerName is empty, is a second name a
	// server's certificate may carry instead of the host it is dialled at:
	// on a cluster, the seed's host, for nodes that share one certificate
	// while the map names them by address.
	TLSOtherName string
	// TLSAnnouncedName, when TLS.ServerName is empty, gives a third name
	// the certificate may carry: on a cluster, the hostname the node
	// announces (cluster-announce-hostname, CLUSTER SHARDS' hostname),
	// read at each handshake as the last map read gave it ("" for none).
	TLSAnnouncedName func() string

	// Sentinel, when not nil, gives the address to dial (Address is then
	// only a name for logs): every connection dials the master it names,
	// confirms with ROLE that it is a master, and is moved when the
	// master changes.
	Sentinel *Sentinel

	// Follow, when not nil (a standalone address), keeps the pool on a
	// master when the address moves to another server (MasterFollow).
	Follow *MasterFollow

	// Own, when not nil, records the commands the pool sends on its own
	// (handshakes, resets), for MONITOR to hide; shared by every pool of a
	// proxy.
	Own *OwnCommands
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Address == "" {
		errs = append(errs, errors.New("upstream: address is empty"))
	}
	if c.Connections < 1 {
		errs = append(errs, fmt.Errorf("upstream: connections must be at least 1, got %d", c.Connections))
	}
	if c.BacklogDivert < 0 {
		errs = append(errs, fmt.Errorf("upstream: backlog divert must be 0 (off) or more, got %d", c.BacklogDivert))
	}
	if c.Protocol != 2 && c.Protocol != 3 {
		errs = append(errs, fmt.Errorf("upstream: protocol must be 2 or 3, got %d", c.Protocol))
	}
	if c.DialTimeout <= 0 || c.Timeout <= 0 || c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("upstream: timeouts must be positive and backoff max >= min (dial %v, timeout %v, backoff %v..%v)",
			c.DialTimeout, c.Timeout, c.BackoffMin, c.BackoffMax))
	}
	return errors.Join(errs...)
}

// Pool is a fixed set of shared, pipelined connections to one Redis server,
// all speaking one protocol version, and as many spares for stalls and
// backlogs (Config.StallDivert, Config.BacklogDivert).
type Pool struct {
	cfg     Config
	log     *zap.Logger
	metrics *poolMetrics
	conns   []*conn
	next    atomic.Uint32

	// spares are the connections batches go to while every one of conns
	// is stalled (Config.StallDivert), or holds a backlog
	// (Config.BacklogDivert): started at the first such stall or batch.
	// diverting: the watcher found a connection stalled for StallDivert.
	// backlogged: a batch went around a backlog (Config.BacklogDivert)
	// since the watcher last looked, which keeps the spares open.
	spares     []*spare
	all        []*conn // conns, then the spares' connections
	diverting  atomic.Bool
	backlogged atomic.Bool
	quietFrom  int64 // watch's: unix nanos since which nothing was stalled or backlogged
	ctx        context.Context

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// gate is the dials a command that finds no connection up waits for
	// (within Config.Timeout) instead of failing at once: the first
	// dials (a master just added to a cluster, a MOVED to a node never
	// seen), then those to a new master (Sentinel: masterChanged).
	gate        atomic.Pointer[dialGate]
	gateMu      sync.Mutex   // serialises replacing gate
	dialWaiters atomic.Int32 // sends waiting on gate

	// redial is closed (and replaced) to cut short the reconnect backoff
	// of every connection: the master changed (Sentinel).
	redialMu sync.Mutex
	redial   chan struct{}

	// drains counts the connections draining the replies of commands
	// that timed out (conn.startDrain); drained is closed when it falls
	// back to 0. Sends wait for it (awaitDrains).
	drainMu      sync.Mutex
	drains       atomic.Int32
	drained      chan struct{}
	drainWaiters atomic.Int32

	dedicatedState
}

// NewPool validates cfg and starts connecting in the background; it does not
// wait for the server. Use Ready to see whether any connection is up.
func NewPool(cfg Config, m *Metrics, log *zap.Logger) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SendSeq == nil {
		cfg.SendSeq = new(atomic.Uint64)
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = d.DialContext
	}
	cfg.TLS = clientTLS(cfg, cfg.Address) // once, rather than on every dial
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		cfg:     cfg,
		log:     log.With(zap.String("upstream", cfg.Address), zap.Int("protocol", cfg.Protocol)),
		metrics: m.forProtocol(cfg.Protocol),
		cancel:  cancel,
		redial:  make(chan struct{}),
	}
	gate := newDialGate(cfg.Connections)
	p.gate.Store(gate)
	p.lent = make(map[*Dedicated]struct{})
	p.ctx = ctx
	for i := 0; i < cfg.Connections; i++ {
		c := newConn(p, i)
		c.gate.Store(gate)
		p.conns = append(p.conns, c)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			c.run(ctx)
		}()
	}
	if (cfg.StallDivert > 0 || cfg.BacklogDivert > 0) && cfg.Setup == nil && cfg.OnPush == nil {
		for i := 0; i < cfg.Connections; i++ {
			c := newConn(p, cfg.Connections+i)
			c.isSpare = true
			p.spares = append(p.spares, &spare{c: c})
		}
	}
	p.all = slices.Clip(p.conns)
	for _, sp := range p.spares {
		p.all = append(p.all, sp.c)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.watch(ctx)
	}()
	if cfg.Sentinel != nil {
		cfg.Sentinel.register(p)
	}
	if cfg.Follow != nil {
		cfg.Follow.register(p)
	}
	return p, nil
}

// Do sends the batch on one of the pool's connections and waits for every
// reply. When no connection is up, every command gets the
// "upstream unavailable" error at once.
func (p *Pool) Do(b *Batch) {
	p.Send(b)
	b.Wait()
}

// Send queues the batch on one of the pool's connections (or fails it at
// once when none is up) without waiting: the caller must call b.Wait.
func (p *Pool) Send(b *Batch) {
	p.awaitHold()
	b.replies = b.replies[:0]
	b.replyEnds = b.replyEnds[:0]
	if reason, ok := p.awaitDrains(); !ok {
		b.fail(unavailable(reason))
		return
	}
	reason, ok := p.trySend(b)
	if !ok {
		reason, ok = p.retryAfterDials(func() (string, bool) { return p.trySend(b) })
	}
	if !ok {
		b.fail(unavailable(reason))
	}
}

// retryAfterDials calls send again after the dials of the pool's gate
// (awaitDial), and once more after those of the gate that replaced it
// meanwhile, if one did (a new master's, while the old one's dials were
// waited for). It returns send's last result.
func (p *Pool) retryAfterDials(send func() (string, bool)) (string, bool) {
	var reason string
	var waited *dialGate
	for range 2 {
		g := p.gate.Load()
		if g == waited {
			break
		}
		waited = g
		p.awaitDialOn(g)
		var ok bool
		if reason, ok = send(); ok {
			return "", true
		}
	}
	return reason, false
}

// trySend queues b on the first connection that is up, starting from the
// next in turn, or returns why none is.
func (p *Pool) trySend(b *Batch) (string, bool) {
	n := uint32(len(p.conns))
	start := p.next.Add(1)
	if p.diverting.Load() && p.sendAround(b, start) {
		return "", true
	}
	if len(p.spares) > 0 && p.cfg.BacklogDivert > 0 && p.sendAroundBacklog(b, start) {
		return "", true
	}
	var reason string
	for i := uint32(0); i < n; i++ {
		c := p.conns[(start+i)%n]
		if r, ok := c.send(b); ok {
			return "", true
		} else if reason == "" {
			reason = r
		}
	}
	return reason, false
}

// sendAround queues b on a connection that is not stalled (StallDivert):
// one of conns, else a spare, started here the first time. It reports
// false when every one that is up is stalled (b then waits behind one).
func (p *Pool) sendAround(b *Batch, start uint32) bool {
	n := uint32(len(p.conns))
	for i := uint32(0); i < n; i++ {
		c := p.conns[(start+i)%n]
		if c.stalled.Load() {
			continue
		}
		if _, ok := c.send(b); ok {
			p.metrics.diverted.stall.Inc()
			return true
		}
	}
	for _, sp := range p.spares {
		up := sp.start(p)
		if sp.c.stalled.Load() {
			continue
		}
		if !sp.c.up() {
			// Dialled at the stall (watch): waiting for it beats waiting
			// behind the stalled request for as long as it holds. But only
			// for the dial's own time: a spare not up by then (Redis hung,
			// not paused, accepts the connection and answers nothing) is
			// not waited for again by every later batch.
			wait := time.Duration(sp.dialBy.Load() - p.cfg.Now().UnixNano())
			if wait <= 0 {
				continue
			}
			closedWithin(up, wait)
		}
		if _, ok := sp.c.send(b); ok {
			p.metrics.diverted.stall.Inc()
			return true
		}
	}
	return false
}

// sendAroundBacklog queues b, when it is small and the connection next in
// turn holds a backlog (Config.BacklogDivert), on a connection whose
// backlog stays under the mark with b: one of conns, else a spare, started
// here the first time but not waited for. It reports false when b is to
// go to the connection next in turn.
func (p *Pool) sendAroundBacklog(b *Batch, start uint32) bool {
	n := uint32(len(p.conns))
	limit := int64(p.cfg.BacklogDivert)
	if p.conns[start%n].backlog.Load() < limit {
		return false
	}
	size := int64(b.expectedBytes())
	if size*16 > limit {
		return false // a large batch is the backlog's kind: it waits its turn
	}
	p.backlogged.Store(true)
	for i := uint32(1); i < n; i++ {
		c := p.conns[(start+i)%n]
		if c.stalled.Load() || c.backlog.Load()+size >= limit {
			continue
		}
		if _, ok := c.send(b); ok {
			p.metrics.diverted.backlog.Inc()
			return true
		}
	}
	for _, sp := range p.spares {
		sp.start(p)
		if sp.c.stalled.Load() || sp.c.backlog.Load()+size >= limit {
			continue
		}
		if _, ok := sp.c.send(b); ok { // fails while the spare is dialled
			p.metrics.diverted.backlog.Inc()
			return true
		}
	}
	return false
}

// spare is a connection batches go to while the pool's shared ones are
// stalled or hold backlogs: started at a stall or at the first batch sent
// around a backlog, stopped once the pool has been quiet (neither) for
// spareQuiet with nothing waiting on it.
type spare struct {
	c *conn

	// dialBy is when the running spare's first dial times out (unix
	// nanos): batches wait for it to come up until then, not after.
	dialBy atomic.Int64

	mu   sync.Mutex
	stop context.CancelFunc // nil: not running
	done chan struct{}      // closed when the last run has returned
}

// spareQuiet is how long the pool must have had no stalled connection,
// and sent no batch around a backlog, before its spares are closed.
const spareQuiet = time.Second

// start runs the spare's connection if it is not running, and returns a
// channel closed once it is first up.
func (sp *spare) start(p *Pool) <-chan struct{} {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.stop == nil && p.ctx.Err() == nil {
		if sp.done != nil {
			<-sp.done // the last run, stopped, is returning: one at a time
		}
		ctx, cancel := context.WithCancel(p.ctx)
		sp.stop, sp.done = cancel, make(chan struct{})
		sp.c.firstUp = make(chan struct{}) // before run, which closes it
		sp.dialBy.Store(p.cfg.Now().Add(p.cfg.DialTimeout).UnixNano())
		done := sp.done
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer close(done)
			sp.c.run(ctx)
		}()
	}
	return sp.c.firstUp
}

// stopIfIdle closes the spare's connection if it runs and nothing waits on
// it. The check and the close are one step under the connection's lock,
// so that no batch is queued in between (send) only to fail with it.
func (sp *spare) stopIfIdle() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.stop == nil {
		return
	}
	c := sp.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head < len(c.inflight) || c.draining {
		return
	}
	sp.stop()
	sp.stop = nil
	c.closeLocked("spare no longer needed")
}

// awaitDial waits, within Config.Timeout, until a connection is up
// or every dial of the pool's gate has finished, when that has not
// happened yet. The caller, whose send failed, tries once more either
// way: the dial may have ended between its send and this check, and the
// send then read the reason from before it ("connecting").
func (p *Pool) awaitDial() { p.awaitDialOn(p.gate.Load()) }

// awaitDialOn is awaitDial on gate g.
func (p *Pool) awaitDialOn(g *dialGate) {
	select {
	case <-g.done:
		return
	default:
	}
	p.dialWaiters.Add(1)
	defer p.dialWaiters.Add(-1)
	closedWithin(g.done, p.cfg.Timeout)
}

// closedWithin waits at most d for ch to be closed, and reports whether it was.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// drainLimit bounds a drain (conn.startDrain) in upstream timeouts: a
// connection whose replies have not come by then is closed, and the
// pool's sends go on. Redis stopped that long may then run what timed
// out after what was sent since.
const drainLimit = 10

// drainBegan closes the pool's gate for a connection that starts to drain.
func (p *Pool) drainBegan() {
	p.drainMu.Lock()
	if p.drains.Add(1) == 1 {
		p.drained = make(chan struct{})
	}
	p.drainMu.Unlock()
	p.metrics.draining.Inc()
}

// drainEnded records the end of a connection's drain, and opens the gate
// when it was the last; answered: Redis answered everything that drain
// waited for.
func (p *Pool) drainEnded(answered bool) {
	// Counted before the gate opens, so that what the waiting sends do
	// next sees the drain ended (the drain tests read it then).
	p.metrics.draining.Dec()
	outcome := "closed"
	if answered {
		outcome = "answered"
	}
	p.metrics.drains.WithLabelValues(outcome).Inc()
	p.drainMu.Lock()
	if p.drains.Add(-1) == 0 {
		close(p.drained)
		p.drained = nil
	}
	p.drainMu.Unlock()
}

// awaitDrains waits, within Config.Timeout, while a connection of the
// pool drains the replies of commands that timed out: a command sent
// now must not run before those. It returns false, with the reason for
// the caller's error, when the drain outlasts the wait.
func (p *Pool) awaitDrains() (string, bool) {
	if p.drains.Load() == 0 {
		return "", true
	}
	p.drainMu.Lock()
	ch := p.drained
	p.drainMu.Unlock()
	if ch == nil {
		return "", true
	}
	p.drainWaiters.Add(1)
	defer p.drainWaiters.Add(-1)
	// Close ends every drain (it closes their connections), so this wait
	// ends with it too.
	if closedWithin(ch, p.cfg.Timeout) {
		return "", true
	}
	return fmt.Sprintf("no reply within %v to earlier commands that timed out", p.cfg.Timeout), false
}

// awaitHold waits while the pool's Sentinel holds commands for a
// failover (SentinelConfig.FailoverHold).
func (p *Pool) awaitHold() {
	if s := p.cfg.Sentinel; s != nil {
		s.awaitHold()
	}
}

// joinGate returns the gate a redial starting now reports to: the pool's
// gate while it still waits for dials, else a new one. A command that
// then finds no connection up waits for the redial instead of failing
// at once.
func (p *Pool) joinGate() *dialGate {
	p.gateMu.Lock()
	defer p.gateMu.Unlock()
	g := p.gate.Load()
	select {
	case <-g.done:
		g = newDialGate(0)
		p.gate.Store(g)
	default:
	}
	g.pending.Add(1)
	return g
}

// dialGate is closed once one of its dials has a connection up, or
// every one has finished.
type dialGate struct {
	done    chan struct{}
	once    sync.Once
	pending atomic.Int32
}

func newDialGate(dials int) *dialGate {
	g := &dialGate{done: make(chan struct{})}
	g.pending.Store(int32(dials))
	return g
}

// dialed records the end of one of the gate's dials.
func (g *dialGate) dialed(up bool) {
	if up || g.pending.Add(-1) <= 0 {
		g.open()
	}
}

func (g *dialGate) open() { g.once.Do(func() { close(g.done) }) }

// SendOn is Send on connection h modulo the pool's connections, so that
// batches sent with the same h are written, and run, in the order sent
// (while that connection stays up). The caller must call b.Wait.
func (p *Pool) SendOn(b *Batch, h uint32) {
	p.awaitHold()
	b.replies = b.replies[:0]
	b.replyEnds = b.replyEnds[:0]
	if reason, ok := p.awaitDrains(); !ok {
		b.fail(unavailable(reason))
		return
	}
	c := p.conns[h%uint32(len(p.conns))]
	r, ok := c.send(b)
	if !ok {
		r, ok = p.retryAfterDials(func() (string, bool) { return c.send(b) })
	}
	if !ok {
		b.fail(unavailable(r))
	}
}

// Address is the address the pool dials (with a Sentinel, a name).
func (p *Pool) Address() string { return p.cfg.Address }

// PinPool returns the pool dedicated connections for slot come from: the
// pool itself (a standalone server owns every slot).
func (p *Pool) PinPool(slot int) *Pool { return p }

// Shards returns one slot per shard, for commands that must run on every
// master: a standalone server is one shard.
func (p *Pool) Shards() []int { return []int{SlotAny} }

// Ready reports whether at least one connection is up.
func (p *Pool) Ready() bool {
	for _, c := range p.conns {
		if c.up() {
			return true
		}
	}
	return false
}

// Close stops reconnecting, closes every connection and fails what waits on them.
func (p *Pool) Close() {
	if p.cfg.Sentinel != nil {
		p.cfg.Sentinel.unregister(p)
	}
	if p.cfg.Follow != nil {
		p.cfg.Follow.unregister(p)
	}
	p.cancel()
	p.gate.Load().open()
	p.closeDedicated()
	for _, c := range p.all {
		c.closeWith("proxy shutting down")
	}
	p.wg.Wait()
	for _, c := range p.all {
		p.setStalled(c, false)
	}
}

// watch resets connections whose oldest waiting request has seen no reply
// progress for Config.Timeout, so a stopped or stuck server cannot hang
// clients. With spares (Config.StallDivert) it also marks the connections
// stalled for StallDivert, which Send then goes around, dials the spares
// when every shared connection is stalled, and closes them after
// spareQuiet without a stall or a batch sent around a backlog.
func (p *Pool) watch(ctx context.Context) {
	tick := p.cfg.Timeout / 10
	if len(p.spares) > 0 && p.cfg.StallDivert > 0 {
		tick = min(tick, p.cfg.StallDivert/2)
	}
	tick = min(max(tick, time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.trimIdle(p.cfg.Now())
		now := p.cfg.Now().UnixNano()
		diverting, sharedStalled := false, 0
		// Why connections wait past Timeout (waitProbe) is asked once a
		// tick, not once per connection: against a hung Redis each asking
		// waits, and the last connection's callers with it.
		var probe probeResult
		asked := false
		for i, c := range p.all {
			if d := c.drainingFor(p.cfg.Now()); d > drainLimit*p.cfg.Timeout {
				c.closeWith(fmt.Sprintf("no reply within %v to commands that timed out", d.Round(time.Millisecond)))
			}
			stalled := c.stalledSince(now)
			if len(p.spares) > 0 && p.cfg.StallDivert > 0 && p.setStalled(c, stalled > p.cfg.StallDivert) {
				c.markWaitingStalled()
				diverting = true
				if i < len(p.conns) {
					sharedStalled++
				}
			}
			if stalled <= p.cfg.Timeout {
				continue
			}
			if !asked {
				probe = p.waitProbe(ctx)
				asked = true
			}
			held := probe.held
			if probe.busy {
				// Redis is running a long script (or function) and answers
				// nothing else until it ends or is killed: the connection is
				// not dead, so its callers wait as on Redis. Look again
				// after another timeout.
				c.lastProgress.Store(p.cfg.Now().UnixNano())
				continue
			}
			if addr := c.localAddr(); addr != "" && held[addr] || c.heldBefore.Swap(false) {
				// Redis holds the connection's next command on purpose: a
				// write while writes are paused (CLIENT PAUSE WRITE,
				// FAILOVER). Its callers wait for the pause, as on Redis;
				// once it ends, the reply gets a whole timeout of its own.
				c.heldBefore.Store(held[addr])
				c.lastProgress.Store(p.cfg.Now().UnixNano())
				continue
			}
			p.metrics.errors.WithLabelValues("timeout").Inc()
			reason := fmt.Sprintf("no reply within %v", p.cfg.Timeout)
			if probe.answered {
				// Redis runs and still holds this connection's command: a
				// write pause rproxy may not see (no CLIENT LIST), which
				// runs its writes in the order it took them, or a lost
				// connection. Reset it; the pool's sends need not wait.
				c.closeWith(reason)
				continue
			}
			// Redis runs nothing (stopped, hung, CLIENT PAUSE ALL): what
			// was written runs when it resumes, and must not be overtaken.
			c.startDrain(reason)
		}
		if len(p.spares) == 0 {
			continue // no divert: nothing below to do
		}
		p.diverting.Store(diverting)
		if p.backlogged.Swap(false) {
			diverting = true // for the spares' quiet: a backlog needs them as a stall does
		}
		switch {
		case sharedStalled == len(p.conns):
			for _, sp := range p.spares {
				sp.start(p) // dialled now, up for the next batch
			}
		case diverting:
		case p.quietFrom == 0:
			p.quietFrom = now
		case time.Duration(now-p.quietFrom) > spareQuiet:
			for _, sp := range p.spares {
				sp.stopIfIdle()
			}
		}
		if diverting {
			p.quietFrom = 0
		}
	}
}

// setStalled records whether c is stalled for StallDivert, keeps the
// stalled_connections gauge (shared by every pool of a protocol) in step,
// and returns stalled.
func (p *Pool) setStalled(c *conn, stalled bool) bool {
	if c.stalled.Swap(stalled) != stalled {
		if stalled {
			p.metrics.stalled.Inc()
		} else {
			p.metrics.stalled.Dec()
		}
	}
	return stalled
}

// probeResult is what waitProbe learnt of a Redis that left a connection
// waiting past Timeout.
type probeResult struct {
	// busy: Redis answers -BUSY, running a script or function past its
	// busy threshold, so the connection is stalled behind it, not dead.
	busy bool
	// answered: Redis answered the probe's PING: it runs, so what it
	// holds on the connection it holds on purpose (or the connection
	// itself is lost), not for want of running.
	answered bool
	// held: the local addresses of the connections Redis lists as
	// blocked (flag b): a command Redis holds on purpose, a write while
	// writes are paused (CLIENT PAUSE WRITE, FAILOVER; shared connections
	// carry no blocking command). Empty where the upstream user may not
	// run CLIENT LIST.
	held map[string]bool
}

// waitProbe asks Redis, on a new connection, why a connection waits past
// Timeout for a reply. A stopped or hung Redis, or one paused for every
// command (CLIENT PAUSE ALL), answers nothing within the probe's wait:
// none of probeResult's answers, and its connections still time out
// close to Timeout.
func (p *Pool) waitProbe(ctx context.Context) probeResult {
	res := probeResult{held: map[string]bool{}}
	wait := min(p.cfg.DialTimeout, max(p.cfg.Timeout/4, 50*time.Millisecond))
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	nc, err := p.dial(ctx)
	if err != nil {
		return res
	}
	defer nc.Close()
	deadline := p.cfg.Now().Add(wait)
	p.cfg.Own.note(nc, pingCmd)
	if err := handshake(nc, deadline, pingCmd); err != nil {
		var e *errorReply
		if errors.As(err, &e) {
			res.busy = bytes.HasPrefix(e.reply, []byte("-BUSY "))
			// Any other error reply (NOPERM, max clients) is an answer too.
			res.answered = !res.busy
		}
		return res
	}
	res.answered = true
	p.cfg.Own.note(nc, clientListCmd)
	reply, err := roundTrip(nc, deadline, clientListCmd)
	if err != nil {
		return res
	}
	v, err := resp.Parse(reply)
	if err != nil {
		return res
	}
	for _, line := range strings.Split(strings.TrimPrefix(string(v.Str), "txt:"), "\n") {
		var addr, flags string
		for _, f := range strings.Fields(line) {
			if a, ok := strings.CutPrefix(f, "addr="); ok {
				addr = a
			} else if fl, ok := strings.CutPrefix(f, "flags="); ok {
				flags = fl
			}
		}
		if addr != "" && strings.Contains(flags, "b") {
			res.held[addr] = true
		}
	}
	return res
}

var pingCmd = resp.AppendCommandString(nil, "PING")

// HasConn reports whether addr is the local address of one of the pool's
// shared connections or spares: the address Redis lists it by (CLIENT
// LIST, MONITOR).
func (p *Pool) HasConn(addr string) bool {
	for _, c := range p.all {
		if c.localAddr() == addr {
			return true
		}
	}
	return false
}

// masterChanged moves the pool to a new master (Sentinel): shared
// connections are closed and redialled at once, commands that find none
// up meanwhile wait for those dials (the gate), idle dedicated ones are
// dropped, and lent ones are broken, so a pinned session ends as on any
// connection loss. What was written to the old master and waits for its
// reply fails with reason.
func (p *Pool) masterChanged(reason string) {
	gate := newDialGate(len(p.conns))
	p.gateMu.Lock()
	old := p.gate.Swap(gate)
	p.gateMu.Unlock()
	old.open()
	for _, c := range p.conns {
		c.gate.Store(gate)
	}
	for _, c := range p.all {
		c.redialNow.Store(true)
	}
	p.redialMu.Lock()
	close(p.redial) // for connections already waiting in their backoff
	p.redial = make(chan struct{})
	p.redialMu.Unlock()
	for _, c := range p.all {
		c.closeWith(reason)
	}
	p.closeDrains()
	p.dmu.Lock()
	lent := make([]*Dedicated, 0, len(p.lent))
	for d := range p.lent {
		lent = append(lent, d)
	}
	p.dropIdle()
	p.dmu.Unlock()
	for _, d := range lent {
		d.Interrupt()
	}
}

// backoff sleeps d, or less if the master changes meanwhile; it reports
// false when ctx ends.
func (p *Pool) backoff(ctx context.Context, d time.Duration) bool {
	p.redialMu.Lock()
	redial := p.redial
	p.redialMu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-redial:
	}
	return true
}

var roleCmd = resp.AppendCommandString(nil, "ROLE")

// confirmMaster asks a new connection's server for its ROLE: with a
// Sentinel, a connection must reach the master, not a replica (a master
// demoted by a failover the Sentinel has not told of yet).
func (p *Pool) confirmMaster(nc net.Conn) error {
	p.cfg.Own.note(nc, roleCmd)
	r, err := roundTrip(nc, p.cfg.Now().Add(p.cfg.DialTimeout), roleCmd)
	if roleUnknown(err) {
		// The user may not run ROLE (an application user of auth.mode
		// passthrough, whose ACL Redis applies), or Redis is busy with a
		// long script (a spare or a pin dialled meanwhile, the stall
		// probe): the address the Sentinels name is taken as it is, as a
		// client of Redis would take it.
		return nil
	}
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if !isMasterRole(r) {
		p.cfg.Sentinel.Check()
		return fmt.Errorf("ROLE: %s is not the master (%q)", nc.RemoteAddr(), truncate(r, 40))
	}
	return nil
}

// followRole asks a new connection's server for its ROLE, for
// Config.Follow: whether the address has answered as a master. A ROLE
// refused (an ACL without it) tells nothing.
func (p *Pool) followRole(nc net.Conn) error {
	p.cfg.Own.note(nc, roleCmd)
	r, err := roundTrip(nc, p.cfg.Now().Add(p.cfg.DialTimeout), roleCmd)
	if roleUnknown(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	p.cfg.Follow.noteRole(r)
	return nil
}
