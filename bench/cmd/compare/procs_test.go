package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestNutcrackerConfig(t *testing.T) {
	conf := nutcrackerConfig("127.0.0.1:22121", "127.0.0.1:6379")
	for _, want := range []string{
		"  listen: 127.0.0.1:22121\n",
		"  redis: true\n",
		"  hash: fnv1a_64\n",
		"  distribution: ketama\n",
		"  timeout: 5000\n",
		"  preconnect: true\n",
		"  server_connections: 1\n",
		"  servers:\n    - 127.0.0.1:6379:1\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	// twemproxy itself must accept the config (no redis needed).
	bin, err := findNutcracker()
	if err != nil {
		t.Fatalf("nutcracker not found (%v): install it with `sudo apt-get install -y nutcracker` (make test does)", err)
	}
	path := filepath.Join(t.TempDir(), "nutcracker.yml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-c", path).CombinedOutput(); err != nil {
		t.Errorf("nutcracker -t rejects config: %v\n%s", err, out)
	}
}

func TestParseStatTicks(t *testing.T) {
	// Fields 14 and 15 (utime, stime) are 150 and 25; the name has a space and a ')'.
	stat := "4242 (redis server)) S 1 4242 4242 0 -1 4194560 553 0 0 0 150 25 0 0 20 0 5 0 1234 0 0\n"
	got, err := parseStatTicks(stat)
	if err != nil || got != 175 {
		t.Errorf("parseStatTicks = %d, %v; want 175", got, err)
	}
	if _, err := parseStatTicks("4242 (x) S 1 2"); err == nil {
		t.Error("short line: no error")
	}
	// Our own process must have a readable CPU time.
	if _, err := cpuTicks(os.Getpid()); err != nil {
		t.Error(err)
	}
}
