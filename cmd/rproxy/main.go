// Command rproxy is a Redis-protocol proxy: unmodified Redis clients connect
// to it and it forwards to Redis over shared, pipelined connections.
//
// main only wires: flags, config, logger, registry, server, admin, signals.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rproxy/rproxy/admin"
	"github.com/rproxy/rproxy/config"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/upstream"
)

// defaultGCPercent applies unless the GOGC environment variable is set.
const defaultGCPercent = 400

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rproxy:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("rproxy", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "rproxy %s: a Redis-protocol proxy.\n\nUsage: rproxy -listen 127.0.0.1:6380 -upstream 127.0.0.1:6379 [-config rproxy.yaml] [-admin 127.0.0.1:9121]\n\nFlags override the config file; the file holds every other setting (see config/rproxy.example.yaml).\n\n", version)
		fs.PrintDefaults()
	}
	var (
		listen      = fs.String("listen", "", "client listen address (config: listen; default 127.0.0.1:6380)")
		upstreamArg = fs.String("upstream", "", "Redis server address host:port (config: upstream.address; default 127.0.0.1:6379)")
		configPath  = fs.String("config", "", "YAML config file, strictly checked (unknown keys are errors)")
		adminAddr   = fs.String("admin", "", adminFlagHelp())
		logLevel    = fs.String("log-level", "", "debug, info, warn or error (config: log.level; default info)")
		showVersion = fs.Bool("version", false, "print the version and exit")
		healthcheck = fs.String("healthcheck", "", "check http://ADDR/healthz and exit 0 if it answers 200, else 1 (for container HEALTHCHECKs, which have no shell or curl)")
		checkOnly   = fs.Bool("check", false, "check the flags and the -config file as start-up does (and the files it names), print the effective configuration and exit 0, or list every problem and exit 1; serves and dials nothing")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (every setting is a -flag or in -config)", fs.Args())
	}
	if *healthcheck != "" {
		return checkHealth(*healthcheck)
	}
	if *showVersion {
		fmt.Println("rproxy", version)
		return nil
	}

	// SIGHUP is caught from the start: its default action would kill a
	// process that a `systemctl reload` reaches while it is starting. It is
	// acted on once the server runs.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)

	cfg := config.Default()
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			return err
		}
	}
	// applyFlags makes the flags win over the file, at start and at
	// each reload.
	applyFlags := func(c *config.Config) {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "listen":
				c.Listen = *listen
			case "upstream":
				c.Upstream.Address = *upstreamArg
			case "admin":
				c.Admin = *adminAddr
			case "log-level":
				c.Log.Level = *logLevel
			}
		})
	}
	applyFlags(&cfg)
	if *checkOnly {
		return checkConfig(cfg, *configPath, checkEnv{readFile: os.ReadFile, getenv: os.Getenv, out: os.Stdout, errOut: os.Stderr})
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	// procsMost > 0: auto chose fewer threads than CPUs (Redis local),
	// and the procs governor may use them all while large values queue.
	procsBase, procsMost := 0, 0
	if cfg.Procs > 0 {
		runtime.GOMAXPROCS(cfg.Procs)
	} else {
		_, envSet := os.LookupEnv("GOMAXPROCS")
		cpus := runtime.GOMAXPROCS(0)
		procsBase = autoProcs(cpus, cfg.Upstream.Address, envSet)
		runtime.GOMAXPROCS(procsBase)
		if !envSet && procsBase < cpus {
			procsMost = cpus
		}
	}
	if os.Getenv("GOGC") == "" {
		// The live heap is a few MB, so the default GOGC=100 collects very
		// often; GC assists cost 7% of throughput at -P 16 (measured: GET
		// -c 50 -P 16, 543k -> 584k rps with 400, medians of 5 rounds).
		debug.SetGCPercent(defaultGCPercent)
	}
	log, level, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer log.Sync()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The running configuration (the file's, with flags applied), for
	// GET /config and PROXY CONFIG GET; replaced by a successful reload.
	var running atomic.Pointer[config.Config]
	running.Store(&cfg)
	effective := func() string { return running.Load().Redacted().String() }
	var reload func() (string, error) // set below, once the server exists

	sec := newSecurity(reg, log, time.Now)
	pcfg := cfg.ProxyConfig()
	pcfg.Ops = proxy.OpsHooks{
		Version:         version,
		Reload:          func() (string, error) { return reload() },
		EffectiveConfig: effective,
		Info:            sec.infoFields,
	}
	// Each time a shared upstream connection comes up (at start and at
	// every reconnect) the upstream user's rights are checked again,
	// off that connection's goroutine.
	pcfg.Upstream.OnState = func(up bool) {
		if up {
			sec.requestCheck()
		}
	}
	// The passwords and TLS files are read here (a missing or bad file
	// stops start-up with an error naming the key and the file) and again
	// at each reload (liveFiles): a password rotated in its file, a
	// certificate replaced, reach the connections made from then on.
	live := &liveFiles{creds: upstream.NewCredentials("", ""), sec: sec, log: log}
	if cfg.Upstream.Mode == "sentinel" {
		live.sentinelCreds = upstream.NewCredentials("", "")
	}
	files, err := live.read(cfg)
	if err != nil {
		return err
	}
	live.creds.Set(files.user, files.password)
	if live.sentinelCreds != nil {
		live.sentinelCreds.Set(files.sentinelUser, files.sentinelPassword)
	}
	pcfg.Upstream.Credentials = live.creds
	pcfg.TLS, pcfg.Upstream.TLS = live.tls.start(files.tls)
	if pcfg.Upstream.TLS != nil {
		pcfg.Upstream.TLSRoots = live.tls.roots
		pcfg.Upstream.TLSOtherName = cfg.Upstream.TLSOtherName()
	}
	sec.setCerts(files.tls.certs)
	sec.checkCerts()
	if cfg.Upstream.Mode == "sentinel" {
		sen, err := newSentinel(cfg, pcfg.Upstream.TLS, pcfg.Upstream.TLSRoots, live.sentinelCreds, log.Named("sentinel"))
		if err != nil {
			return err
		}
		defer sen.Close()
		pcfg.Upstream.Sentinel = sen
		pcfg.Upstream.Address = "sentinel/" + cfg.Upstream.Sentinel.MasterName // only a name: the Sentinel gives the address
	}
	startPolicy, err := policy.New(cfg.PolicyConfig(), nil, nil) // what the upstream user check probes
	if err != nil {
		return err
	}
	sec.setPolicy(startPolicy)
	checkCtx, stopChecks := context.WithCancel(context.Background())
	defer stopChecks()
	go sec.runUserChecks(checkCtx, dialUpstreamUser(pcfg.Upstream))
	srv, err := proxy.New(pcfg, reg, log.Named("proxy"))
	if err != nil {
		return err
	}
	if procsMost > 0 {
		gov := &procsGovernor{base: procsBase, most: procsMost, hold: procsHold,
			read: srv.UpstreamTraffic, set: func(n int) { runtime.GOMAXPROCS(n) }, log: log.Named("procs")}
		govCtx, stopGov := context.WithCancel(context.Background())
		defer stopGov()
		go gov.run(govCtx, procsTick)
	}
	ln, err := activatedListener(os.Getenv, os.Unsetenv, os.Getpid())
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	if ln != nil {
		log.Info("listening on the socket systemd passed (socket activation): listen is not used", zap.String("addr", ln.Addr().String()))
	} else if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		srv.Shutdown(context.Background())
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	log.Info("rproxy starting", zap.String("version", version), zap.String("listen", ln.Addr().String()),
		zap.String("upstream", cfg.Upstream.Address), zap.Int("procs", runtime.GOMAXPROCS(0)),
		zap.Bool("tls", pcfg.TLS != nil), zap.Bool("upstream_tls", pcfg.Upstream.TLS != nil))
	warnRequestLog(log, cfg.Log.Requests, level.Level())
	if cfg.Upstream.TLS.Enabled && cfg.Upstream.TLS.InsecureSkipVerify {
		log.Warn("upstream.tls.insecure_skip_verify is on: the upstream's certificate is not verified (for tests only)")
	}

	// reload re-reads the config file and applies what can change without a
	// restart (see reloadable): the policy (rules, big keys, jitter), the
	// hot-key detector and tier, the log level, request logging and the
	// client limits. A bad
	// file changes nothing. Changed keys that need a restart keep their
	// running values; they are logged and returned, for the reply.
	var reloadMu sync.Mutex
	canReload := reloadable(cfg.HotKeys.Tier, pcfg.TLS != nil, pcfg.Upstream.TLS != nil)
	reload = func() (string, error) {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		if *configPath == "" {
			return "", errors.New("no -config file to reload")
		}
		reject := func(err error) (string, error) {
			log.Warn("reload rejected", zap.Error(err))
			sec.reloaded(false)
			return "", err
		}
		// A file that sets nothing (empty, comments only, truncated) is
		// refused: read as "all defaults" it would drop every rule.
		next, err := config.LoadNonEmpty(*configPath)
		if err != nil {
			return reject(err)
		}
		applyFlags(&next) // the flags win over the file, as at start
		next, pending := config.Merge(*running.Load(), next, canReload)
		lvl, err := zapcore.ParseLevel(next.Log.Level)
		if err != nil {
			return reject(err)
		}
		// The merged configuration, each stage's rules included, before
		// anything changes.
		if err := next.Validate(); err != nil {
			return reject(err)
		}
		files, err := live.read(next) // whether or not their keys changed
		if err == nil {
			err = live.tls.check(files.tls)
		}
		if err != nil {
			return reject(err)
		}
		hk, limits := next.HotKeyConfig(), next.ProxyLimits()
		if err := srv.SetPolicy(next.PolicyConfig()); err != nil {
			return reject(err)
		}
		if p, err := policy.New(next.PolicyConfig(), nil, nil); err == nil { // SetPolicy compiled it: not expected to fail
			sec.setPolicy(p)
		}
		if err := srv.SetHotKeys(*hk); err != nil { // checked above: not expected
			log.Warn("reload: hot-key settings not applied", zap.Error(err))
			return "", err
		}
		if err := srv.SetLimits(limits); err != nil { // checked above: not expected
			log.Warn("reload: limits not applied", zap.Error(err))
			return "", err
		}
		live.apply(files)
		level.SetLevel(lvl)
		srv.SetRequestLog(next.Log.Requests)
		warnRequestLog(log, next.Log.Requests, lvl)
		changes := config.Diff(*running.Load(), next)
		running.Store(&next)
		sec.reloaded(true)
		note := ""
		if len(pending) > 0 {
			note = "not applied until restart: " + strings.Join(pending, ", ")
			log.Warn("reload: changed settings that need a restart were not applied", zap.Strings("keys", pending))
		}
		logReload(log, *configPath, len(next.Policy.Rules), changes)
		sec.checkCerts() // time has passed since start: warn again if a certificate is near its end
		return note, nil
	}

	var adminSrv *http.Server
	if cfg.Admin != "" {
		aln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			ln.Close()
			srv.Shutdown(context.Background())
			return fmt.Errorf("admin listen %s: %w", cfg.Admin, err)
		}
		ready := func() error {
			if !srv.Ready() {
				return errors.New("upstream unreachable or command table not loaded")
			}
			return nil
		}
		token, err := cfg.AdminToken(os.ReadFile)
		if err != nil {
			aln.Close()
			ln.Close()
			srv.Shutdown(context.Background())
			return err
		}
		adminSrv = &http.Server{Handler: admin.Handler(admin.Endpoints{
			Token:    token,
			Ready:    ready,
			Gatherer: reg,
			Reload:   reload,
			HotKeys:  func() any { return hotKeysView(srv.HotKeys()) },
			Config:   effective,
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := adminSrv.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server failed", zap.Error(err))
			}
		}()
		log.Info("admin listening", zap.String("addr", aln.Addr().String()))
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

wait:
	for {
		select {
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-hups:
			reload() // logged either way
		case sig := <-sigs:
			log.Info("shutting down", zap.String("signal", sig.String()), zap.Duration("drain_seconds", cfg.Limits.ShutdownDrain.D()))
			break wait
		}
	}
	go func() {
		<-sigs
		log.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	if adminSrv != nil {
		adminSrv.Close()
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		log.Warn("shutdown incomplete", zap.Error(err))
	}
	log.Info("stopped")
	return nil
}

// logReload says what a successful reload changed: at warn when it
// changed something (an operator wants to see rules vanish or limits
// jump), at info when the file was the same.
func logReload(log *zap.Logger, file string, rules int, ch config.Changes) {
	if ch.Empty() {
		log.Info("configuration reloaded", zap.String("file", file), zap.Int("policy_rules", rules), zap.Bool("changed", false))
		return
	}
	log.Warn("configuration reloaded", zap.String("file", file), zap.Int("policy_rules", rules),
		zap.Strings("changed", ch.Keys), zap.Strings("rules_added", ch.RulesAdded),
		zap.Strings("rules_removed", ch.RulesRemoved), zap.Strings("rules_changed", ch.RulesChanged))
}

// reloadable reports whether a config key takes effect at a reload;
// others need a restart. hotkeys.tier can be turned on only if it was on
// at start (the tier's tracking connection is made at start).
func reloadable(tierAtStart, tlsAtStart, upstreamTLSAtStart bool) func(key string) bool {
	return func(key string) bool {
		if strings.HasPrefix(key, "hotkeys.salt.") {
			return false // the salt engine is built at start
		}
		switch key {
		case "hotkeys.tier":
			return tierAtStart
		case "tls.cert_file", "tls.key_file", "tls.client_ca_file", "tls.min_version": // tlsFiles
			return tlsAtStart
		case "upstream.tls.cert_file", "upstream.tls.key_file", "upstream.tls.ca_file":
			return upstreamTLSAtStart
		case "upstream.username", "upstream.password_file", "upstream.password_env", // upstream.Credentials
			"upstream.sentinel.username", "upstream.sentinel.password_file", "upstream.sentinel.password_env":
			return true
		case "log.level", "log.requests",
			"limits.max_clients", "limits.max_bulk_len", "limits.max_query_buffer", "limits.max_reply_buffer", "limits.client_write_timeout",
			"limits.idle_timeout":
			return true
		}
		for _, section := range []string{"hotkeys.", "policy.", "jitter."} {
			if strings.HasPrefix(key, section) {
				return true
			}
		}
		return false
	}
}

// warnRequestLog says when log.requests is on but its lines, at debug
// level, are not written.
func warnRequestLog(log *zap.Logger, on bool, lvl zapcore.Level) {
	if on && lvl > zapcore.DebugLevel {
		log.Warn("log.requests is on but log.level is above debug: request lines are not written", zap.String("level", lvl.String()))
	}
}

// checkHealth asks an rproxy admin address whether the process is up.
func checkHealth(addr string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", addr, resp.Status)
	}
	return nil
}

// newLogger builds the zap logger: JSON by default, console when stderr is
// a terminal and the format is auto.
func newLogger(c config.Log) (*zap.Logger, zap.AtomicLevel, error) {
	zc, err := loggerConfig(c)
	if err != nil {
		return nil, zap.AtomicLevel{}, err
	}
	log, err := zc.Build()
	return log, zc.Level, err
}

// loggerConfig maps the log section onto zap's configuration.
func loggerConfig(c config.Log) (zap.Config, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return zap.Config{}, fmt.Errorf("log.level: %w", err)
	}
	format := c.Format
	if format == "auto" || format == "" {
		format = "json"
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			format = "console"
		}
	}
	zc := zap.NewProductionConfig()
	if format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	// ISO-8601 times, and durations as seconds (float) in fields whose
	// names end in _seconds, in both formats (TestLogDurationKeys).
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zc.EncoderConfig.EncodeDuration = zapcore.SecondsDurationEncoder
	// By default every line: at info there are connection events and
	// errors only, nothing per command.
	zc.Sampling = nil
	if c.Sampling.Initial > 0 {
		zc.Sampling = &zap.SamplingConfig{Initial: c.Sampling.Initial, Thereafter: c.Sampling.Thereafter}
	}
	zc.DisableStacktrace = true
	return zc, nil
}

// newSentinel starts following upstream.sentinel's master, logging in to
// the Sentinels with creds; their TLS is upstream.tls's when
// upstream.sentinel.tls is set.
func newSentinel(c config.Config, upTLS *tls.Config, roots func() *x509.CertPool, creds *upstream.Credentials, log *zap.Logger) (*upstream.Sentinel, error) {
	sc := c.Upstream.Sentinel
	scfg := upstream.SentinelConfig{
		MasterName:   sc.MasterName,
		Addresses:    sc.Addresses,
		Credentials:  creds,
		DialTimeout:  c.Upstream.DialTimeout.D(),
		Replicas:     len(sc.ReplicaReadPrefixes) > 0,
		FailoverHold: sc.FailoverHold.D(),
	}
	if sc.TLS {
		scfg.TLS, scfg.TLSRoots = upTLS, roots
	}
	sen, err := upstream.NewSentinel(scfg, log)
	if err != nil {
		return nil, fmt.Errorf("upstream.sentinel: %w", err)
	}
	return sen, nil
}
