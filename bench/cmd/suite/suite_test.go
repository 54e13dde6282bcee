package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/bench/internal/svgtest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// TestSuiteQuickAgainstRedis runs the whole program in quick mode against
// a real redis-server, the redis target only: one load scenario, and the
// idle scenario with 200 connections.
func TestSuiteQuickAgainstRedis(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found in PATH; install it with: %s", bin, redistest.InstallHint)
		}
	}
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-duration", "300ms", "-targets", "redis",
		"-scenarios", "get-p1,idle-10k", "-idle-conns", "200", "-out", out}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	report, err := os.ReadFile(filepath.Join(out, "suite.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(report, stdout.Bytes()) {
		t.Error("stdout differs from suite.md")
	}
	if n := strings.Count(stderr.String(), "get-p1      redis"); n != 3 {
		t.Errorf("%d progress lines for get-p1 against redis, want 3:\n%s", n, stderr.String())
	}
	r := string(report)
	for _, want := range []string{"## get-p1:", "| redis | ", "3 interleaved rounds", "**quick mode**", "![Throughput",
		"## idle-10k: 200 idle connections plus GET load", "Memory per idle connection (RSS growth): redis "} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
	// The redis row: 100 Redis calls per 100 requests (every GET reaches
	// Redis) and no errors.
	rows := 0
	for _, l := range strings.Split(r, "\n") {
		if strings.HasPrefix(l, "| redis | ") {
			rows++
			if !strings.Contains(l, "| 100.0 | 0 |") {
				t.Errorf("redis row: %s", l)
			}
		}
	}
	if rows != 2 {
		t.Errorf("%d redis rows, want 2 (get-p1, idle-10k):\n%s", rows, r)
	}
	b, err := os.ReadFile(filepath.Join(out, "throughput.svg"))
	if err != nil {
		t.Fatal(err)
	}
	svgtest.Parse(t, string(b))
}
