// Command opschart runs rproxy through one scripted minute of traffic and
// charts its Prometheus metrics over time, for docs/operations.md
// section: client commands/s, GETs reaching Redis/s, hot-key tier hits/s,
// whether the tier serves, and policy denials/s.
//
//	go run ./bench/cmd/opschart            # about 70 s; writes bench/results/<date>/ops.{svg,png,md}
//	go run ./bench/cmd/opschart -out DIR -rproxy BINARY -samples FILE.tsv
//
// It builds ./cmd/rproxy, starts a private redis-server and rproxy (default
// config, -admin on a free port), SETs 100k keys straight into Redis, and
// then, scraping /metrics and Redis's INFO commandstats every 0.5 s:
//
//	 0-60 s  20 clients GET uniformly over the 100k keys
//	15-35 s  30 more clients GET one key: it turns hot and the tier serves it
//	   25 s  the tier's tracking connection is killed from Redis's side
//	35-50 s  a client sends KEYS every 100 ms, which the default policy denies
//
// The chart is SVG, converted to PNG when rsvg-convert is installed; ops.md
// holds the scenario, the machine, medians per phase and what the run
// showed around each event; -samples also writes every scrape's values.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/rproxy/rproxy/bench/internal/procs"
	"github.com/rproxy/rproxy/bench/load"
)

// Children are started with Pdeathsig, which fires when the *thread* that
// started them exits. Locking main to the main thread keeps that thread
// alive exactly as long as the process; run starts every child from it.
func init() { runtime.LockOSThread() }

func main() {
	fs := flag.NewFlagSet("opschart", flag.ContinueOnError)
	out := fs.String("out", "", "output directory (default bench/results/<YYYY-MM-DD> in the module root)")
	bin := fs.String("rproxy", "", "prebuilt rproxy binary (default: build ./cmd/rproxy)")
	samples := fs.String("samples", "", "also write every scrape's values to this TSV file")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := run(ctx, *out, *bin, *samples, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "opschart:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, out, bin, samplesPath string, stderr io.Writer) (err error) {
	root, err := procs.ModuleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "opschart-")
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			os.RemoveAll(dir)
		} else {
			err = fmt.Errorf("%w\n(logs kept in %s)", err, dir)
		}
	}()
	var children procs.Set
	defer children.StopAll()

	if bin == "" {
		fmt.Fprintln(stderr, "building ./cmd/rproxy ...")
		if bin, err = procs.BuildRproxy(root, dir); err != nil {
			return err
		}
	}
	redis, err := children.StartRedis(dir)
	if err != nil {
		return err
	}
	admin, err := procs.FreeAddr()
	if err != nil {
		return err
	}
	proxy, err := children.StartRproxy(dir, bin, redis.Addr, "-admin", admin)
	if err != nil {
		return err
	}
	servingAfter, err := waitServing(ctx, "http://"+admin+"/metrics")
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "rproxy's tier serves %v after rproxy answered PING\n", servingAfter.Round(time.Millisecond))
	fmt.Fprintf(stderr, "SET %d keys in Redis ...\n", keyCount)
	pre := load.DefaultConfig()
	pre.Addr, pre.Keys = redis.Addr, keyCount
	if _, err := load.Prepopulate(ctx, pre); err != nil {
		return err
	}

	fmt.Fprintf(stderr, "running the %v scenario ...\n", scenarioLen)
	cpu0, err := snapshotCPU(redis.Pid(), proxy.Pid())
	if err != nil {
		return err
	}
	rec, err := runScenario(ctx, proxy.Addr, admin, redis.Addr)
	if err != nil {
		return err
	}
	cpu1, err := snapshotCPU(redis.Pid(), proxy.Pid())
	if err != nil {
		return err
	}
	others, steal := othersShare(cpu0, cpu1)
	if others > 0.05 || steal > 0.05 {
		fmt.Fprintf(stderr, "warning: other processes took %.0f%% of the machine's CPU during the run, hypervisor steal %.0f%%: it shows in the chart\n",
			100*others, 100*steal)
	}
	for _, p := range []*procs.Proc{redis, proxy} {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	log, err := os.ReadFile(proxy.LogPath)
	if err != nil {
		return err
	}
	if rec.outages, err = parseTierLog(string(log), rec.start, scenarioLen.Seconds()); err != nil {
		return err
	}
	if samplesPath != "" {
		if err := os.WriteFile(samplesPath, []byte(samplesTSV(rec.samples)), 0o644); err != nil {
			return fmt.Errorf("writing samples: %w", err)
		}
	}

	if out == "" {
		out = filepath.Join(root, "bench", "results", rec.start.Format("2006-01-02"))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	m := meta{
		date:      rec.start.UTC().Format("2006-01-02 15:04 MST"),
		tierStart: servingAfter,
		others:    others,
		steal:     steal,
		machine:   fmt.Sprintf("%d CPUs (nproc), %s", runtime.NumCPU(), procs.CPUModel()),
		redis:     redisVersion(procs.FirstLine("redis-server", "--version")),
		rproxy:    "built from " + procs.FirstLine("git", "-C", root, "describe", "--always", "--dirty"),
		chartFile: "ops.svg",
	}
	f := newFigures(rec.samples)
	c := buildChart(rec, f, fmt.Sprintf("%s, %s; default config; load from bench/load, closed loop", m.machine, m.date))
	svgPath := filepath.Join(out, "ops.svg")
	if err := os.WriteFile(svgPath, []byte(c.svg()), 0o644); err != nil {
		return fmt.Errorf("writing chart: %w", err)
	}
	written := []string{svgPath}
	if conv, err := exec.LookPath("rsvg-convert"); err == nil {
		pngPath := filepath.Join(out, "ops.png")
		if b, err := exec.Command(conv, "-o", pngPath, svgPath).CombinedOutput(); err != nil {
			return fmt.Errorf("rsvg-convert %s: %v: %s", svgPath, err, b)
		}
		m.chartFile = "ops.png"
		written = append(written, pngPath)
	}
	mdPath := filepath.Join(out, "ops.md")
	if err := os.WriteFile(mdPath, []byte(renderReport(m, rec, f)), 0o644); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	written = append(written, mdPath)
	fmt.Fprintf(stderr, "wrote %s\n", strings.Join(written, ", "))
	return nil
}

// waitServing waits up to 10 seconds for rproxy's metrics at url to say
// that the tier serves, and returns how long that took.
func waitServing(ctx context.Context, url string) (time.Duration, error) {
	c := &http.Client{Timeout: time.Second}
	start := time.Now()
	var last error
	for time.Since(start) < 10*time.Second {
		text, err := get(ctx, c, url)
		if err == nil {
			var ss []series
			if ss, err = parseMetrics(text); err == nil {
				if v, _ := sum(ss, "rproxy_hotkey_tier_serving"); v == 1 {
					return time.Since(start), nil
				}
				err = errors.New("rproxy_hotkey_tier_serving is not 1")
			}
		}
		last = err
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("rproxy's tier did not start serving within 10 s: %w", last)
}

// redisVersion picks the version out of redis-server --version ("Redis
// server v=7.0.15 sha=..."); anything else is returned whole.
func redisVersion(line string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return line
}
