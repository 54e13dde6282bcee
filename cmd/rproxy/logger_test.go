package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
