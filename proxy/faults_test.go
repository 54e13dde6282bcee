package proxy_test

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// stalledReader connects with a tiny receive buffer and never reads.
func stalledReader(t *testing.T, addr string, send []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(send); err != nil {
		t.Fatal(err)
	}
	return c
}

// A client that stops reading its replies is closed after
// client_write_timeout, whether its replies go through the client's write buffer
// (60 KB values) or the direct path (1 MB values) or a pub/sub stream;
// meanwhile other clients are served, and no goroutine is left behind.
func TestClientThatStopsReadingIsClosed(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.ClientWriteTimeout = 500 * time.Millisecond })
	rs.Do(t, "SET", "v60k", strings.Repeat("x", 60<<10))
	rs.Do(t, "SET", "v1m", strings.Repeat("y", 1<<20))
	good := dialClient(t, p.Addr)
	good.do("PING")
	base := runtime.NumGoroutine()

	var gets []byte
	for i := 0; i < 300; i++ {
		gets = resp.AppendCommandString(gets, "GET", "v60k")
	}
	stalledReader(t, p.Addr, gets)
	gets = nil
	for i := 0; i < 40; i++ {
		gets = resp.AppendCommandString(gets, "GET", "v1m")
	}
	stalledReader(t, p.Addr, gets)
	stalledReader(t, p.Addr, resp.AppendCommandString(nil, "SUBSCRIBE", "firehose"))
	waitFor(t, "subscription", func() bool {
		return string(rs.Do(t, "PUBSUB", "NUMSUB", "firehose")) != "*2\r\n$8\r\nfirehose\r\n:0\r\n"
	})
	msg := strings.Repeat("z", 256<<10)
	for i := 0; i < 100; i++ {
		rs.Do(t, "PUBLISH", "firehose", msg)
	}

	start := time.Now()
	for time.Since(start) < 3*time.Second {
		if closedFor(t, p, "write_timeout") == 3 {
			break
		}
		if r := good.do("PING"); r != "+PONG\r\n" {
			t.Fatalf("other client: PING = %q", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := closedFor(t, p, "write_timeout"); n != 3 {
		t.Fatalf("%v clients closed for not reading, want 3", n)
	}
	t.Logf("3 stalled clients closed after %v (client_write_timeout 500ms)", time.Since(start).Round(time.Millisecond))
	waitFor(t, "pinned connection released", func() bool {
		return string(rs.Do(t, "PUBSUB", "NUMSUB", "firehose")) == "*2\r\n$8\r\nfirehose\r\n:0\r\n"
	})
	if r := good.do("GET", "v60k"); len(r) != 60<<10+10 {
		t.Fatalf("other client after the closes: GET returned %d bytes", len(r))
	}
	waitFor(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= base+2 })
}

// closedFor counts clients the proxy closed for reason (0 before the first).
func closedFor(t *testing.T, p *proxytest.Proxy, reason string) float64 {
	t.Helper()
	v, _ := metricSum(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", map[string]string{"reason": reason})
	return v
}
