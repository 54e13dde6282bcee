package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// rawClient speaks raw RESP, so tests see reply bytes exactly.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	rd *bufio.Reader
}

func dialClient(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, rd: bufio.NewReader(nc)}
}

// loopUntilStopped runs each of loops in a goroutine of its own, again and
// again while it returns true, until the returned stop is called; stop
// waits for them.
func loopUntilStopped(loops ...func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if !loop() {
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func (c *rawClient) send(raw []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(raw); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawClient) read() []byte {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	r, err := resp.ReadReply(c.rd, nil)
	if err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	return r
}

// pipeline sends cmds in one write and returns their replies, run
// together.
func (c *rawClient) pipeline(cmds ...[]string) string {
	c.t.Helper()
	var batch []byte
	for _, cmd := range cmds {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	c.send(batch)
	var replies strings.Builder
	for range cmds {
		replies.Write(c.read())
	}
	return replies.String()
}

func (c *rawClient) do(args ...string) string {
	c.t.Helper()
	c.send(resp.AppendCommandString(nil, args...))
	return string(c.read())
}

// readPrefixes reads one reply per prefix and requires each to start with
// it.
func (c *rawClient) readPrefixes(prefixes ...string) {
	c.t.Helper()
	for i, want := range prefixes {
		if got := string(c.read()); !strings.HasPrefix(got, want) {
			c.t.Fatalf("reply %d = %q, want %q...", i, got, want)
		}
	}
}

// doErr is do for other goroutines: it returns failures as text instead of
// failing the test.
func (c *rawClient) doErr(args ...string) string {
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(resp.AppendCommandString(nil, args...)); err != nil {
		return "write: " + err.Error()
	}
	r, err := resp.ReadReply(c.rd, nil)
	if err != nil {
		return "read: " + err.Error()
	}
	return string(r)
}

// expectClosed requires the server to close the connection (after any
// replies already sent, which are returned).
func (c *rawClient) expectClosed() string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got bytes.Buffer
	_, err := got.ReadFrom(c.rd)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			c.t.Fatalf("connection still open after 5s; read %q", got.String())
		}
	}
	return got.String()
}

func counterValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := metricSum(t, reg, name, labels)
	if !ok {
		t.Fatalf("metric %s not found", name)
	}
	return v
}

// metricSum adds the counters or gauges of name whose labels match, and
// reports whether the metric exists (a vector has no family before its
// first series).
func metricSum(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
		return sum, true
	}
	return 0, false
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestForwardsAndKeepsPipelineOrder(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	// One write mixing forwarded, locally answered and refused commands.
	var batch []byte
	batch = resp.AppendCommandString(batch, "SET", "k", "v")
	batch = resp.AppendCommandString(batch, "CLIENT", "SETNAME", "me")
	batch = resp.AppendCommandString(batch, "GET", "k")
	batch = resp.AppendCommandString(batch, "CLIENT", "KILL", "ID", "abc")
	batch = resp.AppendCommandString(batch, "CLIENT", "GETNAME")
	batch = resp.AppendCommandString(batch, "INCR", "k")
	batch = append(batch, "PING\r\n"...) // inline
	c.send(batch)
	want := []string{
		"+OK\r\n", "+OK\r\n", "$1\r\nv\r\n",
		"-ERR client-id should be greater than 0\r\n",
		"$2\r\nme\r\n", "-ERR value is not an integer or out of range\r\n", "+PONG\r\n",
	}
	for i, w := range want {
		if got := string(c.read()); got != w {
			t.Fatalf("reply %d = %q, want %q", i, got, w)
		}
	}
}

func TestPipelineSharesUpstreamWrites(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.Connections = 1 })
	writes := func() float64 {
		return counterValue(t, p.Registry, "rproxy_upstream_writes_total", map[string]string{"protocol": "2"})
	}

	// One client's pipeline of 16 reaches Redis in at most a few writes.
	c := dialClient(t, p.Addr)
	var batch []byte
	for i := 0; i < 16; i++ {
		batch = resp.AppendCommandString(batch, "GET", "key")
	}
	before := writes()
	c.send(batch)
	for i := 0; i < 16; i++ {
		if got := string(c.read()); got != "$-1\r\n" {
			t.Fatalf("reply %d = %q", i, got)
		}
	}
	if w := writes() - before; w > 2 {
		t.Fatalf("a pipeline of 16 took %v upstream writes, want at most 2", w)
	}

	// 50 clients with pipelines share writes: fewer writes than client batches.
	const clients, rounds = 50, 20
	before = writes()
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	for i := 0; i < clients; i++ {
		cc := dialClient(t, p.Addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				cc.nc.Write(batch)
				for j := 0; j < 16; j++ {
					cc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
					got, err := resp.ReadReply(cc.rd, nil)
					if err != nil || string(got) != "$-1\r\n" {
						errs <- string(got) + " " + errString(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("client got %s", e)
	}
	if w := writes() - before; w >= clients*rounds {
		t.Fatalf("%d client batches took %v upstream writes: commands of different clients are not sharing writes", clients*rounds, w)
	} else {
		t.Logf("%d client batches of 16 took %v upstream writes", clients*rounds, w)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestUpstreamDownAndBack(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	if got := c.do("SET", "a", "1"); got != "+OK\r\n" {
		t.Fatalf("SET = %q", got)
	}
	rs.Kill()
	// Replies while the upstream is gone are a clear error, promptly.
	start := time.Now()
	got := c.do("GET", "a")
	if !strings.HasPrefix(got, "-ERR upstream unavailable: ") {
		t.Fatalf("GET with upstream down = %q, want upstream unavailable", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("error took %v, want within the 2s timeout", d)
	}
	rs.Restart(t)
	// The proxy reconnects by itself; the same client connection works again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got = c.do("PING")
		if got == "+PONG\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart PING = %q for 5s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestUpstreamStalledTimesOut(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.Timeout = 500 * time.Millisecond })
	c := dialClient(t, p.Addr)
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING = %q", got)
	}
	rs.Pause()
	start := time.Now()
	got := c.do("GET", "x")
	took := time.Since(start)
	rs.Resume()
	if !strings.HasPrefix(got, "-ERR upstream unavailable: no reply within 500ms") {
		t.Fatalf("GET on a stopped upstream = %q", got)
	}
	if took < 400*time.Millisecond || took > 1500*time.Millisecond {
		t.Fatalf("timeout after %v, want about 500ms", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.do("PING") != "+PONG\r\n" {
		if time.Now().After(deadline) {
			t.Fatal("proxy did not recover after the upstream resumed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTimedOutLargeSetsRunAsSent: SETs of 900 KB from 12 clients at once
// to a stopped Redis time out while rproxy is still writing them from the
// clients' read buffers (the upstream queue borrows large commands, and
// those buffers, up to 1 MB, go back to a pool shared by all clients);
// each client's next SET of the same size is read meanwhile, into one of
// those buffers. Once Redis resumes, each timed-out SET has run with the
// value its client sent, or not at all: never with another's bytes
// (upstream's recall copies what was left to write).
func TestTimedOutLargeSetsRunAsSent(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.Timeout = 500 * time.Millisecond })
	const clients, size = 12, 900 << 10
	cs := make([]*rawClient, clients)
	for i := range cs {
		cs[i] = dialClient(t, p.Addr)
		if got := cs[i].do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING = %q", got)
		}
	}
	rs.Pause()
	resumed := false
	defer func() {
		if !resumed {
			rs.Resume()
		}
	}()
	key := func(round, i int) string { return fmt.Sprintf("r%d-k%02d", round, i) }
	value := func(i int) string { return strings.Repeat(string(rune('a'+i)), size) }
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.send(resp.AppendCommandString(nil, "SET", key(1, i), value(i)))
			c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			r, err := resp.ReadReply(c.rd, nil)
			if err != nil || !strings.HasPrefix(string(r), "-ERR upstream unavailable: no reply within 500ms") {
				errs <- fmt.Sprintf("client %d: a SET to a stopped Redis = %q, %v; want the timeout", i, truncateString(string(r), 80), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	for i, c := range cs {
		c.send(resp.AppendCommandString(nil, "SET", key(2, i), strings.Repeat("Z", size)))
	}
	waitFor(t, "every client's second SET read and counted", func() bool {
		v, _ := metricSum(t, p.Registry, "rproxy_proxy_command_calls_total", map[string]string{"command": "set"})
		return v == 2*clients
	})
	rs.Resume()
	resumed = true
	for i, c := range cs {
		if got := string(c.read()); got != "+OK\r\n" {
			t.Fatalf("client %d's second SET, after the drain = %q", i, truncateString(got, 80))
		}
	}
	direct := dialClient(t, rs.Addr)
	ran := 0
	for i := range clients {
		got := direct.do("GET", key(1, i))
		switch got {
		case "$-1\r\n":
		case fmt.Sprintf("$%d\r\n%s\r\n", size, value(i)):
			ran++
		default:
			t.Fatalf("Redis holds %s = %d bytes, %q...; want the value its client sent, or none", key(1, i), len(got), truncateString(got, 40))
		}
	}
	t.Logf("%d of the %d timed-out SETs ran", ran, clients)
}

// truncateString is s cut to n bytes, for error messages.
func truncateString(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func TestClientInputLimits(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.MaxBulkLen = 1 << 20
		c.MaxQueryBuffer = 4 << 20
	})
	bystander := dialClient(t, p.Addr)

	t.Run("bulk over max", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		c.send([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2147483648\r\n"))
		if got := c.expectClosed(); got != "-ERR Protocol error: invalid bulk length\r\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("query buffer over max", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		// Many bulks each under the bulk limit, never completing the command.
		var b []byte
		b = append(b, "*100\r\n"...)
		chunk := bytes.Repeat([]byte("x"), 512<<10)
		for i := 0; i < 10; i++ {
			b = append(b, "$524288\r\n"...)
			b = append(b, chunk...)
			b = append(b, "\r\n"...)
		}
		go c.nc.Write(b) // the proxy closes midway, so the write may fail
		if got := c.expectClosed(); got != "" {
			t.Fatalf("got %q, want a silent close like Redis", got)
		}
	})
	t.Run("inline too long", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		go c.nc.Write(bytes.Repeat([]byte("a"), 100<<10))
		if got := c.expectClosed(); got != "-ERR Protocol error: too big inline request\r\n" {
			t.Fatalf("got %q", got)
		}
	})
	if got := bystander.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("other client after limits: %q", got)
	}
	// The client sees the close before the server's close callback counts it.
	waitFor(t, "3 input_limit closes in the metric", func() bool {
		return counterValue(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", map[string]string{"reason": "input_limit"}) == 3
	})
}

func TestMaxClients(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.MaxClients = 2 })
	a, b := dialClient(t, p.Addr), dialClient(t, p.Addr)
	a.do("PING")
	b.do("PING")
	c := dialClient(t, p.Addr)
	if got := c.expectClosed(); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("third client got %q", got)
	}
	a.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := dialClient(t, p.Addr)
		d.send(resp.AppendCommandString(nil, "PING"))
		if got := string(d.read()); got == "+PONG\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a slot did not free up after a client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIdleTimeout(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleTimeout = 200 * time.Millisecond })
	c := dialClient(t, p.Addr)
	c.do("PING")
	start := time.Now()
	c.expectClosed()
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
}

func TestShutdownDrainsInFlight(t *testing.T) {
	rs := redistest.Start(t, "--enable-debug-command", "yes")
	p := proxytest.Start(t, rs.Addr)
	busy := dialClient(t, p.Addr)
	idle := dialClient(t, p.Addr)
	idle.do("PING")
	// DEBUG SLEEP keeps a reply in flight while Shutdown starts.
	busy.send(resp.AppendCommandString(nil, "DEBUG", "SLEEP", "0.3"))
	time.Sleep(50 * time.Millisecond)
	srv := p.Server
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	if got := string(busy.read()); got != "+OK\r\n" {
		t.Fatalf("in-flight reply during shutdown = %q", got)
	}
	busy.expectClosed()
	idle.expectClosed()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}

func TestHelloSwitchesProtocol(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	// HELLO 3 and a GET in one write: the GET must already be RESP3.
	var b []byte
	b = resp.AppendCommandString(b, "HELLO", "3")
	b = resp.AppendCommandString(b, "GET", "missing")
	b = resp.AppendCommandString(b, "CLIENT", "GETNAME")
	c.send(b)
	if hello := c.read(); hello[0] != '%' {
		t.Fatalf("HELLO 3 reply is not a map: %q", hello)
	}
	if got := string(c.read()); got != "_\r\n" {
		t.Fatalf("GET after HELLO 3 = %q, want RESP3 null", got)
	}
	if got := string(c.read()); got != "_\r\n" {
		t.Fatalf("CLIENT GETNAME after HELLO 3 = %q, want RESP3 null", got)
	}
	if hello := c.do("HELLO", "2", "SETNAME", "n1"); hello[0] != '*' {
		t.Fatalf("HELLO 2 reply is not an array: %q", hello)
	}
	if got := c.do("GET", "missing"); got != "$-1\r\n" {
		t.Fatalf("GET after HELLO 2 = %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != "$2\r\nn1\r\n" {
		t.Fatalf("HELLO SETNAME not applied: %q", got)
	}
	if got := c.do("HELLO", "4"); got != "-NOPROTO unsupported protocol version\r\n" {
		t.Fatalf("HELLO 4 = %q", got)
	}
	// auth.mode none: as a Redis without passwords, only the default user
	// exists and it takes any password.
	if got := c.do("HELLO", "3", "AUTH", "u", "p"); got != "-WRONGPASS invalid username-password pair or user is disabled.\r\n" {
		t.Fatalf("HELLO AUTH u p = %q", got)
	}
	if got := c.do("HELLO", "3", "AUTH", "default", "p"); got[0] != '%' {
		t.Fatalf("HELLO 3 AUTH default p = %q", got)
	}
	if got := c.do("RESET"); got != "+RESET\r\n" {
		t.Fatalf("RESET = %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != "$-1\r\n" {
		t.Fatalf("name after RESET = %q", got)
	}
}

func TestQuitRepliesAndCloses(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	var b []byte
	b = resp.AppendCommandString(b, "PING")
	b = resp.AppendCommandString(b, "QUIT")
	b = resp.AppendCommandString(b, "PING")
	c.send(b)
	if got := c.expectClosed(); got != "+PONG\r\n+OK\r\n" {
		t.Fatalf("got %q, want PONG and OK then close", got)
	}
}

// TestHalfClosedClientSeesTheEnd: a client that sends a command and shuts
// its side down (nc -N, a script's printf into a socket) gets the reply and
// then the connection's end at once, as from Redis. Its bytes and its end
// come before rproxy reads, and set the poller's note once: a read loop
// that waited after a short read held the connection until the client was
// parked, and for ever with parking off, as here.
func TestHalfClosedClientSeesTheEnd(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleParkAfter = -1 })
	for i := range 20 {
		nc, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(resp.AppendCommandString(nil, "PING")); err != nil {
			t.Fatal(err)
		}
		if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(nc)
		nc.Close()
		if err != nil || string(got) != "+PONG\r\n" {
			t.Fatalf("connection %d: read %q, %v; want +PONG and the end within 5 s", i, got, err)
		}
	}
}

func TestReadyNeedsUpstream(t *testing.T) {
	rs := redistest.Start(t)
	rs.Stop()
	p := proxytest.Start(t, rs.Addr, proxytest.NoWait)
	time.Sleep(100 * time.Millisecond)
	if p.Server.Ready() {
		t.Fatal("ready with no upstream")
	}
	rs.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for !p.Server.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("not ready 5s after the upstream came up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Readiness follows the upstream while serving, both ways.
	rs.Kill()
	waitFor(t, "not ready after the upstream died", func() bool { return !p.Server.Ready() })
	rs.Restart(t)
	waitFor(t, "ready again after the upstream came back", p.Server.Ready)
}

func TestClientKillOwnSession(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	other := dialClient(t, p.Addr)
	c := dialClient(t, p.Addr)
	id := strings.TrimSuffix(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"), "\r\n")
	// As on Redis, the caller is skipped unless SKIPME no.
	if got := c.do("CLIENT", "KILL", "ID", id); got != ":0\r\n" {
		t.Fatalf("CLIENT KILL ID <own> = %q, want :0 (SKIPME yes by default)", got)
	}
	c.send(resp.AppendCommandString(nil, "CLIENT", "KILL", "ID", id, "SKIPME", "no"))
	if got := c.expectClosed(); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL ID <own> SKIPME no = %q, want :1 and a close", got)
	}
	if got := other.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("other client after a kill: %q", got)
	}
}

// CLIENT KILL USER of a user nobody can log in as is an error, as on Redis
// (Redis's unit/introspection "CLIENT KILL with illegal arguments").
func TestClientKillUnknownUser(t *testing.T) {
	rs := redistest.Start(t)
	rs.Do(t, "ACL", "SETUSER", "known", "on", "nopass", "+@all", "~*")
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Policy = nil })
	c := dialClient(t, p.Addr)
	if got := c.do("CLIENT", "KILL", "USER", "wrong_user"); got != "-ERR No such user 'wrong_user'\r\n" {
		t.Errorf("CLIENT KILL USER wrong_user = %q", got)
	}
	for _, u := range []string{"known", "default"} {
		if got := c.do("CLIENT", "KILL", "USER", u); got != ":0\r\n" {
			t.Errorf("CLIENT KILL USER %s = %q, want :0 (no other session)", u, got)
		}
	}
}

// SetLimits applies at once: a lowered max_clients refuses new clients and
// keeps the connected ones; raising it admits them again.
func TestSetLimitsAtRunTime(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	a, b := dialClient(t, p.Addr), dialClient(t, p.Addr)
	a.do("PING")
	b.do("PING")
	lim := proxy.Limits{MaxClients: 2, MaxBulkLen: 1 << 20, MaxQueryBuffer: 1 << 30, ClientWriteTimeout: time.Minute}
	if err := p.Server.SetLimits(lim); err != nil {
		t.Fatal(err)
	}
	c := dialClient(t, p.Addr)
	if got := c.expectClosed(); !strings.Contains(got, "max number of clients reached") {
		t.Fatalf("third client with max_clients 2: %q", got)
	}
	if r := a.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("connected client after lowering max_clients: %q", r)
	}
	// The lowered bulk limit applies to new connections and to a client
	// connected before it.
	lim.MaxClients = 10
	p.Server.SetLimits(lim)
	d := dialClient(t, p.Addr)
	for _, cl := range []*rawClient{d, b} {
		cl.send([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n"))
		if got := cl.expectClosed(); !strings.Contains(got, "invalid bulk length") {
			t.Fatalf("2 MB bulk with max_bulk_len 1 MB: %q", got)
		}
	}
	if err := p.Server.SetLimits(proxy.Limits{}); err == nil || !strings.Contains(err.Error(), "max clients must be at least 1") {
		t.Fatalf("zero limits: %v", err)
	}
}

// TestLimitsValidate: the limits are checked by one function, whether they
// come with the whole Config at start or alone at a reload, and every
// problem is named.
func TestLimitsValidate(t *testing.T) {
	bad := proxy.Limits{MaxClients: 0, MaxBulkLen: 1, MaxQueryBuffer: -1, IdleTimeout: -time.Second}
	want := []string{"max clients must be at least 1, got 0", "query buffer must be positive (got 1, -1)", "idle timeout and client write timeout must not be negative (got -1s, 0s)"}
	cfg := proxytest.Config("127.0.0.1:6379")
	cfg.Limits = bad
	for _, err := range []error{bad.Validate(), cfg.Validate()} {
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("error %v does not say %q", err, w)
			}
		}
	}
	if err := proxytest.Config("127.0.0.1:6379").Limits.Validate(); err != nil {
		t.Fatalf("the test defaults are invalid: %v", err)
	}
}

func TestCommandNameForLogs(t *testing.T) {
	cases := map[string]string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n": "get",
		"*1\r\n$4\r\nPiNg\r\n":           "ping",
		"garbage":                        "?",
		"*1\r\n$99\r\nSHORT\r\n":         "?",
	}
	for raw, want := range cases {
		if got := proxy.CommandNameForTest([]byte(raw)); got != want {
			t.Errorf("commandName(%q) = %q, want %q", raw, got, want)
		}
	}
}
