package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/proxy"
)

// startTLSProxy runs a proxy whose client listener speaks TLS with certs
// (requiring client certificates if mutual), logging to the returned
// observer, with each option applied after.
func startTLSProxy(t *testing.T, certs *tlstest.Certs, mutual bool, upstreamAddr string, opts ...func(*proxy.Config)) (*proxytest.Proxy, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	withTLS := func(c *proxy.Config) { c.TLS = certs.ServerConfig(mutual) }
	return proxytest.StartLogged(t, zap.New(core), upstreamAddr, append([]func(*proxy.Config){withTLS}, opts...)...), logs
}

// dialTLS connects a raw RESP client over TLS with cfg.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) *rawClient {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, rd: bufio.NewReader(nc)}
}

// logged waits until a log entry's message contains msg and returns it.
func logged(t *testing.T, logs *observer.ObservedLogs, msg string) observer.LoggedEntry {
	t.Helper()
	var found []observer.LoggedEntry
	waitFor(t, "log "+msg, func() bool {
		found = logs.FilterMessageSnippet(msg).All()
		return len(found) > 0
	})
	return found[0]
}

// TestClientTLS: raw TLS and go-redis clients (RESP2 and RESP3) are served
// over TLS, including replies written outside the write buffer (large
// values, pub/sub) and a blocking command's client watch; a plain client
// is told and closed.
func TestClientTLS(t *testing.T) {
	certs := tlstest.New(t)
	rs := redistest.Start(t)
	p, logs := startTLSProxy(t, certs, false, rs.Addr)

	c := dialTLS(t, p.Addr, certs.ClientConfig(false))
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING over TLS = %q", r)
	}
	if r := c.do("SET", "k", "v"); r != "+OK\r\n" {
		t.Fatalf("SET over TLS = %q", r)
	}
	if r := c.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Fatalf("GET over TLS = %q", r)
	}
	// BLPOP reads the client from a watcher until it returns; the watch
	// ends with a read deadline on the *tls.Conn, which must not break it.
	if r := c.do("BLPOP", "empty", "0.1"); r != "*-1\r\n" {
		t.Fatalf("BLPOP timing out = %q", r)
	}
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING after BLPOP = %q", r)
	}

	ctx := context.Background()
	big := strings.Repeat("0123456789", 300_000) // 3 MB: written directly, in pieces
	for _, proto := range []int{2, 3} {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto, TLSConfig: certs.ClientConfig(false),
			DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("go-redis RESP%d PING over TLS: %v", proto, err)
		}
		key := "big" + strconv.Itoa(proto)
		if err := rdb.Set(ctx, key, big, 0).Err(); err != nil {
			t.Fatalf("go-redis RESP%d SET: %v", proto, err)
		}
		if v, err := rdb.Get(ctx, key).Result(); err != nil || v != big {
			t.Fatalf("go-redis RESP%d GET of 3 MB: %d bytes, %v", proto, len(v), err)
		}
		sub := rdb.Subscribe(ctx, "news")
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("go-redis RESP%d SUBSCRIBE: %v", proto, err)
		}
		if n := c.do("PUBLISH", "news", "hello"); n != ":1\r\n" {
			t.Fatalf("PUBLISH = %q", n)
		}
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != "hello" {
			t.Fatalf("go-redis RESP%d pub/sub message over TLS: %v %v", proto, msg, err)
		}
		sub.Close()
	}

	plain := dialClient(t, p.Addr)
	plain.send([]byte("*1\r\n$4\r\nPING\r\n"))
	if got := plain.expectClosed(); !strings.Contains(got, "-ERR rproxy: this port speaks TLS only") {
		t.Fatalf("plain client got %q before the close, want the TLS-only error", got)
	}
	e := logged(t, logs, "client closed: not a TLS client")
	if e.Level != zapcore.WarnLevel || e.ContextMap()["client"] != plain.nc.LocalAddr().String() {
		t.Fatalf("log entry %+v", e)
	}
	if n := closedFor(t, p, "tls_handshake"); n != 1 {
		t.Fatalf("tls_handshake closes = %v, want 1", n)
	}
}

// TestClientTLSMutual: with client CAs, only clients presenting a
// certificate the CA signed are served.
func TestClientTLSMutual(t *testing.T) {
	certs := tlstest.New(t)
	other := tlstest.New(t)
	rs := redistest.Start(t)
	p, logs := startTLSProxy(t, certs, true, rs.Addr)

	if r := dialTLS(t, p.Addr, certs.ClientConfig(true)).do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING with a client certificate = %q", r)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, TLSConfig: certs.ClientConfig(true), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("go-redis with a client certificate: %v", err)
	}

	foreign := certs.ClientConfig(false)
	foreign.Certificates = []tls.Certificate{other.Client}
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		log  string
	}{
		{"no certificate", certs.ClientConfig(false), "certificate"},
		{"certificate of another CA", foreign, "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.TakeAll()
			// With TLS 1.3 the client's side of the handshake ends before
			// the server checks its certificate: the refusal then arrives
			// as the reply to the first command.
			nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", p.Addr, tc.cfg)
			if err == nil {
				defer nc.Close()
				c := &rawClient{t: t, nc: nc, rd: bufio.NewReader(nc)}
				if r := c.doErr("PING"); !strings.HasPrefix(r, "read: remote error: tls:") {
					t.Fatalf("PING without an accepted certificate = %q, want a TLS alert", r)
				}
			}
			e := logged(t, logs, "client closed: TLS handshake failed")
			if msg, _ := e.ContextMap()["error"].(string); !strings.Contains(msg, tc.log) {
				t.Fatalf("log error %q does not contain %q", msg, tc.log)
			}
		})
	}
	if n := counterValue(t, p.Registry, "rproxy_proxy_client_connections_total", nil); n != 2 {
		t.Fatalf("%v sessions, want 2: refused clients must never become sessions", n)
	}
}

// TestTLSHandshakeTimeout: clients that connect and never finish a
// handshake hold up no one, are closed after the timeout, and do not delay
// a shutdown.
func TestTLSHandshakeTimeout(t *testing.T) {
	certs := tlstest.New(t)
	rs := redistest.Start(t)
	const timeout = 2 * time.Second
	p, logs := startTLSProxy(t, certs, false, rs.Addr, func(c *proxy.Config) { c.TLSHandshakeTimeout = timeout })

	var silent []*rawClient
	for i := 0; i < 10; i++ {
		silent = append(silent, dialClient(t, p.Addr))
	}
	stalled := dialClient(t, p.Addr)
	stalled.send([]byte{0x16, 0x03, 0x01}) // the start of a record header, then nothing
	silent = append(silent, stalled)

	// Served while every silent client is still waiting: none has been
	// timed out yet when the PING's reply arrives.
	if r := dialTLS(t, p.Addr, certs.ClientConfig(false)).do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING = %q", r)
	}
	if n := closedFor(t, p, "tls_handshake"); n != 0 {
		t.Fatalf("the TLS client was served only after %v silent clients timed out", n)
	}

	start := time.Now()
	for _, c := range silent {
		c.nc.SetReadDeadline(time.Now().Add(2 * timeout))
		if _, err := c.rd.ReadByte(); err == nil || isTimeout(err) {
			t.Fatalf("silent client: read %v, want the connection closed", err)
		}
	}
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("silent clients closed after %v, timeout %v", took, timeout)
	}
	e := logged(t, logs, "client closed: no TLS handshake within 2s")
	if e.Level != zapcore.WarnLevel {
		t.Fatalf("log entry %+v", e)
	}
	// Counted just after the close the clients saw.
	waitFor(t, "11 tls_handshake closes", func() bool { return closedFor(t, p, "tls_handshake") == 11 })

	// A handshake in progress does not hold up a shutdown.
	waiting := dialClient(t, p.Addr)
	time.Sleep(50 * time.Millisecond) // accepted, handshake started
	start = time.Now()
	p.Stop(t)
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("shutdown took %v with a handshake in progress", took)
	}
	waiting.nc.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := waiting.rd.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("client in its handshake after shutdown: read %v, want the connection closed", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestTLSMaxClients: the refusal that the accept callback writes goes
// through TLS, since that callback only sees handshaken connections.
func TestTLSMaxClients(t *testing.T) {
	certs := tlstest.New(t)
	rs := redistest.Start(t)
	p, _ := startTLSProxy(t, certs, false, rs.Addr, func(c *proxy.Config) { c.MaxClients = 1 })
	if r := dialTLS(t, p.Addr, certs.ClientConfig(false)).do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING = %q", r)
	}
	second := dialTLS(t, p.Addr, certs.ClientConfig(false))
	if got := second.expectClosed(); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("second client got %q", got)
	}
}

// startTLSRedis starts a redis-server that also serves TLS with certs and
// returns it with its TLS address.
func startTLSRedis(t *testing.T, certs *tlstest.Certs, authClients string, extra ...string) (*redistest.Server, string) {
	t.Helper()
	port := redistest.FreePort(t)
	rs := redistest.Start(t, append(certs.RedisArgs(port, authClients), extra...)...)
	return rs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// TestUpstreamTLS: against Redis's TLS port, with a client certificate,
// the shared connections, a pinned connection (MULTI) and the tier's
// tracking connection all work.
func TestUpstreamTLS(t *testing.T) {
	certs := tlstest.New(t)
	rs, tlsAddr := startTLSRedis(t, certs, "yes")
	p := proxytest.Start(t, tlsAddr, cacheAll, func(c *proxy.Config) {
		c.Upstream.TLS = certs.ClientConfig(true) // ServerName 127.0.0.1
	})
	waitServing(t, p) // the tracking connection is up

	c := dialClient(t, p.Addr)
	if r := c.do("SET", "k", "v"); r != "+OK\r\n" {
		t.Fatalf("SET = %q", r)
	}
	if r := c.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Fatalf("GET = %q", r)
	}
	c.send([]byte("*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*1\r\n$4\r\nEXEC\r\n"))
	for i, want := range []string{"+OK\r\n", "+QUEUED\r\n", "*1\r\n:1\r\n"} {
		if r := string(c.read()); r != want {
			t.Fatalf("MULTI/INCR/EXEC reply %d = %q, want %q", i, r, want)
		}
	}

	// The tier fills and is invalidated over the TLS tracking connection.
	rs.Do(t, "SET", "c:k", "old")
	if r := cached(t, p, c, "c:k"); r != "$3\r\nold\r\n" {
		t.Fatalf("cached GET = %q", r)
	}
	rs.Do(t, "SET", "c:k", "new") // directly, on Redis's plain port
	waitFor(t, "invalidation over TLS", func() bool { return c.do("GET", "c:k") == "$3\r\nnew\r\n" })
}

// TestUpstreamTLSPassthroughAuth: the connection that checks a client's
// AUTH against Redis uses TLS too.
func TestUpstreamTLSPassthroughAuth(t *testing.T) {
	certs := tlstest.New(t)
	_, tlsAddr := startTLSRedis(t, certs, "optional", "--user", "app", "on", ">s3cret", "~*", "&*", "+@all")
	p := proxytest.Start(t, tlsAddr, func(c *proxy.Config) {
		c.Upstream.TLS = certs.ClientConfig(false)
		c.AuthPassthrough = true
	})
	c := dialClient(t, p.Addr)
	if r := c.do("AUTH", "app", "wrong"); !strings.HasPrefix(r, "-WRONGPASS") {
		t.Fatalf("AUTH with a wrong password = %q", r)
	}
	if r := c.do("AUTH", "app", "s3cret"); r != "+OK\r\n" {
		t.Fatalf("AUTH = %q", r)
	}
	if r := c.do("ACL", "WHOAMI"); r != "$3\r\napp\r\n" {
		t.Fatalf("ACL WHOAMI after AUTH = %q", r)
	}
}

// TestTLSIdleTimeoutWhileActive: over TLS, a client that keeps sending
// commands for several idle timeouts stays connected (the read deadline set
// for an earlier read fires and is moved on, which must leave the TLS
// stream intact), and is closed once it goes quiet.
func TestTLSIdleTimeoutWhileActive(t *testing.T) {
	certs := tlstest.New(t)
	rs := redistest.Start(t)
	const idle = 150 * time.Millisecond
	p, _ := startTLSProxy(t, certs, false, rs.Addr, func(c *proxy.Config) { c.IdleTimeout = idle })
	c := dialTLS(t, p.Addr, certs.ClientConfig(false))
	var last time.Time
	for end := time.Now().Add(4 * idle); time.Now().Before(end); time.Sleep(idle / 3) {
		if got := c.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING while active = %q", got)
		}
		last = time.Now()
	}
	c.expectClosed()
	if waited := time.Since(last); waited < idle*9/10 {
		t.Fatalf("closed %v after the last command, before the %v idle timeout", waited, idle)
	}
}
