// Command compare runs redis-benchmark against direct Redis, twemproxy
// (nutcracker) and rproxy on the same machine, interleaved over several
// rounds, and prints medians and ratios as a Markdown table.
//
//	go run ./bench/cmd/compare -rounds 5
//	go run ./bench/cmd/compare -defaultlist
//
// See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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

type config struct {
	rounds, requests, clients, keyspace int
	datasize                            int
	tests                               []string
	pipelines                           []int
	targets                             []string
	rproxy                              string
	rproxyArgs                          []string
	out                                 string
	verbose, defaultList                bool
	requestsSet                         bool
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "compare: error:", err)
		os.Exit(1)
	}
}

func parseFlags() (*config, error) {
	c := &config{}
	var tests, pipelines, targets, rproxyArgs string
	flag.IntVar(&c.rounds, "rounds", 5, "interleaved rounds; the table reports medians over rounds")
	flag.IntVar(&c.requests, "requests", 100000, "redis-benchmark -n at -P 1; at -P N it is requests*min(N,8) "+
		"(-defaultlist: -n, 20000 unless set)")
	flag.IntVar(&c.clients, "clients", 50, "redis-benchmark -c")
	flag.IntVar(&c.keyspace, "keyspace", 100000, "redis-benchmark -r")
	flag.IntVar(&c.datasize, "datasize", 3, "redis-benchmark -d: value size in bytes for SET/GET")
	flag.StringVar(&tests, "tests", "get,set", "comma-separated redis-benchmark -t tests, one run each")
	flag.StringVar(&pipelines, "pipelines", "1,16", "comma-separated redis-benchmark -P values")
	flag.StringVar(&targets, "targets", "redis,twemproxy,rproxy", "comma-separated targets: redis, twemproxy, rproxy")
	flag.StringVar(&c.rproxy, "rproxy", "", "rproxy binary (default: go build ./cmd/rproxy into a temp dir)")
	flag.StringVar(&rproxyArgs, "rproxy-args", "", "extra rproxy arguments, space-separated")
	flag.StringVar(&c.out, "out", "", "also write the Markdown report to this file")
	flag.BoolVar(&c.verbose, "v", false, "print every command and its raw output; keep the temp dir with server logs")
	flag.BoolVar(&c.defaultList, "defaultlist", false, "run redis-benchmark's default test list once per target "+
		"and report which tests fail")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	flag.Visit(func(f *flag.Flag) { c.requestsSet = c.requestsSet || f.Name == "requests" })
	if c.defaultList && !c.requestsSet {
		c.requests = 20000
	}
	if c.rounds < 1 || c.requests < 1 || c.clients < 1 || c.keyspace < 1 || c.datasize < 1 {
		return nil, errors.New("-rounds, -requests, -clients, -keyspace and -datasize must be positive")
	}
	c.tests = splitList(tests)
	c.targets = splitList(targets)
	c.rproxyArgs = strings.Fields(rproxyArgs)
	for _, p := range splitList(pipelines) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad -pipelines value %q", p)
		}
		c.pipelines = append(c.pipelines, n)
	}
	for _, t := range c.targets {
		if t != "redis" && t != "twemproxy" && t != "rproxy" {
			return nil, fmt.Errorf("unknown target %q (want redis, twemproxy, rproxy)", t)
		}
	}
	if len(c.tests) == 0 || len(c.pipelines) == 0 || len(c.targets) == 0 {
		return nil, errors.New("-tests, -pipelines and -targets must not be empty")
	}
	return c, nil
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

func run(cfg *config) error {
	for _, bin := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found in PATH", bin)
		}
	}
	nutcracker := ""
	if slices.Contains(cfg.targets, "twemproxy") {
		var err error
		if nutcracker, err = procs.FindNutcracker(); err != nil {
			fmt.Fprintln(os.Stderr, "note: nutcracker (twemproxy) is not installed; skipping target twemproxy")
			cfg.targets = slices.DeleteFunc(cfg.targets, func(t string) bool { return t == "twemproxy" })
			if len(cfg.targets) == 0 {
				return errors.New("no targets left")
			}
		}
	}

	dir, err := os.MkdirTemp("", "rproxy-compare-")
	if err != nil {
		return err
	}
	var children procs.Set // every server started, killed at exit
	cleanup := func() {
		children.StopAll()
		if cfg.verbose {
			fmt.Fprintln(os.Stderr, "logs kept in", dir)
		} else {
			os.RemoveAll(dir)
		}
	}
	defer cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\ncompare: %v, stopping children\n", s)
		cleanup()
		os.Exit(130)
	}()

	if slices.Contains(cfg.targets, "rproxy") && cfg.rproxy == "" {
		fmt.Fprintln(os.Stderr, "building ./cmd/rproxy ...")
		root, err := procs.ModuleRoot()
		if err != nil {
			return err
		}
		if cfg.rproxy, err = procs.BuildRproxy(root, dir); err != nil {
			return err
		}
	}

	redis, err := children.StartRedis(dir)
	if err != nil {
		return err
	}
	servers := map[string]*procs.Proc{"redis": redis}
	for _, t := range cfg.targets {
		switch t {
		case "twemproxy":
			servers[t], err = children.StartNutcracker(dir, nutcracker, redis.Addr)
		case "rproxy":
			servers[t], err = children.StartRproxy(dir, cfg.rproxy, redis.Addr, cfg.rproxyArgs...)
		}
		if err != nil {
			return err
		}
	}
	b := &bench{cfg: cfg, servers: servers, redis: redis, clk: procs.ClockTicks(), notes: map[string][]string{}}
	for _, t := range cfg.targets {
		fmt.Fprintf(os.Stderr, "%-9s on %s (pid %d)\n", t, servers[t].Addr, servers[t].Pid())
	}

	var report string
	if cfg.defaultList {
		report, err = b.defaultList()
	} else {
		report, err = b.compare()
	}
	if report != "" {
		fmt.Print(report)
		if cfg.out != "" {
			if werr := os.WriteFile(cfg.out, []byte(report), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return err
}

// bench runs redis-benchmark against the started servers.
type bench struct {
	cfg     *config
	servers map[string]*procs.Proc // by target name; "redis" is also the upstream
	redis   *procs.Proc
	clk     float64             // clock ticks per second for /proc/PID/stat
	notes   map[string][]string // distinct stderr lines per target
	cmds    []string            // distinct command lines, in first-run order
}

// benchCmd is a redis-benchmark command line against target.
func (b *bench) benchCmd(target string, args ...string) []string {
	return append([]string{"redis-benchmark", "-h", "127.0.0.1", "-p", procs.Port(b.servers[target].Addr)}, args...)
}

// exec runs a redis-benchmark command line and returns its stdout and stderr.
func (b *bench) exec(target string, argv []string, timeout time.Duration) (stdout, stderr string, err error) {
	line := strings.Join(argv, " ")
	if !slices.Contains(b.cmds, line) {
		b.cmds = append(b.cmds, line)
	}
	if b.cfg.verbose {
		fmt.Fprintf(os.Stderr, "$ %s   # %s\n", line, target)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if b.cfg.verbose {
		fmt.Fprint(os.Stderr, o.String(), e.String())
	}
	for _, l := range strings.Split(e.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(b.notes[target], l) {
			b.notes[target] = append(b.notes[target], l)
		}
	}
	return o.String(), e.String(), err
}

// checkServers returns an error if any server has exited.
func (b *bench) checkServers() error {
	for _, p := range b.servers {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// requestsFor is the -n used at pipeline depth p: deeper pipelines run
// much faster, so they get more requests to last long enough to measure.
func (b *bench) requestsFor(p int) int { return b.cfg.requests * min(p, 8) }

// measure runs one redis-benchmark test against target and returns its
// result together with the CPU time the proxy and redis-server used.
func (b *bench) measure(target, test string, pipeline int) (sample, error) {
	n := b.requestsFor(pipeline)
	argv := b.benchCmd(target, "-c", strconv.Itoa(b.cfg.clients), "-n", strconv.Itoa(n),
		"-r", strconv.Itoa(b.cfg.keyspace), "-P", strconv.Itoa(pipeline), "-d", strconv.Itoa(b.cfg.datasize), "-t", test, "--csv")
	if err := b.checkServers(); err != nil {
		return sample{}, err
	}
	server := b.servers[target]
	proxy0, err1 := procs.CPUTicks(server.Pid())
	redis0, err2 := procs.CPUTicks(b.redis.Pid())
	stdout, stderr, err := b.exec(target, argv, 10*time.Minute)
	proxy1, err3 := procs.CPUTicks(server.Pid())
	redis1, err4 := procs.CPUTicks(b.redis.Pid())
	if err := b.checkServers(); err != nil {
		return sample{}, err
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return sample{}, fmt.Errorf("reading CPU time: %w", err)
	}
	fail := func(why string) error {
		return fmt.Errorf("%s against %s: %s\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), target, why, stdout, stderr)
	}
	if err != nil {
		return sample{}, fail(err.Error())
	}
	rows, other, err := parseCSV(stdout)
	if err != nil {
		return sample{}, fail("unparsable output: " + err.Error())
	}
	if len(other) > 0 {
		return sample{}, fail("unexpected output " + strconv.Quote(strings.Join(other, "\n")))
	}
	var row *benchRow
	for i := range rows {
		if f := strings.Fields(rows[i].Test); len(f) > 0 && strings.EqualFold(f[0], test) {
			row = &rows[i]
		}
	}
	if row == nil {
		return sample{}, fail(fmt.Sprintf("no result row for test %q", test))
	}
	usPerReq := func(ticks int64) float64 { return float64(ticks) / b.clk * 1e6 / float64(n) }
	s := sample{rps: row.RPS, p50: row.P50, p99: row.P99, redisCPU: usPerReq(redis1 - redis0)}
	if target != "redis" {
		s.proxyCPU = usPerReq(proxy1 - proxy0)
	}
	return s, nil
}

// compare runs all (test, pipeline, target) combinations for cfg.rounds
// rounds and returns the Markdown report.
func (b *bench) compare() (string, error) {
	cfg := b.cfg
	start := time.Now()
	header := b.header()
	// Warm-up, not recorded: fills the keyspace so GET finds values from
	// the first round on, and lets each proxy set up its connections.
	for _, t := range cfg.targets {
		argv := b.benchCmd(t, "-c", strconv.Itoa(cfg.clients), "-n", strconv.Itoa(2*cfg.keyspace),
			"-r", strconv.Itoa(cfg.keyspace), "-P", "16", "-d", strconv.Itoa(cfg.datasize), "-t", "set,get", "--csv")
		if out, stderr, err := b.exec(t, argv, 5*time.Minute); err != nil {
			return "", fmt.Errorf("warm-up %s against %s: %v\n%s%s", strings.Join(argv, " "), t, err, out, stderr)
		}
	}
	b.cmds = nil // list only the measured commands in the report

	res := results{}
	for round := range cfg.rounds {
		// Rotate the start so that no target always runs first (or right
		// after the same neighbour) within a round.
		order := append(slices.Clone(cfg.targets[round%len(cfg.targets):]), cfg.targets[:round%len(cfg.targets)]...)
		for _, test := range cfg.tests {
			for _, p := range cfg.pipelines {
				for _, t := range order {
					s, err := b.measure(t, test, p)
					if err != nil {
						return "", err
					}
					res.add(caseKey{test, p}, t, s)
					fmt.Fprintf(os.Stderr, "round %d/%d %-4s P=%-3d %-9s %9.0f rps  p50 %.3f ms  p99 %.3f ms\n",
						round+1, cfg.rounds, test, p, t, s.rps, s.p50, s.p99)
				}
			}
		}
	}

	var r strings.Builder
	r.WriteString(header)
	fmt.Fprintf(&r, "- duration: %s, load average at end: %s\n\n", time.Since(start).Round(time.Second), procs.LoadAvg())
	r.WriteString(markdownTable(res, cfg.tests, cfg.pipelines, cfg.targets))
	r.WriteString("\nrps vs X and p50 vs redis are medians of per-round ratios; " +
		"CPU µs/req is process CPU time (utime+stime) during the run divided by -n.\n")
	b.writeCommands(&r)
	return r.String(), nil
}

// header describes the machine and the software under test.
func (b *bench) header() string {
	cfg := b.cfg
	var r strings.Builder
	title := "rproxy comparison"
	if cfg.defaultList {
		title = "rproxy comparison: redis-benchmark default test list"
	}
	fmt.Fprintf(&r, "## %s\n\n", title)
	fmt.Fprintf(&r, "- date: %s\n", time.Now().Format(time.RFC3339))
	fmt.Fprintf(&r, "- machine: %d CPUs (nproc), %s; load average at start: %s\n", procs.MachineCPUs(), procs.CPUModel(), procs.LoadAvg())
	fmt.Fprintf(&r, "- %s\n", procs.FirstLine("redis-server", "--version"))
	fmt.Fprintf(&r, "- %s\n", procs.FirstLine("redis-benchmark", "--version"))
	if p, ok := b.servers["twemproxy"]; ok {
		fmt.Fprintf(&r, "- %s (%s)\n", procs.FirstLine(p.Cmd.Path, "--version"), p.Cmd.Path)
	}
	if p, ok := b.servers["rproxy"]; ok {
		fmt.Fprintf(&r, "- rproxy: `%s`\n", strings.Join(p.Cmd.Args, " "))
	}
	if !cfg.defaultList {
		fmt.Fprintf(&r, "- rounds: %d, clients: %d, keyspace: %d, value size: %d bytes, target order rotated each round\n",
			cfg.rounds, cfg.clients, cfg.keyspace, cfg.datasize)
	}
	r.WriteString("\n")
	return r.String()
}

func (b *bench) writeCommands(r *strings.Builder) {
	r.WriteString("\nredis-benchmark command lines:\n\n```\n")
	for _, c := range b.cmds {
		r.WriteString(c + "\n")
	}
	r.WriteString("```\n")
	for _, t := range b.cfg.targets {
		for _, n := range b.notes[t] {
			fmt.Fprintf(r, "\nnote: redis-benchmark against %s printed on stderr: %s\n", t, n)
		}
	}
}

// defaultTests is redis-benchmark 7.0's default test list in run order:
// the -t name and the name printed in the CSV output. The LRANGE tests
// first fill a list with an LPUSH that cannot be selected on its own.
var defaultTests = []defaultTest{
	{"ping_inline", "PING_INLINE"}, {"ping_mbulk", "PING_MBULK"}, {"set", "SET"}, {"get", "GET"},
	{"incr", "INCR"}, {"lpush", "LPUSH"}, {"rpush", "RPUSH"}, {"lpop", "LPOP"}, {"rpop", "RPOP"},
	{"sadd", "SADD"}, {"hset", "HSET"}, {"spop", "SPOP"}, {"zadd", "ZADD"}, {"zpopmin", "ZPOPMIN"},
	{"", lrangePrefill},
	{"lrange_100", "LRANGE_100 (first 100 elements)"}, {"lrange_300", "LRANGE_300 (first 300 elements)"},
	{"lrange_500", "LRANGE_500 (first 500 elements)"}, {"lrange_600", "LRANGE_600 (first 600 elements)"},
	{"mset", "MSET (10 keys)"},
}

type defaultTest struct{ flag, name string }

const lrangePrefill = "LPUSH (needed to benchmark LRANGE)"

// listOutcome is what happened to the default test list against one target.
type listOutcome struct {
	rps    map[string]float64 // tests that completed
	failed map[string]string  // tests that failed, with the error output
	extra  []string           // CSV rows not in defaultTests (another redis-benchmark version)
}

// defaultList runs redis-benchmark without -t against every target.
// redis-benchmark 7.0 exits at the first error reply or closed connection,
// so after a failure it is run again with -t listing the tests not yet
// run; each test thus gets a verdict. The run fails if rproxy has any
// failed test or printed any warning.
func (b *bench) defaultList() (string, error) {
	cfg := b.cfg
	header := b.header()
	outcomes := map[string]*listOutcome{}
	for _, t := range cfg.targets {
		o := &listOutcome{rps: map[string]float64{}, failed: map[string]string{}}
		outcomes[t] = o
		var remaining []string
		for _, d := range defaultTests {
			remaining = append(remaining, d.name)
		}
		for first := true; len(remaining) > 0; first = false {
			argv := b.benchCmd(t, "-c", strconv.Itoa(cfg.clients), "-n", strconv.Itoa(cfg.requests), "--csv")
			if !first {
				var flags []string
				for _, d := range defaultTests {
					if d.flag != "" && slices.Contains(remaining, d.name) {
						flags = append(flags, d.flag)
					}
				}
				if len(flags) == 0 { // cannot select what is left
					for _, n := range remaining {
						o.failed[n] = "did not run"
					}
					break
				}
				argv = append(argv, "-t", strings.Join(flags, ","))
			}
			stdout, stderr, err := b.exec(t, argv, 5*time.Minute)
			if serr := b.checkServers(); serr != nil {
				return "", serr
			}
			rows, other, _ := parseCSV(stdout) // a failed run may print no CSV at all
			for _, row := range rows {
				if !slices.ContainsFunc(defaultTests, func(d defaultTest) bool { return d.name == row.Test }) {
					o.extra = append(o.extra, row.Test)
				}
				o.rps[row.Test] = row.RPS
				remaining = slices.DeleteFunc(remaining, func(n string) bool { return n == row.Test })
			}
			if err == nil {
				for _, n := range remaining {
					o.failed[n] = "did not run"
				}
				break
			}
			// Blame the first test that did not complete.
			failed := remaining[0]
			remaining = remaining[1:]
			msg := strings.Join(append(other, errorLines(stderr)...), "; ")
			if msg == "" || strings.Contains(err.Error(), "timed out") {
				msg = strings.TrimSpace(msg + " (" + err.Error() + ")")
			}
			o.failed[failed] = msg
			for _, n := range remaining {
				if strings.Contains(err.Error(), "timed out") ||
					(failed == lrangePrefill && strings.HasPrefix(n, "LRANGE_")) {
					o.failed[n] = "not run: " + failed + " failed"
				}
			}
			remaining = slices.DeleteFunc(remaining, func(n string) bool { _, ok := o.failed[n]; return ok })
		}
		fmt.Fprintf(os.Stderr, "%-9s %d tests ok, %d failed\n", t, len(o.rps), len(o.failed))
	}

	var r strings.Builder
	r.WriteString(header)
	fmt.Fprintf(&r, "rps per test (-n %d -c %d), or the error that ended the test:\n\n| test |", cfg.requests, cfg.clients)
	for _, t := range cfg.targets {
		r.WriteString(" " + t + " |")
	}
	r.WriteString("\n|---|" + strings.Repeat("---:|", len(cfg.targets)) + "\n")
	names := []string{}
	for _, d := range defaultTests {
		names = append(names, d.name)
	}
	for _, t := range cfg.targets {
		for _, n := range outcomes[t].extra {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		r.WriteString("| " + n + " |")
		for _, t := range cfg.targets {
			o := outcomes[t]
			if v, ok := o.rps[n]; ok {
				fmt.Fprintf(&r, " %.0f |", v)
			} else if msg, ok := o.failed[n]; ok {
				r.WriteString(" ERROR: " + strings.ReplaceAll(msg, "|", `\|`) + " |")
			} else {
				r.WriteString(" - |")
			}
		}
		r.WriteString("\n")
	}
	b.writeCommands(&r)

	if o, ok := outcomes["rproxy"]; ok {
		var problems []string
		if len(o.failed) > 0 {
			problems = append(problems, fmt.Sprintf("%d failed tests", len(o.failed)))
		}
		if n := len(b.notes["rproxy"]); n > 0 {
			problems = append(problems, fmt.Sprintf("%d warning/error lines on stderr", n))
		}
		if len(problems) > 0 {
			return r.String(), fmt.Errorf("rproxy: %s", strings.Join(problems, ", "))
		}
	}
	return r.String(), nil
}

// errorLines returns the lines of redis-benchmark's stderr that are not the
// generic warning about CONFIG, which proxies commonly do not support.
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "WARNING: Could not fetch server CONFIG") {
			out = append(out, l)
		}
	}
	return out
}
