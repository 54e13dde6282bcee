package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// certWarnBefore: a certificate this close to its end is warned about at
// start and at each reload.
const certWarnBefore = 14 * 24 * time.Hour

// security holds the start and reload checks that are not a stage of the
// request path: reload outcomes, certificate expiry, and what rproxy's
// upstream user may run that the policy denies. Its metrics are on the
// process's registry; its INFO fields go to the # Proxy section.
type security struct {
	log *zap.Logger
	now func() time.Time

	reloads  *prometheus.CounterVec
	reloadOK prometheus.Gauge

	certs atomic.Pointer[[]namedCert] // replaced whole: at start, at each reload (liveFiles)

	// The upstream user check (see checkUpstreamUser).
	pol     atomic.Pointer[policy.Policy] // the running policy, for the probes it denies
	canRun  *prometheus.GaugeVec
	checked prometheus.Gauge
	checks  prometheus.Counter
	trigger chan struct{}
	mu      sync.Mutex
	last    userCheck // the last check that got an answer
}

// namedCert is a certificate rproxy presents, or the first to expire of a
// CA file it verifies peers with, by the config key of its file.
type namedCert struct {
	key  string // "tls.cert_file", "upstream.tls.cert_file", "tls.client_ca_file", "upstream.tls.ca_file"
	file string
	leaf *x509.Certificate
}

func newSecurity(reg prometheus.Registerer, log *zap.Logger, now func() time.Time) *security {
	s := &security{
		log: log.Named("security"),
		now: now,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "config",
			Name: "reloads_total", Help: "Configuration reloads (SIGHUP, POST /reload, PROXY RELOAD), by result: success or failure (the running configuration stayed)."},
			[]string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "rproxy", Subsystem: "config",
			Name: "last_reload_successful", Help: "1 if the last reload was applied (or none was tried), 0 if it was rejected."}),
		canRun: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "rproxy", Subsystem: "policy",
			Name: "upstream_user_can_run", Help: "1 if rproxy's upstream user may run a command the policy denies (ACL DRYRUN): a script (EVAL, FCALL) can then run it past the policy."},
			[]string{"command"}),
		checked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "rproxy", Subsystem: "policy",
			Name: "upstream_user_checked", Help: "1 if the last check of the upstream user's rights got an answer, 0 if unknown (e.g. no permission for ACL DRYRUN)."}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "policy",
			Name: "upstream_user_checks_total", Help: "Checks of the upstream user's rights that got a connection (at start, at each reconnect of a shared upstream connection, at each reload)."}),
		trigger: make(chan struct{}, 1),
	}
	s.reloadOK.Set(1)
	reg.MustRegister(s.reloads, s.reloadOK, s.canRun, s.checked, s.checks, certCollector{s})
	return s
}

// reloaded counts one reload.
func (s *security) reloaded(ok bool) {
	if ok {
		s.reloads.WithLabelValues("success").Inc()
		s.reloadOK.Set(1)
		return
	}
	s.reloads.WithLabelValues("failure").Inc()
	s.reloadOK.Set(0)
}

// setCerts replaces the certificates watched.
func (s *security) setCerts(certs []namedCert) { s.certs.Store(&certs) }

// loadCerts returns a copy of the certificates watched.
func (s *security) loadCerts() []namedCert {
	if p := s.certs.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// leafOf returns the leaf certificate of c (nil: none) under key.
func leafOf(key, file string, c *tls.Config) (*namedCert, error) {
	if c == nil || len(c.Certificates) == 0 {
		return nil, nil
	}
	cert := c.Certificates[0]
	leaf := cert.Leaf
	if leaf == nil {
		if len(cert.Certificate) == 0 {
			return nil, nil
		}
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s %s: %w", key, file, err)
		}
	}
	return &namedCert{key: key, file: file, leaf: leaf}, nil
}

// firstCA returns the CA certificate of the PEM file at path ("": none)
// that expires first, under key.
func firstCA(key, path string, readFile func(string) ([]byte, error)) (*namedCert, error) {
	if path == "" {
		return nil, nil
	}
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	var first *x509.Certificate
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", key, path, err)
		}
		if first == nil || c.NotAfter.Before(first.NotAfter) {
			first = c
		}
	}
	if first == nil {
		return nil, nil
	}
	return &namedCert{key: key, file: path, leaf: first}, nil
}

// checkCerts warns about each certificate that has expired or expires
// within certWarnBefore.
func (s *security) checkCerts() {
	now := s.now()
	for _, c := range s.loadCerts() {
		left := c.leaf.NotAfter.Sub(now)
		fields := []zap.Field{zap.String("key", c.key), zap.String("file", c.file),
			zap.Time("not_after", c.leaf.NotAfter), zap.String("subject", c.leaf.Subject.String())}
		switch {
		case left <= 0:
			s.log.Warn("TLS certificate has expired: peers that verify it refuse the connection; replace the file and reload", fields...)
		case left < certWarnBefore:
			s.log.Warn("TLS certificate expires soon: replace the file and reload", append(fields, zap.Duration("left_seconds", left.Round(time.Second)))...)
		}
	}
}

// certCollector exports the seconds each certificate has left, computed
// at each scrape (as Envoy's days_until_first_cert_expiring).
type certCollector struct{ s *security }

var certExpiryDesc = prometheus.NewDesc("rproxy_tls_certificate_expiry_seconds",
	"Seconds until a certificate expires (negative once expired), by config key: tls.cert_file (presented to clients), upstream.tls.cert_file (to Redis), tls.client_ca_file and upstream.tls.ca_file (the first of the file's CAs to expire).",
	[]string{"key"}, nil)

func (c certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.s.now()
	for _, cert := range c.s.loadCerts() {
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue,
			cert.leaf.NotAfter.Sub(now).Seconds(), cert.key)
	}
}

// userProbes are commands the default policy denies and a script can
// reach (or that change Redis for every client); each is asked of Redis
// with ACL DRYRUN for rproxy's upstream user when the running policy
// denies it.
var userProbes = [][]string{
	{"flushall"}, {"flushdb"}, {"keys", "*"}, {"swapdb", "0", "1"},
	{"script", "flush"}, {"function", "flush"}, {"function", "restore", "x"},
	{"config", "get", "requirepass"}, {"config", "set", "maxmemory", "0"}, {"config", "resetstat"},
	{"acl", "setuser", "rproxy-probe"}, {"acl", "list"},
	{"debug", "sleep", "0"}, {"shutdown"}, {"monitor"}, {"replicaof", "no", "one"}, {"failover"},
	{"save"}, {"bgsave"}, {"bgrewriteaof"}, {"client", "pause", "1"}, {"module", "load", "x"},
}

// probeName is a probe's label: "flushall", or "config|get" for commands
// with subcommands.
func probeName(args []string) string {
	switch args[0] {
	case "script", "function", "config", "acl", "client", "module":
		return args[0] + "|" + args[1]
	}
	return args[0]
}

// userCheck is the answer of one check.
type userCheck struct {
	user   string   // ACL WHOAMI
	canRun []string // probe names the policy denies and the user may run
	probed []string // probe names asked
}

// errUnknown: Redis did not say (no permission for ACL WHOAMI or DRYRUN,
// or a Redis before 7.0).
var errUnknown = errors.New("cannot tell what the upstream user may run")

// checkUpstreamUser asks Redis, through do (a connection authenticated as
// rproxy's upstream user), which commands the policy pol denies the user
// could run: ACL WHOAMI, then ACL DRYRUN <user> <command> for each probe
// that pol denies to a client. An error reply to WHOAMI or to a DRYRUN
// (NOPERM: the user may not run ACL DRYRUN) makes the whole answer
// unknown, wrapped in errUnknown.
func checkUpstreamUser(do func(args ...string) ([]byte, error), pol *policy.Policy) (userCheck, error) {
	var uc userCheck
	r, err := do("ACL", "WHOAMI")
	if err != nil {
		return uc, err
	}
	if uc.user, err = replyString(r); err != nil {
		return uc, fmt.Errorf("%w: ACL WHOAMI: %v", errUnknown, err)
	}
	for _, p := range userProbes {
		byteArgs := make([][]byte, len(p))
		for i, a := range p {
			byteArgs[i] = []byte(a)
		}
		if pol == nil || pol.Check(&policy.Request{Name: p[0], Args: byteArgs}).Action != policy.Deny {
			continue // the policy lets clients run it anyway
		}
		name := probeName(p)
		r, err := do(append([]string{"ACL", "DRYRUN", uc.user}, p...)...)
		if err != nil {
			return uc, err
		}
		switch text := strings.TrimSpace(string(r)); {
		case text == "+OK":
			uc.canRun = append(uc.canRun, name)
		case len(r) > 0 && (r[0] == '$' || r[0] == '+'): // "This user has no permissions to run ..."
		case strings.HasPrefix(text, "-NOPERM") || strings.Contains(strings.ToLower(text), "dryrun"):
			// No right to ACL DRYRUN, or a Redis without it (before 7.0).
			return uc, fmt.Errorf("%w: ACL DRYRUN %s: %s", errUnknown, name, text)
		case strings.HasPrefix(text, "-"):
			continue // a command this Redis does not have, or takes otherwise: nothing to tell
		default:
			return uc, fmt.Errorf("%w: ACL DRYRUN %s: unexpected reply %q", errUnknown, name, text)
		}
		uc.probed = append(uc.probed, name)
	}
	return uc, nil
}

// replyString returns a simple or bulk string reply's text; an error reply
// or another type is an error.
func replyString(r []byte) (string, error) {
	s := strings.TrimSuffix(string(r), "\r\n")
	switch {
	case strings.HasPrefix(s, "+"):
		return s[1:], nil
	case strings.HasPrefix(s, "$"):
		if _, body, ok := strings.Cut(s, "\r\n"); ok {
			return body, nil
		}
	}
	return "", errors.New(strings.TrimSpace(s))
}

// setPolicy gives the upstream user check the running policy and asks for
// a check (the denied commands may have changed).
func (s *security) setPolicy(p *policy.Policy) {
	s.pol.Store(p)
	s.requestCheck()
}

// requestCheck asks the checker for a check; never blocks (it is called
// on an upstream connection's goroutine when the connection comes up).
func (s *security) requestCheck() {
	select {
	case s.trigger <- struct{}{}:
	default: // one is pending already
	}
}

// checkUser runs one check with a connection from dial, and records,
// logs and exports its answer.
func (s *security) checkUser(ctx context.Context, dial func(context.Context) (func(args ...string) ([]byte, error), func(), error)) {
	do, closeConn, err := dial(ctx)
	if err != nil {
		// The shared connection's own reconnect brings another check.
		s.log.Debug("upstream user check: no connection", zap.Error(err))
		return
	}
	defer closeConn()
	uc, err := checkUpstreamUser(do, s.pol.Load())
	defer s.checks.Inc() // after the gauges: a test that sees the count sees them
	if err != nil {
		s.checked.Set(0)
		s.canRun.Reset()
		s.mu.Lock()
		s.last = userCheck{}
		s.mu.Unlock()
		if errors.Is(err, errUnknown) {
			s.log.Warn("cannot check what rproxy's upstream user may run: give it +acl|whoami and +acl|dryrun, or check by hand that it cannot run what the policy denies (see docs/security.md)", zap.Error(err))
		} else {
			s.log.Debug("upstream user check failed", zap.Error(err))
		}
		return
	}
	s.checked.Set(1)
	s.canRun.Reset()
	for _, name := range uc.probed {
		v := 0.0
		if slices.Contains(uc.canRun, name) {
			v = 1
		}
		s.canRun.WithLabelValues(name).Set(v)
	}
	s.mu.Lock()
	s.last = uc
	s.mu.Unlock()
	if len(uc.canRun) > 0 {
		s.log.Warn("rproxy's upstream user may run commands the policy denies: a script (EVAL, FCALL) can run them past the policy; use a least-privilege ACL user (see docs/security.md and deploy/redis-acl.conf)",
			zap.String("user", uc.user), zap.Strings("commands", uc.canRun))
	}
}

// runUserChecks checks at each requestCheck until ctx ends.
func (s *security) runUserChecks(ctx context.Context, dial func(context.Context) (func(args ...string) ([]byte, error), func(), error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.trigger:
			s.checkUser(ctx, dial)
		}
	}
}

// infoFields are the lines the checks add to INFO's # Proxy section.
func (s *security) infoFields() []string {
	s.mu.Lock()
	uc := s.last
	s.mu.Unlock()
	var out []string
	if uc.user == "" {
		out = append(out, "upstream_user:unknown", "upstream_user_can_run_denied:unknown")
	} else {
		out = append(out, "upstream_user:"+uc.user,
			"upstream_user_can_run_denied:"+strings.Join(uc.canRun, ","))
	}
	now := s.now()
	for _, c := range s.loadCerts() {
		name := strings.ReplaceAll(strings.TrimSuffix(strings.TrimSuffix(c.key, "_file"), ".cert"), ".", "_")
		out = append(out, name+"_cert_expiry_seconds:"+strconv.FormatInt(int64(c.leaf.NotAfter.Sub(now).Seconds()), 10))
	}
	return out
}

// dialUpstreamUser returns a dial for runUserChecks: a fresh connection to
// the upstream (TLS when configured), authenticated as rproxy's upstream
// user, each command bounded by cfg.Timeout.
func dialUpstreamUser(cfg upstream.Config) func(context.Context) (func(args ...string) ([]byte, error), func(), error) {
	return func(ctx context.Context) (func(args ...string) ([]byte, error), func(), error) {
		nc, err := upstream.Dial(ctx, cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("dial %s: %w", cfg.Address, err)
		}
		rd := bufio.NewReader(nc)
		do := func(args ...string) ([]byte, error) {
			nc.SetDeadline(time.Now().Add(cfg.Timeout))
			if _, err := nc.Write(resp.AppendCommandString(nil, args...)); err != nil {
				return nil, err
			}
			return resp.ReadReply(rd, nil)
		}
		// The login in force now (a reload may have rotated the
		// password), as the pools' handshake sends it.
		if auth := cfg.AuthArgs(); auth != nil {
			r, err := do(auth...)
			if err == nil && string(r) != "+OK\r\n" {
				err = errors.New(strings.TrimSpace(string(r))) // Redis's message, never the password
			}
			if err != nil {
				nc.Close()
				return nil, nil, fmt.Errorf("AUTH as the upstream user: %w", err)
			}
		}
		return do, func() { nc.Close() }, nil
	}
}
