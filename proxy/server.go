package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/internal/idlepoll"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// Server is the proxy: a RESP listener for clients and the upstream pools
// their commands ride on.
type Server struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	chain   chain // the request path's stages (chain.go)

	// pools[2] and pools[3] are the shared connections of each protocol.
	pools     poolSet
	metricsUp *upstream.Metrics
	authing   *authenticating // the auth stage, with passthrough's user pools (auth.go)

	coalescing *coalescing       // nil: off (coalescing.go)
	sendSeq    *atomic.Uint64    // numbers upstream writes, shared by all pools
	hot        *tier.Engine      // nil: hot-key detection off
	tiering    *tiering          // the tier's stage; nil when hot is (tiering.go)
	cluster    *upstream.Cluster // the shared pools' cluster (nil: standalone)
	salting    *salting          // nil: salted fan-out off (salting.go)
	routing    *routing          // nil: not a cluster upstream (cluster.go)
	facade     *facade           // the CLUSTER commands rproxy answers; nil when routing is (facade.go)
	stream     *clusterStream    // stream mode beyond the pin on a cluster (streamcluster.go)
	clientCmds *clientCommands   // CLIENT LIST, KILL, UNBLOCK, TRACKING REDIRECT (clientcmd.go)

	idle      *idlepoll.Poller // parked idle clients (park.go); nil: none parked
	parkAfter time.Duration    // Config.IdleParkAfter, resolved
	// stopParkSweep ends parkSweep (Shutdown).
	stopParkSweep chan struct{}
	stopParkOnce  sync.Once
	parks         atomic.Int64 // parkings since the last release of their memory (park.go)
	lastPark      atomic.Int64 // when the last client parked (Unix ns)

	policing *policing   // the policy's stage (policy.go)
	pauses   *pauseWatch // CLIENT PAUSE sent through rproxy (pausewatch.go)
	reqLog   atomic.Bool // log every client batch at debug (SetRequestLog)

	table    atomic.Pointer[command.Table]
	calls    atomic.Pointer[callCounters] // for the current table
	commands *commandTable                // keeps table in step with Redis's (commandtable.go)

	ln       *drainListener // set by Serve, under mu
	nextID   atomic.Int64
	clients  atomic.Int64
	draining atomic.Bool

	started   time.Time
	slow      *slowLog // nil: off
	limits    atomic.Pointer[Limits]
	clock     func() time.Time // millisecond clock, cheap to read (coarse.now)
	coarse    *coarseClock
	stopClock context.CancelFunc
	mu        sync.Mutex    // guards ln and idle, and Shutdown against Serve
	sessions  sessionSet    // every client's session (sessionset.go)
	served    chan struct{} // closed when serve returns
}

// New validates cfg, starts the upstream pools (connecting in the
// background) and returns a Server ready to Serve.
func New(cfg Config, reg prometheus.Registerer, log *zap.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.TableRetry <= 0 {
		cfg.TableRetry = time.Second
	}
	if cfg.TableCheck == 0 {
		cfg.TableCheck = time.Minute
	}
	// One send sequence for every pool, user pools included, so sends and
	// acknowledgements can be ordered (coalescing's inflight window).
	cfg.Upstream.SendSeq = new(atomic.Uint64)
	// One record of rproxy's own commands (handshakes, resets), which
	// MONITOR hides (monitorLines).
	cfg.Upstream.Own = upstream.NewOwnCommands(cfg.Upstream.Now)
	if cfg.FollowMaster && cfg.Cluster == nil && cfg.Upstream.Sentinel == nil {
		cfg.Upstream.Follow = upstream.NewMasterFollow(log.Named("upstream"), cfg.FollowEvery)
	}
	s := &Server{
		cfg:     cfg,
		log:     log,
		metrics: newMetrics(reg),
		served:  make(chan struct{}),
		started: time.Now(),
	}
	if cfg.SlowLogThreshold > 0 {
		s.slow = &slowLog{max: cfg.SlowLogLen}
	}
	lim := cfg.Limits
	s.limits.Store(&lim)
	s.commands = &commandTable{table: &s.table, calls: &s.calls, retry: cfg.TableRetry, check: cfg.TableCheck,
		fromServer: s.metrics.tableFromServer, log: log, ask: func(b *upstream.Batch) { s.pools[2].Do(b) }}
	s.commands.set(command.Builtin())
	s.reqLog.Store(cfg.LogRequests)
	s.sendSeq = cfg.Upstream.SendSeq
	var onTick func()
	if cfg.Coalesce != nil && len(cfg.Coalesce.Commands) > 0 {
		s.coalescing, onTick = newCoalescing(*cfg.Coalesce, &s.pools, reg)
		cfg.Upstream.GatherProgress = s.coalescing.group.Joins
		s.cfg.Upstream.GatherProgress = s.coalescing.group.Joins
	}
	clockCtx, stopClock := context.WithCancel(context.Background())
	s.coarse = newCoarseClock(clockCtx, time.Millisecond, onTick)
	s.clock = s.coarse.now
	s.authing = &authenticating{users: cfg.Users, passthrough: cfg.AuthPassthrough, upstream: s.cfg.Upstream,
		failures: s.metrics.authFailures, log: log, clock: s.clock, checker: newAuthChecker(s.cfg.Upstream),
		draining: &s.draining, newPools: s.newPoolSet, sessionsOn: s.sessions.on, flush: s.flush}
	summaryDone := connSummary{metrics: s.metrics, open: &s.clients, log: log}.start(clockCtx, cfg.ConnSummaryEvery)
	s.stopClock = func() { stopClock(); <-summaryDone } // the last summary line is written
	s.metricsUp = upstream.NewMetrics(reg)
	if err := s.newPoolSet(&s.pools, cfg.Upstream); err != nil {
		s.closePools()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if s.cluster != nil && reg != nil {
		reg.MustRegister(s.cluster.MasterCollector())
	}
	if sen := cfg.Upstream.Sentinel; sen != nil && reg != nil {
		reg.MustRegister(sen.Collector())
	}
	s.pauses = &pauseWatch{clock: s.clock}
	s.policing = &policing{metrics: policy.NewMetrics(reg), log: s.log, table: &s.table,
		cluster: cfg.Cluster != nil, timeout: cfg.Upstream.Timeout, flush: s.flush, deny: s.deny}
	if cfg.Policy != nil {
		if err := s.SetPolicy(*cfg.Policy); err != nil {
			s.closePools()
			return nil, fmt.Errorf("proxy: %w", err)
		}
	}
	var salted *salt.Engine
	if cfg.Salt != nil {
		var err error
		if salted, err = salt.New(*cfg.Salt, s.cluster, s.clock, reg, log.Named("salt")); err != nil {
			s.closePools()
			return nil, fmt.Errorf("proxy: salted fan-out: %w", err)
		}
	}
	if cfg.HotKey != nil {
		hot, err := tier.New(*cfg.HotKey, tier.Deps{
			Upstream: cfg.Upstream, Cluster: cfg.Cluster, Coarse: s.clock,
			RESP2:           s.pools[2], // RESP2 reads of command fills (tiering.go)
			UpstreamMetrics: s.metricsUp, Registry: reg, Log: log.Named("hotkey"),
		})
		if err != nil {
			s.closePools()
			return nil, fmt.Errorf("proxy: hot keys: %w", err)
		}
		s.hot = hot
		s.tiering = newTiering(hot, &s.pools, cfg.Cluster != nil)
		if salted != nil && hot.Clustered() {
			hot.OnKey(salted.OriginWritten)
			hot.OnFlush(salted.FlushSeen)
		}
	}
	if salted != nil {
		s.salting = &salting{engine: salted, tier: s.hot, coalescing: s.coalescing, shared: &s.pools, pauses: s.pauses}
	}
	if s.cluster != nil {
		s.facade = &facade{cluster: s.cluster, announceAddr: cfg.ClusterAnnounce, tls: cfg.TLS != nil, refuseMsg: s.refuseMsg}
		s.routing = &routing{cluster: s.cluster, table: &s.table, replicaPrefixes: cfg.ReplicaReadPrefixes,
			passthrough: cfg.AuthPassthrough, salting: s.salting, scripts: newLoadedScripts(s.clock), facade: s.facade, pin: s.pinSession, flush: s.flush, refuse: s.refuseMsg, ownCommand: s.ownCommand, randN: rand.IntN}
	}
	s.clientCmds = &clientCommands{sessions: &s.sessions, users: cfg.Users, cluster: cfg.Cluster != nil, pools: &s.pools, clock: s.clock}
	s.stream = s.newClusterStream()
	s.clientCmds.stream = s.stream
	s.chain = s.newChain()
	s.commands.start()
	return s, nil
}

// Serve accepts clients on ln until Shutdown. It returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.TLS != nil {
		// Under the drain listener and limitedConn, so that the read loop,
		// the limits and the session read and write the *tls.Conn.
		maxClients := func() int64 { return int64(s.limits.Load().MaxClients) }
		ln = newTLSListener(ln, s.cfg.TLS, s.cfg.TLSHandshakeTimeout, maxClients, s.refuseTLS)
	}
	dl := newDrainListener(ln, func(c net.Conn) net.Conn {
		lc := &limitedConn{Conn: c, limits: &s.limits, clock: s.clock}
		if tc, ok := c.(*net.TCPConn); ok {
			if lc.raw, _ = tc.SyscallConn(); lc.raw != nil { // nil on error: reads hold a buffer
				lc.w.Init(lc.raw)
				lc.inq.Enable(lc.raw)
				lc.poller = s.idle
			}
		}
		return lc
	})
	s.mu.Lock()
	if s.draining.Load() || s.ln != nil {
		s.mu.Unlock()
		ln.Close()
		return errors.New("proxy: Serve after Shutdown or a second Serve")
	}
	s.ln = dl
	if s.parkAfter = s.cfg.IdleParkAfter; s.parkAfter == 0 {
		s.parkAfter = defaultIdleParkAfter
	}
	if s.parkAfter > 0 {
		// Parking idle clients (park.go); without a poller, each keeps its
		// goroutine.
		if p, err := idlepoll.New(); err == nil {
			s.idle = p
			s.stopParkSweep = make(chan struct{})
			go s.parkSweep(s.stopParkSweep)
		} else if !errors.Is(err, idlepoll.ErrUnsupported) {
			s.log.Warn("idle clients keep their goroutine: no idle poller", zap.Error(err))
		}
	}
	s.mu.Unlock()
	s.log.Info("listening", zap.String("addr", ln.Addr().String()), zap.Bool("tls", s.cfg.TLS != nil),
		zap.Bool("client_certs", s.cfg.TLS != nil && s.cfg.TLS.ClientAuth != tls.NoClientCert))
	defer close(s.served)
	return s.serveClients(dl)
}

// refuseTLS logs and counts a client closed before or during its TLS
// handshake (it never became a session).
func (s *Server) refuseTLS(c net.Conn, reason string, err error) {
	s.metrics.rejected.WithLabelValues("tls_handshake").Inc()
	fields := []zap.Field{zap.String("client", c.RemoteAddr().String())}
	if err != nil {
		fields = append(fields, zap.Error(err))
	}
	s.log.Warn("client closed: "+reason, fields...)
}

// ListenAndServe listens on Config.Listen and serves.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy: listen: %w", err)
	}
	return s.Serve(ln)
}

// SetLimits changes the client limits at once, for connected clients too:
// the input limits for the bytes each client sends next, the client write
// timeout from its next write, the idle timeout now (one idle longer than a
// lowered timeout is closed now). Connections over a lowered max_clients
// stay connected.
func (s *Server) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	old := s.limits.Swap(&l)
	if old.IdleTimeout != l.IdleTimeout {
		s.sessions.each(func(ss *session) {
			if lc, ok := ss.conn.NetConn().(*limitedConn); ok {
				lc.setIdle(l.IdleTimeout)
			}
		})
	}
	return nil
}

// SetHotKeys changes the hot-key detector and the local tier while clients
// are served: threshold, window, top_k, the tier's budget and TTL cap,
// prefixes, max lag, and the tier on or off. On error nothing changes.
// Turning on a tier that was off at start is refused (its tracking
// connection is made at start), as is any change when detection was off
// at start; TrackingDial is not changed.
func (s *Server) SetHotKeys(cfg tier.Config) error {
	if s.hot == nil {
		return errors.New("proxy: hot-key detection was off at start: turning it on needs a restart")
	}
	if err := s.hot.Set(cfg); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// UpstreamTraffic is what the upstream connections carried since start:
// the procs governor's signal, read without gathering the registry.
func (s *Server) UpstreamTraffic() (upstream.Traffic, error) { return s.metricsUp.Traffic() }

// SetRequestLog turns request logging on or off from the next client batch
// on: every batch is logged at debug level (so only when the logger's level
// lets debug through) with the client's address, session id, command names
// (never arguments or values), count, duration and outcome. Off, it costs
// one atomic load per batch.
func (s *Server) SetRequestLog(on bool) { s.reqLog.Store(on) }

// HotKeyConfig returns the hot-key settings in force (false when hot-key
// detection is off).
func (s *Server) HotKeyConfig() (tier.Config, bool) {
	if s.hot == nil {
		return tier.Config{}, false
	}
	return s.hot.Config(), true
}

// HotKeys returns the keys currently detected as hot, highest rate first
// (nil when detection is off).
func (s *Server) HotKeys() []hotkey.HotKey {
	if s.hot == nil {
		return nil
	}
	return s.hot.HotKeys()
}

// TierStats returns the local tier's figures, and false when it is off.
func (s *Server) TierStats() (hotkey.TierStats, bool) {
	if s.hot == nil {
		return hotkey.TierStats{}, false
	}
	return s.hot.Stats()
}

// Ready reports whether the upstream is reachable and the command table has
// been loaded from it.
func (s *Server) Ready() bool {
	return s.commands.loaded.Load() && s.pools[2].Ready()
}

// Shutdown stops accepting, lets every in-flight batch's replies reach its
// client (closing each client once its batch is written), waits up to
// Config.ShutdownDrain (or ctx), then closes what is left and the upstream.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		ln.stopAccepting()
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownDrain)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	var err error
	for {
		// Idle sessions are closed now; busy ones close themselves after
		// writing their replies.
		left := 0
		s.sessions.each(func(ss *session) {
			left++
			ss.closeIfIdle()
		})
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("proxy: shutdown drain: %d clients still busy: %w", left, ctx.Err())
		case <-t.C:
			continue
		}
		break
	}
	if ln != nil {
		ln.release()
		<-s.served
	}
	s.commands.close()
	s.closePools()
	if s.idle != nil {
		s.stopParkOnce.Do(func() { close(s.stopParkSweep) }) // Shutdown may be called again
		s.idle.Close()                                       // the clients it held are closed (serveClients)
	}
	return err
}

// backend is where a session's shared-connection commands go: one Redis
// server (upstream.Pool) or a Redis Cluster (upstream.Router).
type backend interface {
	Do(b *upstream.Batch)
	Ready() bool
	Close()
	// PinPool is the pool a session needing a dedicated connection for a
	// command on slot takes it from (upstream.SlotAny: no key).
	PinPool(slot int) *upstream.Pool
	// Shards returns a slot of each master, for commands all must run.
	Shards() []int
}

// poolSet holds the shared connections of each protocol: [2] and [3].
type poolSet [4]backend

func (s *Server) newPoolSet(ps *poolSet, ucfg upstream.Config) error {
	if s.cfg.Cluster != nil {
		ccfg := *s.cfg.Cluster
		if ps != &s.pools {
			ccfg.MapVia = s.cluster // a client's user may not run CLUSTER SHARDS
		}
		c, err := upstream.NewCluster(ucfg, ccfg, s.metricsUp, s.log.Named("upstream"))
		if err != nil {
			return err
		}
		ps[2], ps[3] = c.Router(2), c.Router(3)
		if ps == &s.pools {
			s.cluster = c
		}
		return nil
	}
	for _, proto := range []int{2, 3} {
		ucfg.Protocol = proto
		p, err := upstream.NewPool(ucfg, s.metricsUp, s.log.Named("upstream"))
		if err != nil {
			return err
		}
		ps[proto] = p
		if s.sentinelReplicaReads() {
			ps[proto] = upstream.NewReplicaRouter(p, ucfg.Sentinel, ucfg, s.metricsUp, s.log.Named("upstream"))
		}
	}
	return nil
}

func (s *Server) closePools() {
	if s.hot != nil {
		s.hot.Close()
	}
	s.stopClock()
	s.authing.checker.close()
	sets := append([]*poolSet{&s.pools}, s.authing.closeUserPools()...)
	for _, ps := range sets {
		for _, p := range ps {
			if p != nil {
				p.Close()
			}
		}
	}
	if s.salting != nil {
		s.salting.engine.Close() // its fills failed with the connections
	}
}

func (s *Server) accept(c *clientConn) bool {
	if s.draining.Load() {
		return false
	}
	maxClients := s.limits.Load().MaxClients
	if s.clients.Add(1) > int64(maxClients) {
		s.clients.Add(-1)
		s.metrics.rejected.WithLabelValues("max_clients").Inc()
		s.log.Warn("client refused: max clients reached", zap.String("client", c.RemoteAddr()), zap.Int("max_clients", maxClients))
		nc := c.NetConn()
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write([]byte("-ERR max number of clients reached\r\n"))
		return false
	}
	ss := newSession(s.nextID.Add(1), c, &s.pools, s.cfg.Users == nil)
	c.ss = ss
	s.sessions.add(ss)
	s.metrics.clients.Inc()
	s.metrics.accepted.Inc()
	s.log.Debug("client connected", zap.String("client", c.RemoteAddr()), zap.Int64("id", ss.id)) // info: the summary (connlog.go)
	return true
}

func (s *Server) closed(c *clientConn, err error) {
	ss := c.ss
	if s.salting != nil {
		// Before the session leaves the set, which Shutdown waits on to
		// close the connections these deletions use.
		s.salting.transactionGone(ss)
		s.salting.streamWritesGone(ss)
	}
	s.sessions.remove(ss)
	// A client gone mid-transaction, mid-watch or in another database takes
	// its pinned connection with it, as its own connection would end.
	s.unpin(ss, true)
	ss.dropKept()
	ss.dropBranches()
	s.clients.Add(-1)
	s.metrics.clients.Dec()
	fields := []zap.Field{zap.String("client", c.RemoteAddr()), zap.Int64("id", ss.id)}
	if ss.lastCmd != "" {
		fields = append(fields, zap.String("last_command", ss.lastCmd))
	}
	var le *limitError
	var ne net.Error
	lc, _ := c.NetConn().(*limitedConn)
	switch {
	case lc != nil && lc.idleTimedOut.Load() && !ss.writeTimedOut.Load():
		s.metrics.rejected.WithLabelValues("idle").Inc()
		s.log.Debug("client closed: idle timeout", fields...)
	case ss.writeTimedOut.Load() || (errors.As(err, &ne) && ne.Timeout()):
		// Reads time out only on the idle deadline: this was a write's.
		s.metrics.rejected.WithLabelValues("write_timeout").Inc()
		s.log.Warn("client closed: its replies could not be written within limits.client_write_timeout (it stopped reading)", fields...)
	case errors.As(err, &le):
		s.metrics.rejected.WithLabelValues("input_limit").Inc()
		s.log.Warn("client closed: "+le.reason, fields...)
	case err != nil && !errors.Is(err, net.ErrClosed):
		s.log.Debug("client disconnected", append(fields, zap.Error(err))...)
	default:
		s.log.Debug("client disconnected", fields...)
	}
}
