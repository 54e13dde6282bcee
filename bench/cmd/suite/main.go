// Command suite runs rproxy's benchmark scenarios against direct Redis,
// twemproxy (nutcracker, if installed) and rproxy on the same machine,
// interleaved over several rounds, and writes a Markdown report with
// medians, spreads and ratios, and SVG charts, into bench/results/<date>/.
//
//	go run ./bench/cmd/suite             # make bench: about 6.5 minutes on 2 cores
//	go run ./bench/cmd/suite -quick      # make bench-quick: under 2 minutes
//	go run ./bench/cmd/suite -scenarios hot,zipf-0.99 -targets redis,rproxy -rounds 5
//	go run ./bench/cmd/suite -scenarios scaling -procs 1,2,4,8,15   # rproxy per procs value
//
// Load comes from bench/load, in process; the redis-benchmark default test
// list is run by redis-benchmark itself. Around every run the suite reads
// the CPU time of the target and of redis-server from /proc and Redis's
// INFO commandstats, so the report gives CPU per request and the share of
// client requests that reached Redis. See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rproxy/rproxy/bench/internal/procs"
)

// Children are started with Pdeathsig, which fires when the *thread* that
// started them exits. Locking main to the main thread keeps that thread
// alive exactly as long as the process; run starts every child from it.
func init() { runtime.LockOSThread() }

// config is the parsed command line.
type config struct {
	rounds    int
	quick     bool
	duration  time.Duration // measured part of each run
	warmup    time.Duration // unmeasured start of each run
	out       string        // output directory
	targets   []string
	scenarios []string
	procs     []int  // scaling scenarios: one rproxy per value
	rproxy    string // prebuilt rproxy binary; "" builds ./cmd/rproxy
	idleConns int
	listN     int // redis-benchmark -n for the default list
	verbose   bool
	// pinRedis and pinProxies are CPU lists (taskset -c) for redis-server
	// and for the proxies (nutcracker and every rproxy); "" leaves them to
	// the scheduler. The load generator is this process: pin it by
	// starting the suite under taskset.
	pinRedis, pinProxies string
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "suite: error:", err)
		stop()
		os.Exit(1)
	}
}

// Run lengths. Full runs are long enough for /proc's 10 ms CPU ticks to
// resolve CPU per request to about 1%; quick runs trade that for speed.
const (
	fullDuration  = 3 * time.Second
	fullWarmup    = 500 * time.Millisecond
	quickDuration = 500 * time.Millisecond
	quickWarmup   = 200 * time.Millisecond
	fullListN     = 20000
	quickListN    = 2000
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var targets, scenarios, procsFlag string
	var names, defaults []string
	for _, s := range allScenarios(defaultIdleConns) {
		names = append(names, s.name)
		if !s.optional {
			defaults = append(defaults, s.name)
		}
	}
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds; the report gives medians over them (at least 3 for a spread)")
	fs.BoolVar(&c.quick, "quick", false, fmt.Sprintf("short runs (%v + %v warm-up; default list -n %d): under 2 minutes",
		quickDuration, quickWarmup, quickListN))
	fs.DurationVar(&c.duration, "duration", 0, fmt.Sprintf("measured time per run (default %v, %v with -quick)",
		fullDuration, quickDuration))
	fs.StringVar(&c.out, "out", "", "output directory (default bench/results/<YYYY-MM-DD> in the module root)")
	fs.StringVar(&targets, "targets", "redis,twemproxy,rproxy", "comma-separated targets: redis, twemproxy, rproxy")
	fs.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios to run (default all but scaling-*): "+
		strings.Join(names, ", ")+"; "+scalingGroup+" = scaling-p1,scaling-p16")
	fs.StringVar(&procsFlag, "procs", "", fmt.Sprintf("comma-separated rproxy procs values for the scaling scenarios "+
		"(default 1,2,4 up to the CPU count, and the CPU count: %s here)", joinInts(defaultProcs(procs.MachineCPUs()))))
	fs.StringVar(&c.rproxy, "rproxy", "", "rproxy binary (default: go build ./cmd/rproxy into a temp dir)")
	fs.IntVar(&c.idleConns, "idle-conns", defaultIdleConns, "idle connections in the idle-10k scenario")
	fs.BoolVar(&c.verbose, "v", false, "print every run's full result; keep the temp dir with the server logs")
	fs.StringVar(&c.pinRedis, "pin-redis", "", "CPU list (taskset -c) for redis-server, e.g. 0; the suite itself (the load) is pinned with taskset")
	fs.StringVar(&c.pinProxies, "pin-proxies", "", "CPU list (taskset -c) for nutcracker and rproxy, e.g. 1-8")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.rounds < 1 {
		return c, errors.New("-rounds must be at least 1")
	}
	if c.idleConns < 1 {
		return c, errors.New("-idle-conns must be at least 1")
	}
	c.warmup, c.listN = fullWarmup, fullListN
	if c.quick {
		c.warmup, c.listN = quickWarmup, quickListN
		if c.duration == 0 {
			c.duration = quickDuration
		}
	}
	if c.duration == 0 {
		c.duration = fullDuration
	}
	if c.duration < 100*time.Millisecond {
		return c, errors.New("-duration must be at least 100ms")
	}
	c.warmup = min(c.warmup, c.duration/2)
	c.targets = splitList(targets)
	for _, t := range c.targets {
		if t != "redis" && t != "twemproxy" && t != "rproxy" {
			return c, fmt.Errorf("unknown target %q (want redis, twemproxy, rproxy)", t)
		}
	}
	if len(c.targets) == 0 {
		return c, errors.New("-targets must not be empty")
	}
	for _, s := range splitList(scenarios) {
		if s == scalingGroup {
			for _, n := range names {
				if strings.HasPrefix(n, scalingGroup+"-") && !slices.Contains(c.scenarios, n) {
					c.scenarios = append(c.scenarios, n)
				}
			}
			continue
		}
		if !slices.Contains(names, s) {
			return c, fmt.Errorf("unknown scenario %q (want some of %s, or %s)", s, strings.Join(names, ", "), scalingGroup)
		}
		if !slices.Contains(c.scenarios, s) {
			c.scenarios = append(c.scenarios, s)
		}
	}
	if len(c.scenarios) == 0 {
		c.scenarios = defaults
	}
	var err error
	if c.procs, err = parseProcs(procsFlag, procs.MachineCPUs()); err != nil {
		return c, err
	}
	if slices.ContainsFunc(c.scenarios, func(s string) bool { return strings.HasPrefix(s, scalingGroup+"-") }) &&
		!slices.Contains(c.targets, "rproxy") {
		return c, errors.New("the scaling scenarios run rproxy at each procs value: -targets must include rproxy")
	}
	return c, nil
}

// joinInts formats ns as a comma-separated list: 1,2,4.
func joinInts(ns []int) string {
	var ss []string
	for _, n := range ns {
		ss = append(ss, strconv.Itoa(n))
	}
	return strings.Join(ss, ",")
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// run starts the servers, runs the scenarios and writes the report.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	for _, bin := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found in PATH; install it with: sudo apt-get install -y redis-server redis-tools", bin)
		}
	}
	root, err := procs.ModuleRoot()
	if err != nil {
		return err
	}
	children := &procs.Set{Pin: map[string]string{"redis-server": cfg.pinRedis, "nutcracker": cfg.pinProxies, "rproxy": cfg.pinProxies}}
	if cfg.pinRedis != "" || cfg.pinProxies != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return errors.New("-pin-redis and -pin-proxies need taskset (util-linux) in PATH")
		}
	}
	s := &suite{cfg: cfg, log: stderr, children: children, clk: procs.ClockTicks(), root: root}
	if slices.Contains(cfg.targets, "twemproxy") {
		if s.nutcracker, err = procs.FindNutcracker(); err != nil {
			fmt.Fprintln(stderr, "note: nutcracker (twemproxy) is not installed; skipping target twemproxy")
			s.cfg.targets = slices.DeleteFunc(slices.Clone(cfg.targets), func(t string) bool { return t == "twemproxy" })
			if len(s.cfg.targets) == 0 {
				return errors.New("no targets left")
			}
		}
	}
	for _, sc := range allScenarios(cfg.idleConns) {
		if slices.Contains(cfg.scenarios, sc.name) {
			s.scenarios = append(s.scenarios, sc)
		}
	}
	if s.noFile, err = procs.RaiseNoFile(); err != nil {
		return err
	}

	if s.dir, err = os.MkdirTemp("", "rproxy-suite-"); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		s.children.StopAll()
		if cfg.verbose {
			fmt.Fprintln(stderr, "logs kept in", s.dir)
		} else {
			os.RemoveAll(s.dir)
		}
	}()
	if slices.Contains(s.cfg.targets, "rproxy") && cfg.rproxy == "" {
		fmt.Fprintln(stderr, "building ./cmd/rproxy ...")
		if s.rproxyBin, err = procs.BuildRproxy(root, s.dir); err != nil {
			return err
		}
	} else {
		s.rproxyBin = cfg.rproxy
	}

	start := time.Now()
	res, err := s.runAll(ctx)
	if err != nil {
		return err
	}
	out := cfg.out
	if out == "" {
		out = filepath.Join(root, "bench", "results", start.Format("2006-01-02"))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	charts, err := writeCharts(out, s.scenarios, s.cfg.targets, res)
	if err != nil {
		return err
	}
	s.meta.took = time.Since(start)
	s.meta.loadEnd = procs.LoadAvg()
	report := renderReport(s.meta, s.scenarios, s.cfg.targets, res, charts)
	if err := os.WriteFile(filepath.Join(out, "suite.md"), []byte(report), 0o644); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	if _, err := io.WriteString(stdout, report); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s and %d charts in %s (%s)\n", filepath.Join(out, "suite.md"), len(charts), out,
		time.Since(start).Round(time.Second))
	return nil
}
