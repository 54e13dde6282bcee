package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// TestPinnedSessionClosedAsRedisClosedItsConnection: Redis with timeout 1
// closes an idle client's connection; a session pinned by SELECT 1 whose
// pin Redis so closed is closed by rproxy at its next command, with no
// reply, as Redis closed it, rather than answered "-ERR upstream
// unavailable: read: EOF" (which no client library retries). go-redis
// with DB 1 then reconnects and retries on its own: its GET after the
// idle time succeeds, where before it got that error.
func TestPinnedSessionClosedAsRedisClosedItsConnection(t *testing.T) {
	// A pin Redis kept, idle past its last Do's deadline (upstream.timeout)
	// and past the check's second, serves on: the first version read the
	// expired deadline as the connection's end, and closed the Tcl suite's
	// clients (db 9) after each of their pauses.
	plain := redistest.Start(t)
	kept := proxytest.Start(t, plain.Addr, func(c *proxy.Config) { c.Upstream.Timeout = 100 * time.Millisecond })
	k := dialClient(t, kept.Addr)
	if r := k.pipeline([]string{"SELECT", "1"}, []string{"SET", "k", "v"}); r != "+OK\r\n+OK\r\n" {
		t.Fatalf("SELECT 1, SET: %q", r)
	}
	pinIdle2 := func() bool { // the db 1 connection's line
		for _, line := range strings.Split(string(plain.Do(t, "CLIENT", "LIST")), "\n") {
			if strings.Contains(line, " db=1 ") && strings.Contains(line, " idle=2 ") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !pinIdle2(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pin never showed idle=2 in CLIENT LIST")
		}
	}
	if r := k.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Fatalf("GET on a pin idle 2 s that Redis kept: %q", r)
	}

	srv := redistest.Start(t, "--timeout", "1")
	p := proxytest.Start(t, srv.Addr)
	// waitDb1Gone waits until Redis has closed every connection in db 1:
	// the pin, idle past the timeout.
	waitDb1Gone := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); strings.Contains(string(srv.Do(t, "CLIENT", "LIST")), " db=1 "); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("Redis did not close the idle pinned connection")
			}
		}
	}

	c := dialClient(t, p.Addr)
	if r := c.pipeline([]string{"SELECT", "1"}, []string{"SET", "k", "v"}, []string{"GET", "k"}); r != "+OK\r\n+OK\r\n$1\r\nv\r\n" {
		t.Fatalf("SELECT 1, SET, GET: %q", r)
	}
	waitDb1Gone()
	c.send([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	if got := c.expectClosed(); got != "" {
		t.Fatalf("after Redis closed the pin: %q before the close, want none", got)
	}
	if v, _ := metricSum(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", map[string]string{"reason": "upstream_lost"}); v != 1 {
		t.Errorf("client_closed_by_proxy_total{reason=upstream_lost} = %v, want 1", v)
	}

	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, DB: 1, PoolSize: 1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("go-redis GET in db 1: %q, %v", v, err)
	}
	waitDb1Gone()
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("go-redis GET in db 1 after Redis closed its pin: %q, %v", v, err)
	}
}
