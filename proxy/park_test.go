package proxy_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// parked is how many clients wait in the idle poller.
func parked(t *testing.T, p *proxytest.Proxy) float64 {
	return counterValue(t, p.Registry, "rproxy_proxy_client_connections_parked", nil)
}

func waitParked(t *testing.T, p *proxytest.Proxy, n float64) {
	t.Helper()
	waitFor(t, "parked clients", func() bool { return parked(t, p) == n })
}

// An idle client's read loop ends and its socket waits in the idle poller;
// its next command resumes it with its session as it was: a transaction
// opened before parking, a partial command sent before it, a database.
func TestIdleClientParksAndResumes(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleParkAfter = 20 * time.Millisecond })
	base := runtime.NumGoroutine()
	var clients []*rawClient
	for range 20 {
		c := dialClient(t, p.Addr)
		if r := c.do("PING"); r != "+PONG\r\n" {
			t.Fatalf("PING = %q", r)
		}
		clients = append(clients, c)
	}
	waitParked(t, p, 20)
	// The parked clients hold no goroutine (20 read loops would show).
	if n := runtime.NumGoroutine(); n > base+5 {
		t.Errorf("%d goroutines with 20 clients parked, %d before they connected", n, base)
	}
	for i, c := range clients {
		if r := c.do("SET", "k", "v"); r != "+OK\r\n" {
			t.Fatalf("client %d: SET after parking = %q", i, r)
		}
	}
	waitParked(t, p, 20)

	c := clients[0]
	c.do("MULTI")
	waitParked(t, p, 20)
	c.do("INCR", "n")
	waitParked(t, p, 20)
	if r := c.do("EXEC"); r != "*1\r\n:1\r\n" {
		t.Fatalf("EXEC across parking = %q", r)
	}
	// Half a command, then parking, then the rest.
	cmd := "*3\r\n$3\r\nSET\r\n$1\r\nh\r\n$5\r\nhello\r\n"
	c.send([]byte(cmd[:20]))
	waitParked(t, p, 20)
	c.send([]byte(cmd[20:]))
	if r := string(c.read()); r != "+OK\r\n" {
		t.Fatalf("a command split by parking = %q", r)
	}
	c.do("SELECT", "2")
	c.do("SET", "indb2", "x")
	waitParked(t, p, 20)
	if r := c.do("GET", "indb2"); r != "$1\r\nx\r\n" {
		t.Fatalf("GET in db 2 after parking = %q", r)
	}
	if r := rs.Do(t, "GET", "indb2"); string(r) != "$-1\r\n" {
		t.Fatalf("db 0 has indb2: %q", r)
	}
}

// A parked client that hangs up, or is closed by the proxy (CLIENT KILL,
// shutdown), ends its session as a reading one does.
func TestParkedClientClosed(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleParkAfter = 20 * time.Millisecond })
	clients := func() float64 { return counterValue(t, p.Registry, "rproxy_proxy_client_connections", nil) }
	a, b, k := dialClient(t, p.Addr), dialClient(t, p.Addr), dialClient(t, p.Addr)
	a.do("PING")
	b.do("CLIENT", "SETNAME", "victim")
	k.do("PING")
	waitParked(t, p, 3)
	a.nc.Close()
	waitFor(t, "the hung-up client's session ended", func() bool { return clients() == 2 })
	waitParked(t, p, 2)
	killer := dialClient(t, p.Addr)
	if r := killer.do("CLIENT", "KILL", "USER", "default", "SKIPME", "yes"); !strings.HasPrefix(r, ":") {
		t.Fatalf("CLIENT KILL = %q", r)
	}
	b.expectClosed()
	k.expectClosed()
	killer.nc.Close()
	waitFor(t, "the killed clients' sessions ended", func() bool { return clients() == 0 })
	waitParked(t, p, 0)

	s := dialClient(t, p.Addr)
	s.do("PING")
	waitParked(t, p, 1)
	if err := p.Server.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown with a parked client: %v", err)
	}
	s.expectClosed()
}

// The idle timeout closes parked clients too: by the sweep, and at once
// when a reload lowers it under how long one has been idle.
func TestParkedClientIdleTimeout(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.IdleParkAfter = 20 * time.Millisecond
		c.IdleTimeout = 1500 * time.Millisecond
	})
	idleClosed := func() float64 {
		v, _ := metricSum(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", map[string]string{"reason": "idle"})
		return v
	}
	a := dialClient(t, p.Addr)
	a.do("PING")
	waitParked(t, p, 1)
	start := time.Now()
	a.expectClosed()
	if took := time.Since(start); took < time.Second || took > 4*time.Second {
		t.Errorf("parked client closed %v after parking, idle timeout 1.5s (swept every 125ms)", took)
	}
	waitFor(t, "the idle close counted", func() bool { return idleClosed() == 1 })

	lim := proxy.Limits{MaxClients: 100, MaxBulkLen: 1 << 20, MaxQueryBuffer: 1 << 20, ClientWriteTimeout: time.Minute, IdleTimeout: time.Hour}
	if err := p.Server.SetLimits(lim); err != nil {
		t.Fatal(err)
	}
	b := dialClient(t, p.Addr)
	b.do("PING")
	waitParked(t, p, 1)
	time.Sleep(300 * time.Millisecond) // idle longer than the timeout set next
	lim.IdleTimeout = 200 * time.Millisecond
	start = time.Now()
	p.Server.SetLimits(lim)
	b.expectClosed()
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a reload lowering the idle timeout closed a parked client after %v, want at once", took)
	}
	waitFor(t, "the idle close counted", func() bool { return idleClosed() == 2 })
}

// An idle proxy with parked clients does not keep waking: its coarse
// clock stops ticking, and neither the park sweep (which runs while any
// client is connected) nor anything else restarts it. A sweep reading the
// coarse clock once kept it ticking a thousand times a second.
func TestIdleProxyClockSleeps(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleParkAfter = 20 * time.Millisecond })
	for range 3 {
		c := dialClient(t, p.Addr)
		if r := c.do("GET", "k"); r != "$-1\r\n" {
			t.Fatalf("GET = %q", r)
		}
	}
	waitParked(t, p, 3)
	waitFor(t, "the coarse clock asleep", func() bool { asleep, _ := p.Server.CoarseClockState(); return asleep })
	_, wakes := p.Server.CoarseClockState()
	// The sweep runs every 10ms here: 50 sweeps in the window.
	time.Sleep(500 * time.Millisecond)
	if asleep, w := p.Server.CoarseClockState(); !asleep || w != wakes {
		t.Errorf("idle proxy: coarse clock asleep %v, restarted %d times in 0.5 s", asleep, w-wakes)
	}
}
