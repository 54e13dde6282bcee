package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestTenThousandConnections opens 10,000 client connections to
// the real binary (its own process, so each side has its own file
// descriptors): every one is answered, the proxy's RSS per idle connection
// is measured, Redis sees only rproxy's few connections, and after they
// close the proxy is back to its baseline.
func TestTenThousandConnections(t *testing.T) {
	const n = 10000
	bin := buildBinary(t)
	rs := redistest.Start(t)
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	os.WriteFile(path, []byte("limits:\n  max_clients: 12000\nlog:\n  level: warn\n"), 0o644)
	cmd := exec.Command(bin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitHTTP(t, "http://"+admin+"/readyz", 200)
	rss := func() int {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.Atoi(f[1])
				return kb
			}
		}
		return 0
	}
	before := rss()

	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	start := time.Now()
	// 200 dialers at once (the race detector allows ~8000 live goroutines),
	// each opening 50 connections that stay open.
	const dialers = 200
	for w := 0; w < dialers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += dialers {
				c, err := net.DialTimeout("tcp", listen, 10*time.Second)
				if err == nil {
					c.SetDeadline(time.Now().Add(20 * time.Second))
					_, err = c.Write(resp.AppendCommandString(nil, "PING"))
				}
				var r []byte
				if err == nil {
					r, err = resp.ReadReply(bufio.NewReader(c), nil)
				}
				if err != nil || string(r) != "+PONG\r\n" {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%q %v", r, err))
					mu.Unlock()
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if len(failures) > 0 {
		t.Fatalf("%d of %d connections failed, e.g. %s", len(failures), n, failures[0])
	}
	during := rss()
	t.Logf("%d connections opened (200 at a time) and answered in %v; RSS %d MB -> %d MB: %.1f KB per idle connection",
		n, took.Round(time.Millisecond), before/1024, during/1024, float64(during-before)/n)
	if got := redisClients(t, rs); got > 4 {
		t.Errorf("Redis sees %d connections for %d clients", got, n)
	}
	if body := httpBody(t, "http://"+admin+"/metrics"); !strings.Contains(body, "rproxy_proxy_client_connections 10000") {
		t.Errorf("client_connections gauge is not 10000")
	}
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(httpBody(t, "http://"+admin+"/metrics"), "rproxy_proxy_client_connections 0\n") {
		if time.Now().After(deadline) {
			t.Fatal("client connections gauge not back to 0 after closing them")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body := httpBody(t, "http://"+admin+"/metrics"); !strings.Contains(body, "go_goroutines") {
		t.Fatal("no goroutine gauge")
	} else if g := metricValue(body, "go_goroutines"); g > 60 {
		t.Errorf("%v goroutines left after all clients closed", g)
	}
}

// redisClients counts Redis's connected clients, minus the asking one.
func redisClients(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	r := string(rs.Do(t, "CLIENT", "LIST"))
	return strings.Count(r, "id=") - 1
}

func metricValue(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}
