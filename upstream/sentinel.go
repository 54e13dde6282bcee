package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/resp"
)

// SentinelConfig says how to find a master through Redis Sentinel.
type SentinelConfig struct {
	MasterName string   // the name the Sentinels monitor the master under
	Addresses  []string // the Sentinels (host:port), asked in order
	// Username and Password authenticate to the Sentinels themselves
	// (their requirepass or ACL user), not to the master; empty Password
	// means none.
	Username string
	Password string
	// Credentials, when set, stand for Username and Password: a reload
	// may change them, for the Sentinel connections dialled after.
	Credentials *Credentials
	// TLS, when not nil, wraps every connection to a Sentinel in TLS.
	TLS *tls.Config
	// TLSRoots is Config.TLSRoots, for the connections to the Sentinels.
	TLSRoots    func() *x509.CertPool
	DialTimeout time.Duration // bound on a Sentinel's dial plus reply; 0 means 1s
	// Check is how often the master's address is asked again besides the
	// +switch-master subscription; 0 means 1s.
	Check time.Duration
	// FailoverHold: from a Sentinel's +failover-state-send-slaveof-noone
	// (the failover's leader is about to promote a replica) until the
	// +switch-master, at most this long, commands wait instead of going
	// to the old master, where a write after the promotion would be
	// acknowledged and then lost when it becomes a replica. 0: no hold.
	FailoverHold time.Duration
	// Replicas: each check also asks for the master's healthy replicas
	// (SENTINEL REPLICAS), for reads that may go to one (ReplicaRouter).
	Replicas bool

	Now  func() time.Time                                                     // nil means time.Now
	Dial func(ctx context.Context, network, address string) (net.Conn, error) // nil means a net.Dialer
}

// Validate reports every problem with c.
func (c SentinelConfig) Validate() error {
	var errs []error
	if c.MasterName == "" {
		errs = append(errs, errors.New("upstream: sentinel master name is empty"))
	}
	if len(c.Addresses) == 0 {
		errs = append(errs, errors.New("upstream: sentinel mode needs at least one Sentinel address"))
	}
	if c.DialTimeout < 0 || c.Check < 0 || c.FailoverHold < 0 {
		errs = append(errs, fmt.Errorf("upstream: sentinel timeouts must not be negative (dial %v, check %v, failover hold %v)", c.DialTimeout, c.Check, c.FailoverHold))
	}
	return errors.Join(errs...)
}

// Sentinel follows the master of a Redis Sentinel group: it asks the
// Sentinels for the master's address (SENTINEL GET-MASTER-ADDR-BY-NAME),
// listens for +switch-master on each of them, and asks again every Check.
// Pools whose Config.Sentinel is set dial the address it holds, confirm
// with ROLE that they reached a master, and are reset when it changes.
// During a failover they hold their commands (SentinelConfig.FailoverHold).
type Sentinel struct {
	cfg SentinelConfig
	log *zap.Logger

	master    atomic.Pointer[string]       // "host:port"; "" while unknown
	replicas  atomic.Pointer[[]string]     // healthy replicas of master (Config.Replicas), as last asked
	lastErr   atomic.Pointer[string]       // why the last ask failed ("" after a success)
	failovers atomic.Int64                 // master changes seen
	gen       atomic.Uint64                // counts changes of master, so a dial or a query can tell it raced one
	setMu     sync.Mutex                   // makes a change of master and its gen one step
	changedAt atomic.Int64                 // unix nanos of the last change (cfg.Now), 0 if none
	hold      atomic.Pointer[failoverHold] // the failover commands wait for, nil when none
	holds     atomic.Int64                 // holds begun
	holdsOut  atomic.Int64                 // holds that ended at FailoverHold with no new master
	held      atomic.Int64                 // sends waiting in a hold now

	mu    sync.Mutex
	pools map[*Pool]struct{}

	trigger chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// NewSentinel validates cfg, asks the Sentinels for the master once (so a
// proxy starting with them up knows it at once) and keeps following it in
// the background until Close.
func NewSentinel(cfg SentinelConfig, log *zap.Logger) (*Sentinel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = time.Second
	}
	if cfg.Check == 0 {
		cfg.Check = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Sentinel{cfg: cfg, log: log.With(zap.String("master_name", cfg.MasterName)),
		pools: make(map[*Pool]struct{}), trigger: make(chan struct{}, 1)}
	empty := ""
	s.master.Store(&empty)
	s.replicas.Store(&[]string{})
	s.lastErr.Store(&empty) // so the first failure is logged at warn
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.resolve(ctx)
	s.wg.Add(1 + len(cfg.Addresses))
	go func() {
		defer s.wg.Done()
		s.checkLoop(ctx)
	}()
	for _, addr := range cfg.Addresses {
		go func() {
			defer s.wg.Done()
			s.subscribeLoop(ctx, addr)
		}()
	}
	return s, nil
}

// Master is the master's address as last learnt, "" while unknown.
func (s *Sentinel) Master() string { return *s.master.Load() }

// Name is the monitored master's name.
func (s *Sentinel) Name() string { return s.cfg.MasterName }

// Failovers is how many times the master's address has changed.
func (s *Sentinel) Failovers() int64 { return s.failovers.Load() }

// SinceChange is how long ago the master last changed, and false if it
// never has.
func (s *Sentinel) SinceChange() (time.Duration, bool) {
	at := s.changedAt.Load()
	if at == 0 {
		return 0, false
	}
	return s.cfg.Now().Sub(time.Unix(0, at)), true
}

// LastError is why the last question to the Sentinels failed, "" if it
// did not.
func (s *Sentinel) LastError() string { return *s.lastErr.Load() }

// Check asks the Sentinels again soon (a connection found a replica
// where the master was).
func (s *Sentinel) Check() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Close stops following the master.
func (s *Sentinel) Close() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.endHold(s.hold.Load(), false)
	})
}

// failoverHold is one failover's hold on commands: done is closed when
// it ends.
type failoverHold struct {
	done chan struct{}
}

// awaitHold waits while a failover holds commands.
func (s *Sentinel) awaitHold() {
	if h := s.hold.Load(); h != nil {
		s.held.Add(1)
		<-h.done
		s.held.Add(-1)
	}
}

// beginHold holds commands (SentinelConfig.FailoverHold) until the
// master changes, the failover is aborted, or FailoverHold passes.
func (s *Sentinel) beginHold(via string) {
	if s.cfg.FailoverHold <= 0 {
		return
	}
	h := &failoverHold{done: make(chan struct{})}
	if !s.hold.CompareAndSwap(nil, h) {
		return // one is under way
	}
	s.holds.Add(1)
	s.log.Warn("sentinel: a failover is promoting a replica: commands wait for the new master",
		zap.String("via", via), zap.Duration("at_most_seconds", s.cfg.FailoverHold))
	time.AfterFunc(s.cfg.FailoverHold, func() {
		if s.endHold(h, true) {
			s.log.Warn("sentinel: no new master within the failover hold: commands go to the master as known",
				zap.String("master", s.Master()), zap.Duration("failover_hold_seconds", s.cfg.FailoverHold))
		}
	})
}

// endHold ends h if it is the hold under way, reporting whether it was;
// expired (FailoverHold passed) is counted before the held commands go.
func (s *Sentinel) endHold(h *failoverHold, expired bool) bool {
	if h == nil || !s.hold.CompareAndSwap(h, nil) {
		return false
	}
	if expired {
		s.holdsOut.Add(1)
	}
	close(h.done)
	return true
}

func (s *Sentinel) register(p *Pool) {
	s.mu.Lock()
	s.pools[p] = struct{}{}
	s.mu.Unlock()
}

func (s *Sentinel) unregister(p *Pool) {
	s.mu.Lock()
	delete(s.pools, p)
	s.mu.Unlock()
}

// set records the master's address; a change resets every registered
// pool's connections, so they reconnect to the new master.
func (s *Sentinel) set(addr, via string) {
	s.setIfGen(addr, via, nil)
}

// setIfGen is set, done only if the master has not changed since gen was
// read (when gen is not nil); it reports whether it was done.
func (s *Sentinel) setIfGen(addr, via string, gen *uint64) bool {
	s.setMu.Lock()
	if gen != nil && s.gen.Load() != *gen {
		s.setMu.Unlock()
		return false
	}
	old := *s.master.Swap(&addr)
	if old == addr {
		s.setMu.Unlock()
		return true
	}
	s.gen.Add(1)
	s.setMu.Unlock()
	if old == "" {
		s.log.Info("sentinel: master found", zap.String("master", addr), zap.String("via", via))
		return true
	}
	s.failovers.Add(1)
	s.changedAt.Store(s.cfg.Now().UnixNano())
	s.log.Warn("sentinel: master changed: moving every connection", zap.String("from", old), zap.String("to", addr), zap.String("via", via))
	s.mu.Lock()
	pools := make([]*Pool, 0, len(s.pools))
	for p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	for _, p := range pools {
		p.masterChanged("master changed from " + old + " to " + addr)
	}
	// Held commands go now: to the new master, whose dials they wait for.
	s.endHold(s.hold.Load(), false)
	return true
}

// checkLoop asks the Sentinels every Check, and whenever asked to.
func (s *Sentinel) checkLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.trigger:
		}
		s.resolve(ctx)
	}
}

// resolve asks each Sentinel in turn for the master until one answers.
func (s *Sentinel) resolve(ctx context.Context) {
	var errs []error
	for _, a := range s.cfg.Addresses {
		if ctx.Err() != nil {
			return
		}
		gen := s.gen.Load()
		addr, err := s.ask(ctx, a)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		msg := ""
		s.lastErr.Store(&msg)
		if !s.setIfGen(addr, "SENTINEL GET-MASTER-ADDR-BY-NAME on "+a, &gen) {
			// A +switch-master came while this question was out: the
			// answer may predate it, and must not undo it. Ask again.
			s.Check()
			return
		}
		if s.cfg.Replicas {
			if reps, err := s.askReplicas(ctx, a); err == nil {
				s.replicas.Store(&reps)
			} else {
				s.log.Debug("sentinel: SENTINEL REPLICAS failed", zap.String("sentinel", a), zap.Error(err))
			}
		}
		return
	}
	msg := errors.Join(errs...).Error()
	if prev := *s.lastErr.Swap(&msg); prev == "" {
		s.log.Warn("sentinel: no Sentinel named the master", zap.String("error", msg)) // once per outage
	} else {
		s.log.Debug("sentinel: no Sentinel named the master", zap.String("error", msg))
	}
}

// dialSentinel connects and authenticates to one Sentinel.
func (s *Sentinel) dialSentinel(ctx context.Context, addr string) (net.Conn, error) {
	nc, err := Dial(ctx, Config{Address: addr, DialTimeout: s.cfg.DialTimeout, TLS: s.cfg.TLS, TLSRoots: s.cfg.TLSRoots, Dial: s.cfg.Dial})
	if err != nil {
		return nil, err
	}
	user, password := s.cfg.Username, s.cfg.Password
	if s.cfg.Credentials != nil {
		user, password = s.cfg.Credentials.Get()
	}
	if password != "" {
		auth := resp.AppendCommandString(nil, "AUTH", password)
		if user != "" {
			auth = resp.AppendCommandString(nil, "AUTH", user, password)
		}
		if err := handshake(nc, s.cfg.Now().Add(s.cfg.DialTimeout), auth); err != nil {
			nc.Close()
			return nil, errors.New("AUTH to the Sentinel failed") // never the secret
		}
	}
	return nc, nil
}

// ask asks one Sentinel for the master's address.
func (s *Sentinel) ask(ctx context.Context, addr string) (string, error) {
	nc, err := s.dialSentinel(ctx, addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	r, err := roundTrip(nc, s.cfg.Now().Add(s.cfg.DialTimeout),
		resp.AppendCommandString(nil, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.cfg.MasterName))
	if err != nil {
		return "", err
	}
	v, err := resp.Parse(r)
	if err != nil {
		return "", err
	}
	if v.Null || len(v.Elems) != 2 {
		return "", fmt.Errorf("the Sentinel does not know a master named %q", s.cfg.MasterName)
	}
	return net.JoinHostPort(string(v.Elems[0].Str), string(v.Elems[1].Str)), nil
}

// The Sentinel events followed: the master changed; the failover's
// leader is about to promote a replica (beginHold); it gave up waiting
// for the promotion (the hold ends).
const (
	eventSwitchMaster  = "+switch-master"
	eventPromoting     = "+failover-state-send-slaveof-noone"
	eventPromotionLost = "-failover-abort-slave-timeout"
)

var subscribeEventsCmd = resp.AppendCommandString(nil, "SUBSCRIBE", eventSwitchMaster, eventPromoting, eventPromotionLost)

// subscribeLoop listens for the events above on one Sentinel (each has
// its own: only a failover's leader tells of its steps), resubscribing
// when the connection fails. Each (re)subscription is followed by a
// check, for a switch missed while not subscribed.
func (s *Sentinel) subscribeLoop(ctx context.Context, addr string) {
	for ctx.Err() == nil {
		err := s.subscribe(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		s.log.Debug("sentinel: event subscription ended", zap.String("sentinel", addr), zap.Error(err))
		if !sleep(ctx, min(s.cfg.Check, s.cfg.DialTimeout)) {
			return
		}
	}
}

func (s *Sentinel) subscribe(ctx context.Context, addr string) error {
	nc, err := s.dialSentinel(ctx, addr)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	defer nc.Close()
	nc.SetWriteDeadline(s.cfg.Now().Add(s.cfg.DialTimeout))
	if _, err := nc.Write(subscribeEventsCmd); err != nil {
		return err
	}
	rd := bufio.NewReader(nc)
	for first := true; ; first = false {
		raw, err := resp.ReadReply(rd, nil)
		if err != nil {
			return err
		}
		if first {
			s.Check() // subscribed: look for a switch missed meanwhile
		}
		v, err := resp.Parse(raw)
		if err != nil {
			return err
		}
		if len(v.Elems) != 3 || string(v.Elems[0].Str) != "message" {
			continue
		}
		s.event(string(v.Elems[1].Str), string(v.Elems[2].Str), addr)
	}
}

// event acts on one Sentinel event about the monitored master.
func (s *Sentinel) event(channel, payload, from string) {
	f := strings.Fields(payload)
	switch channel {
	case eventSwitchMaster:
		// <name> <old ip> <old port> <new ip> <new port>
		if len(f) == 5 && f[0] == s.cfg.MasterName {
			s.set(net.JoinHostPort(f[3], f[4]), "+switch-master from "+from)
		}
	case eventPromoting:
		// slave <ip:port> <ip> <port> @ <name> <master ip> <master port>
		if len(f) == 8 && f[0] == "slave" && f[4] == "@" && f[5] == s.cfg.MasterName {
			s.beginHold(eventPromoting + " from " + from)
		}
	case eventPromotionLost:
		// master <name> <ip> <port>
		if len(f) == 4 && f[0] == "master" && f[1] == s.cfg.MasterName && s.endHold(s.hold.Load(), false) {
			s.log.Warn("sentinel: the failover was aborted: commands go to the master as known", zap.String("via", from))
		}
	}
}

var (
	sentinelChangesDesc = prometheus.NewDesc("rproxy_upstream_sentinel_master_changes_total",
		"Times the master named by the Sentinels changed (failovers followed).", nil, nil)
	sentinelKnownDesc = prometheus.NewDesc("rproxy_upstream_sentinel_master_known",
		"1 while the Sentinels have named a master, else 0.", nil, nil)
	sentinelHoldsDesc = prometheus.NewDesc("rproxy_upstream_sentinel_failover_holds_total",
		"Failovers during which commands waited for the new master (upstream.sentinel.failover_hold).", nil, nil)
	sentinelHoldsExpiredDesc = prometheus.NewDesc("rproxy_upstream_sentinel_failover_holds_expired_total",
		"Failover holds that ended at upstream.sentinel.failover_hold with no new master named.", nil, nil)
	sentinelHeldDesc = prometheus.NewDesc("rproxy_upstream_sentinel_held_commands",
		"Sends (batches of client commands) waiting in a failover hold now.", nil, nil)
)

// Collector exports, when scraped, how many master changes the Sentinel
// followed and whether it knows the master. Register it once per registry.
func (s *Sentinel) Collector() prometheus.Collector { return sentinelCollector{s} }

type sentinelCollector struct{ s *Sentinel }

func (c sentinelCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sentinelChangesDesc
	ch <- sentinelKnownDesc
	ch <- sentinelHoldsDesc
	ch <- sentinelHoldsExpiredDesc
	ch <- sentinelHeldDesc
}

func (c sentinelCollector) Collect(ch chan<- prometheus.Metric) {
	known := 0.0
	if c.s.Master() != "" {
		known = 1
	}
	ch <- prometheus.MustNewConstMetric(sentinelChangesDesc, prometheus.CounterValue, float64(c.s.Failovers()))
	ch <- prometheus.MustNewConstMetric(sentinelKnownDesc, prometheus.GaugeValue, known)
	ch <- prometheus.MustNewConstMetric(sentinelHoldsDesc, prometheus.CounterValue, float64(c.s.holds.Load()))
	ch <- prometheus.MustNewConstMetric(sentinelHoldsExpiredDesc, prometheus.CounterValue, float64(c.s.holdsOut.Load()))
	ch <- prometheus.MustNewConstMetric(sentinelHeldDesc, prometheus.GaugeValue, float64(c.s.held.Load()))
}

// ReplicasOn reports whether the Sentinel asks for replicas
// (SentinelConfig.Replicas).
func (s *Sentinel) ReplicasOn() bool { return s.cfg.Replicas }

// Replicas returns the master's healthy replicas as last asked (with
// SentinelConfig.Replicas), in the Sentinel's order.
func (s *Sentinel) Replicas() []string { return *s.replicas.Load() }

// askReplicas asks one Sentinel for the master's replicas that are up
// and linked to it: no s_down, o_down or disconnected flag, and
// master-link-status ok.
func (s *Sentinel) askReplicas(ctx context.Context, addr string) ([]string, error) {
	nc, err := s.dialSentinel(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	r, err := roundTrip(nc, s.cfg.Now().Add(s.cfg.DialTimeout),
		resp.AppendCommandString(nil, "SENTINEL", "REPLICAS", s.cfg.MasterName))
	if err != nil {
		return nil, err
	}
	v, err := resp.Parse(r)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, rep := range v.Elems {
		f := map[string]string{}
		for i := 0; i+1 < len(rep.Elems); i += 2 {
			f[string(rep.Elems[i].Str)] = string(rep.Elems[i+1].Str)
		}
		flags := "," + f["flags"] + ","
		if f["ip"] == "" || f["port"] == "" || f["master-link-status"] != "ok" ||
			strings.Contains(flags, ",s_down,") || strings.Contains(flags, ",o_down,") || strings.Contains(flags, ",disconnected,") {
			continue
		}
		out = append(out, net.JoinHostPort(f["ip"], f["port"]))
	}
	return out, nil
}
