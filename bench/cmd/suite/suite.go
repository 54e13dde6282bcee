package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rproxy/rproxy/bench/internal/procs"
	"github.com/rproxy/rproxy/bench/load"
)

// suite holds what the runs share.
type suite struct {
	cfg        config
	scenarios  []scenario // selected, in report order
	log        io.Writer  // progress lines
	children   *procs.Set // every server started, killed at exit
	clk        float64    // clock ticks per second for /proc/PID/stat
	root       string     // module root
	dir        string     // temp dir: logs, configs
	rproxyBin  string
	nutcracker string
	noFile     uint64 // this process's RLIMIT_NOFILE after raising it
	meta       meta
}

// meta describes the machine and the run, for the report's header.
type meta struct {
	date               time.Time
	nproc              int
	cpu                string
	loadStart, loadEnd string
	redis, nutcracker  string // versions
	rproxy             string // command line
	rproxyBuild        string // where the binary came from
	rounds             int
	duration, warmup   time.Duration
	quick              bool
	idleConns, listN   int
	maxClients         int
	procs              []int  // the scaling scenarios' procs values
	pinning            string // which CPUs each process ran on ("" not pinned)
	took               time.Duration
}

// results holds per scenario and target one sample per round (index =
// round), and the default-list outcome per target.
type results struct {
	runs  map[string]map[string][]sample
	lists map[string]listOutcome
}

func newResults() *results {
	return &results{runs: map[string]map[string][]sample{}, lists: map[string]listOutcome{}}
}

func (r *results) add(scenario, target string, s sample) {
	if r.runs[scenario] == nil {
		r.runs[scenario] = map[string][]sample{}
	}
	r.runs[scenario][target] = append(r.runs[scenario][target], s)
}

// stack is a redis-server with the targets in front of it.
type stack struct {
	redis   *procs.Proc
	ctl     *redisConn             // control connection straight to redis
	servers map[string]*procs.Proc // by target; "redis" is redis itself
}

func (st *stack) alive() error {
	for _, p := range st.servers {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// maxClients is the client limit given to redis-server and rproxy: the
// idle scenario holds idleConns connections plus its load clients, more
// than either's default of 10000.
func (s *suite) maxClients() int { return max(20000, s.cfg.idleConns+1000) }

// startStack starts redis-server and the selected proxies in front of it,
// plus an rproxy per value of scaling (target scalingTarget(n)), with logs
// and configs in their own directory under the temp dir.
func (s *suite) startStack(name string, scaling []int) (*stack, error) {
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st := &stack{servers: map[string]*procs.Proc{}}
	ok := false
	defer func() {
		if !ok {
			s.stopStack(st)
		}
	}()
	var err error
	if st.redis, err = s.children.StartRedis(dir, "--maxclients", fmt.Sprint(s.maxClients())); err != nil {
		return nil, err
	}
	st.servers["redis"] = st.redis
	if st.ctl, err = dialRedis(st.redis.Addr); err != nil {
		return nil, err
	}
	for _, t := range s.cfg.targets {
		var p *procs.Proc
		switch t {
		case "twemproxy":
			p, err = s.children.StartNutcracker(dir, s.nutcracker, st.redis.Addr)
		case "rproxy":
			p, err = s.startRproxy(dir, st.redis.Addr, 0)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		st.servers[t] = p
	}
	for _, n := range scaling {
		p, err := s.startRproxy(filepath.Join(dir, scalingTarget(n)), st.redis.Addr, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", scalingTarget(n), err)
		}
		st.servers[scalingTarget(n)] = p
	}
	ok = true
	return st, nil
}

func (s *suite) stopStack(st *stack) {
	if st.ctl != nil {
		st.ctl.Close()
	}
	var ps []*procs.Proc
	for _, p := range st.servers {
		ps = append(ps, p)
	}
	s.children.Stop(ps...)
}

// startRproxy starts rproxy in front of redisAddr with the default config
// except for limits.max_clients (see maxClients) and, unless n is 0
// (auto), procs: n.
func (s *suite) startRproxy(dir, redisAddr string, n int) (*procs.Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "rproxy.yaml")
	if err := os.WriteFile(conf, []byte(rproxyConfig(s.maxClients(), n)), 0o644); err != nil {
		return nil, err
	}
	p, err := s.children.StartRproxy(dir, s.rproxyBin, redisAddr, "-config", conf)
	if err != nil || n == 0 {
		return p, err
	}
	// A report row per procs value means little unless rproxy ran with it:
	// check the value in its start-up log line.
	log, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil, fmt.Errorf("reading rproxy's log: %w", err)
	}
	if !strings.Contains(string(log), fmt.Sprintf(`"procs":%d,`, n)) {
		return nil, fmt.Errorf("rproxy started with procs: %d but its log does not say \"procs\":%d:\n%s", n, n, log)
	}
	return p, nil
}

// rproxyConfig is the suite's rproxy YAML config: the default except for
// limits.max_clients and, unless procs is 0 (auto), procs.
func rproxyConfig(maxClients, procs int) string {
	c := fmt.Sprintf("limits:\n  max_clients: %d\n", maxClients)
	if procs != 0 {
		c += fmt.Sprintf("procs: %d\n", procs)
	}
	return c
}

// rotate returns targets starting at index round, so that no target always
// runs first (or right after the same neighbour) within a round.
func rotate(targets []string, round int) []string {
	k := round % len(targets)
	return append(slices.Clone(targets[k:]), targets[:k]...)
}

// runAll runs every selected scenario for every round and target, then the
// default list once per target.
func (s *suite) runAll(ctx context.Context) (*results, error) {
	cfg := s.cfg
	s.meta = meta{date: time.Now(), nproc: procs.MachineCPUs(), cpu: procs.CPUModel(), loadStart: procs.LoadAvg(),
		redis: procs.FirstLine("redis-server", "--version"), rounds: cfg.rounds, duration: cfg.duration,
		warmup: cfg.warmup, quick: cfg.quick, idleConns: cfg.idleConns, listN: cfg.listN, maxClients: s.maxClients(),
		procs: cfg.procs}
	if cfg.pinRedis != "" || cfg.pinProxies != "" {
		s.meta.pinning = fmt.Sprintf("redis-server on CPUs %s, proxies on %s, the load (this process) on %s",
			orAny(cfg.pinRedis), orAny(cfg.pinProxies), procs.AllowedCPUs())
	}
	if s.nutcracker != "" {
		s.meta.nutcracker = procs.FirstLine(s.nutcracker, "--version")
	}
	res := newResults()
	var scalingProcs []int
	if slices.ContainsFunc(s.scenarios, func(sc scenario) bool { return sc.kind == kindScaling }) {
		scalingProcs = cfg.procs
	}
	st, err := s.startStack("main", scalingProcs)
	if err != nil {
		return nil, err
	}
	defer s.stopStack(st)
	if p, ok := st.servers["rproxy"]; ok {
		// Temp paths say nothing to a reader of the report; the commit does.
		args := slices.Clone(p.Cmd.Args)
		for i, a := range args {
			if strings.HasPrefix(a, s.dir) {
				args[i] = filepath.Base(a)
			}
		}
		s.meta.rproxy = strings.Join(args, " ")
		s.meta.rproxyBuild = "binary " + s.cfg.rproxy
		if s.cfg.rproxy == "" {
			s.meta.rproxyBuild = "built from ./cmd/rproxy at " + procs.FirstLine("git", "-C", s.root, "describe", "--always", "--dirty")
		}
	}
	for _, t := range cfg.targets {
		fmt.Fprintf(s.log, "%-13s on %s (pid %d)\n", t, st.servers[t].Addr, st.servers[t].Pid())
	}
	for _, n := range scalingProcs {
		p := st.servers[scalingTarget(n)]
		fmt.Fprintf(s.log, "%-13s on %s (pid %d)\n", scalingTarget(n), p.Addr, p.Pid())
	}
	if err := s.prepopulate(ctx, st.redis.Addr, s.scenarios); err != nil {
		return nil, err
	}

	for round := range cfg.rounds {
		for _, sc := range s.scenarios {
			order := rotate(scenarioTargets(sc, cfg.targets, cfg.procs), round)
			switch sc.kind {
			case kindList:
				continue
			case kindIdle:
				if err := s.runIdle(ctx, sc, round, order, res); err != nil {
					return nil, fmt.Errorf("%s, round %d: %w", sc.name, round+1, err)
				}
				continue
			}
			for _, t := range order {
				smp, err := s.measure(ctx, st, sc, t)
				if err != nil {
					return nil, fmt.Errorf("%s against %s, round %d: %w", sc.name, t, round+1, err)
				}
				s.progress(round, sc, t, smp)
				res.add(sc.name, t, smp)
			}
		}
	}
	if slices.ContainsFunc(s.scenarios, func(sc scenario) bool { return sc.kind == kindList }) {
		for _, t := range cfg.targets {
			o, err := s.defaultList(ctx, t, st.servers[t].Addr)
			if err != nil {
				return nil, err
			}
			if err := st.alive(); err != nil {
				return nil, err
			}
			res.lists[t] = o
			fmt.Fprintf(s.log, "defaultlist %-10s %d tests ok, %d failed\n", t, len(o.rps), len(o.failed))
		}
	}
	return res, nil
}

func (s *suite) progress(round int, sc scenario, target string, smp sample) {
	if smp.skip != "" {
		fmt.Fprintf(s.log, "round %d/%d %-11s %-13s skipped: %s\n", round+1, s.cfg.rounds, sc.name, target, smp.skip)
		return
	}
	extra := ""
	if !math.IsNaN(smp.rssPerConn) {
		extra = fmt.Sprintf("  %.1f KB/idle conn", smp.rssPerConn)
	}
	fmt.Fprintf(s.log, "round %d/%d %-11s %-13s %9.0f ops/s  p50 %5.0f µs  p99 %6.0f µs  upstream %5.1f/100  errors %d%s\n",
		round+1, s.cfg.rounds, sc.name, target, smp.ops, smp.p50, smp.p99, smp.upstream, smp.errors, extra)
}

// prepopulate SETs, straight on Redis, every key the scenarios read, so
// GETs find values from the first round on. Scenarios sharing a key prefix
// share the keys; the largest key space wins.
func (s *suite) prepopulate(ctx context.Context, addr string, scs []scenario) error {
	type space struct {
		prefix string
		size   int
	}
	keys := map[space]uint64{}
	var order []space
	for _, sc := range scs {
		if sc.kind == kindList || sc.kind == kindStampede {
			continue // the stampede's writer creates its key
		}
		k := space{sc.load.KeyPrefix, sc.load.ValueSize}
		if _, ok := keys[k]; !ok {
			order = append(order, k)
		}
		keys[k] = max(keys[k], sc.load.Keys)
	}
	for _, k := range order {
		cfg := load.DefaultConfig()
		cfg.Addr, cfg.KeyPrefix, cfg.ValueSize, cfg.Keys = addr, k.prefix, k.size, keys[k]
		d, err := load.Prepopulate(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(s.log, "prepopulated %d keys %s* of %d bytes in %v\n", keys[k], k.prefix, k.size, d.Round(time.Millisecond))
	}
	return nil
}

// measure runs sc's load against target once and reads, around it, the CPU
// time of the target and of redis-server and Redis's command counts.
func (s *suite) measure(ctx context.Context, st *stack, sc scenario, target string) (sample, error) {
	p := st.servers[target]
	if err := st.alive(); err != nil {
		return sample{}, err
	}
	cfg := sc.load
	cfg.Addr, cfg.Duration, cfg.Warmup = p.Addr, s.cfg.duration, s.cfg.warmup
	if err := st.ctl.resetStats(); err != nil {
		return sample{}, err
	}
	t0, err1 := procs.CPUTicks(p.Pid())
	r0, err2 := procs.CPUTicks(st.redis.Pid())

	var (
		stopWriter = func() error { return nil }
		writerDone sync.WaitGroup
		writerErr  error
		writes     int
	)
	if sc.kind == kindStampede {
		wctx, cancel := context.WithCancel(ctx)
		writerDone.Go(func() {
			writes, writerErr = st.ctl.rewriteEvery(wctx, stampedeKey, strings.Repeat("v", cfg.ValueSize),
				stampedeTTL, stampedeTTL)
		})
		stopWriter = func() error { cancel(); writerDone.Wait(); return writerErr }
	}
	res, err := load.Run(ctx, cfg)
	werr := stopWriter()

	t1, err3 := procs.CPUTicks(p.Pid())
	r1, err4 := procs.CPUTicks(st.redis.Pid())
	if aerr := st.alive(); aerr != nil {
		return sample{}, aerr
	}
	if err != nil {
		return sample{}, err
	}
	if werr != nil {
		return sample{}, fmt.Errorf("stampede writer: %w", werr)
	}
	if err := ctx.Err(); err != nil {
		return sample{}, err
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return sample{}, fmt.Errorf("reading CPU time: %w", err)
	}
	calls, err := st.ctl.commandCalls()
	if err != nil {
		return sample{}, err
	}
	if s.cfg.verbose {
		_ = res.WriteText(s.log)
		if sc.kind == kindStampede {
			fmt.Fprintf(s.log, "stampede writer: %d SETs\n", writes)
		}
	}
	return toSample(res, calls, sc.counted, target, t1-t0, r1-r0, s.clk)
}

// toSample turns a load result and the counters read around it into a
// sample. Per-request figures divide by every command sent, warm-up
// included, because the CPU times and command counts cover the warm-up too.
func toSample(res load.Result, calls map[string]int64, counted []string, target string,
	targetTicks, redisTicks int64, clk float64) (sample, error) {
	n := float64(res.TotalOps)
	if n == 0 || res.Ops == 0 {
		return sample{}, fmt.Errorf("no request was answered (%d connection errors: %s)",
			res.ConnErrors, strings.Join(res.ConnErrorSamples, "; "))
	}
	perReq := func(ticks int64) float64 { return float64(ticks) / clk * 1e6 / n }
	var up int64
	for _, c := range counted {
		up += calls[c]
	}
	smp := sample{
		ops: res.OpsPerSec,
		p50: float64(res.Latency.P50), p99: float64(res.Latency.P99), p999: float64(res.Latency.P999),
		proxyCPU: math.NaN(), redisCPU: perReq(redisTicks),
		upstream:   100 * float64(up) / n,
		nulls:      math.NaN(),
		errors:     res.Errors + res.ConnErrors,
		rssPerConn: math.NaN(),
	}
	if target != "redis" {
		smp.proxyCPU = perReq(targetTicks)
	}
	if res.Reads > 0 {
		smp.nulls = 100 * float64(res.Nulls) / float64(res.Reads)
	}
	return smp, nil
}

// runIdle runs the idle-connections scenario for one round on a fresh
// stack. Fresh processes matter here: an allocator keeps memory that
// connections of an earlier round freed, so a reused process would show
// less growth in later rounds.
func (s *suite) runIdle(ctx context.Context, sc scenario, round int, order []string, res *results) error {
	need := uint64(s.cfg.idleConns + sc.load.Clients + 200)
	if s.noFile < need {
		reason := fmt.Sprintf("this process may open only %d files (RLIMIT_NOFILE hard limit), %d needed; raise ulimit -Hn",
			s.noFile, need)
		for _, t := range order {
			smp := sample{skip: reason}
			s.progress(round, sc, t, smp)
			res.add(sc.name, t, smp)
		}
		return nil
	}
	st, err := s.startStack(fmt.Sprintf("idle-%d", round+1), nil)
	if err != nil {
		return err
	}
	defer s.stopStack(st)
	if err := s.prepopulate(ctx, st.redis.Addr, []scenario{sc}); err != nil {
		return err
	}
	for _, t := range order {
		smp, err := s.measureIdle(ctx, st, sc, t)
		if err != nil {
			return fmt.Errorf("against %s: %w", t, err)
		}
		s.progress(round, sc, t, smp)
		res.add(sc.name, t, smp)
	}
	return nil
}

// measureIdle opens the idle connections to target, reads the growth of
// its RSS, runs the load with them open, and closes them.
func (s *suite) measureIdle(ctx context.Context, st *stack, sc scenario, target string) (sample, error) {
	p := st.servers[target]
	n := s.cfg.idleConns
	if reason, err := s.idleLimit(st, target, n+sc.load.Clients); err != nil || reason != "" {
		return sample{skip: reason}, err
	}
	before, err := procs.RSSKB(p.Pid())
	if err != nil {
		return sample{}, fmt.Errorf("reading RSS: %w", err)
	}
	conns, err := openIdle(ctx, p.Addr, n)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return sample{}, cerr
		}
		if aerr := st.alive(); aerr != nil {
			return sample{}, aerr
		}
		return sample{skip: err.Error()}, nil
	}
	defer closeIdle(conns)
	smp, err := s.measure(ctx, st, sc, target)
	if err != nil {
		return sample{}, err
	}
	// Read after the load, which ran with the idle connections open: by
	// then the target has settled them (rproxy parks a client idle for
	// limits.idle_park_after and then returns the memory of the goroutines
	// that ended).
	after, err := procs.RSSKB(p.Pid())
	if err != nil {
		return sample{}, fmt.Errorf("reading RSS: %w", err)
	}
	smp.rssPerConn = float64(after-before) / float64(n)
	return smp, nil
}

// idleLimit returns why target cannot hold conns clients, or "" if it can.
func (s *suite) idleLimit(st *stack, target string, conns int) (string, error) {
	if target == "redis" {
		// redis-server lowers maxclients itself when it cannot raise its
		// RLIMIT_NOFILE to maxclients + 32.
		mc, err := st.ctl.configInt("maxclients")
		if err != nil {
			return "", err
		}
		if mc < int64(conns) {
			return fmt.Sprintf("redis-server maxclients is %d, %d needed (its RLIMIT_NOFILE is too low; raise ulimit -n)",
				mc, conns), nil
		}
		return "", nil
	}
	lim, err := procs.OpenFilesLimit(st.servers[target].Pid())
	if err != nil {
		return "", fmt.Errorf("reading %s's open files limit: %w", target, err)
	}
	if need := uint64(conns + 64); lim < need {
		return fmt.Sprintf("%s may open only %d files, %d needed (raise ulimit -n)", target, lim, need), nil
	}
	return "", nil
}

// openIdle opens n connections to addr, each of which sends one PING and
// reads the PONG, so the server has set the connection up fully.
func openIdle(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	const workers = 32
	conns := make([]net.Conn, n)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			d := net.Dialer{Timeout: 5 * time.Second}
			buf := make([]byte, 7)
			for i := w; i < n && errs[w] == nil; i += workers {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					errs[w] = fmt.Errorf("idle connection %d: %w", i, err)
					return
				}
				conns[i] = c
				errs[w] = pingConn(c, buf)
				if errs[w] != nil {
					errs[w] = fmt.Errorf("idle connection %d: %w", i, errs[w])
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			continue
		}
		opened := 0
		for _, c := range conns {
			if c != nil {
				opened++
			}
		}
		closeIdle(conns)
		return nil, fmt.Errorf("opening %d connections to %s: %d opened, then %w", n, addr, opened, err)
	}
	return conns, nil
}

func pingConn(c net.Conn, buf []byte) error {
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", buf)
	}
	return c.SetDeadline(time.Time{})
}

// closeIdle closes the connections with a reset rather than a FIN, so
// that 10,000 sockets per run do not linger in TIME_WAIT on a shared machine.
func closeIdle(conns []net.Conn) {
	for _, c := range conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
}

func orAny(cpus string) string {
	if cpus == "" {
		return "any"
	}
	return cpus
}
