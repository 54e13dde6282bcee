package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/config"
)

// TestLogSampling: log.sampling caps repeated lines per second as zap
// samples; without it every line is written.
func TestLogSampling(t *testing.T) {
	for _, c := range []struct {
		sampling config.LogSampling
		want     int
	}{
		{config.LogSampling{}, 10},
		{config.LogSampling{Initial: 2}, 2},
		{config.LogSampling{Initial: 2, Thereafter: 4}, 4}, // lines 1, 2, then the 4th and 8th after them
	} {
		zc, err := loggerConfig(config.Log{Level: "info", Format: "json", Sampling: c.sampling})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "log")
		zc.OutputPaths = []string{path}
		log, err := zc.Build()
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			log.Info("client connected")
		}
		log.Sync()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(data), "client connected"); got != c.want {
			t.Errorf("sampling %+v: %d of 10 lines written, want %d", c.sampling, got, c.want)
		}
	}
	if _, err := loggerConfig(config.Log{Level: "loud"}); err == nil {
		t.Error("an unknown level was accepted")
	}
}

// Log lines carry ISO-8601 times and durations in seconds, in both formats.
func TestLogTimeAndDurationEncoding(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		zc, err := loggerConfig(config.Log{Level: "info", Format: format})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "log")
		zc.OutputPaths = []string{path}
		log, err := zc.Build()
		if err != nil {
			t.Fatal(err)
		}
		log.Info("shutting down", zap.Duration("drain_seconds", 1500*time.Millisecond))
		log.Sync()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		line := string(data)
		if !iso8601.MatchString(line) {
			t.Errorf("%s: no ISO-8601 time in %q", format, line)
		}
		if want := map[string]string{"json": `"drain_seconds":1.5`, "console": `"drain_seconds": 1.5`}[format]; !strings.Contains(line, want) {
			t.Errorf("%s: %q lacks %s", format, line, want)
		}
	}
}

var iso8601 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})`)

// durationField finds zap.Duration fields and their keys in Go source.
var durationField = regexp.MustCompile(`zap\.Duration\("([^"]*)"`)

// Every duration field in rproxy's logs names its unit: its key ends in
// _seconds (the encoder writes seconds), so "drain": 5 cannot come back.
func TestLogDurationKeys(t *testing.T) {
	root := "../.."
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range durationField.FindAllStringSubmatch(string(src), -1) {
			found++
			if !strings.HasSuffix(m[1], "_seconds") {
				t.Errorf("%s: zap.Duration(%q): duration keys end in _seconds", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no zap.Duration field found: is the walk looking in the right place?")
	}
}
