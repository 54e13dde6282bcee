package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
)

// startTLSRedis starts a redis-server serving TLS with certs (and plain TCP
// on rs.Addr) and returns it with its TLS address.
func startTLSRedis(t *testing.T, certs *tlstest.Certs, authClients string, extra ...string) (*redistest.Server, string) {
	t.Helper()
	port := redistest.FreePort(t)
	rs := redistest.Start(t, append(certs.RedisArgs(port, authClients), extra...)...)
	return rs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Shared and dedicated connections speak TLS, with a client certificate
// and an ACL user's AUTH, in RESP2 and RESP3; the server name defaults to the host of
// the address.
func TestTLSSharedAndDedicated(t *testing.T) {
	certs := tlstest.New(t)
	_, addr := startTLSRedis(t, certs, "yes", "--user", "app", "on", ">s3cret", "~*", "&*", "+@all")
	for _, proto := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			p := testPool(t, addr, proto, func(c *Config) {
				c.Username, c.Password = "app", "s3cret"
				c.TLS = &tls.Config{RootCAs: certs.Pool, Certificates: []tls.Certificate{certs.Client}}
			})
			if got := do(p, []string{"SET", "k", "v"}, []string{"GET", "k"}); got[0] != "+OK\r\n" || got[1] != "$1\r\nv\r\n" {
				t.Fatalf("SET, GET over TLS = %q", got)
			}
			for round := 0; round < 2; round++ { // the second reuses the reset connection
				d, err := p.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := d.nc.(*tls.Conn); !ok {
					t.Fatalf("dedicated connection is a %T, want *tls.Conn", d.nc)
				}
				b := NewBatch()
				for _, c := range [][]string{{"MULTI"}, {"INCR", "n"}, {"EXEC"}} {
					b.Add([]byte(strings.Join(c, " ") + "\r\n"))
				}
				d.Do(b, time.Second)
				if r := string(b.Reply(2)); !strings.HasPrefix(r, "*1\r\n:") {
					t.Fatalf("MULTI/INCR/EXEC on a dedicated TLS connection: EXEC = %q", r)
				}
				p.Release(d)
			}
		})
	}
}

// Every way the TLS dial can fail is reported as the connection's error:
// an unknown CA, a wrong server name, a missing client certificate, TLS to
// a plain port.
func TestTLSDialFailures(t *testing.T) {
	certs := tlstest.New(t)
	other := tlstest.New(t)
	rs, addr := startTLSRedis(t, certs, "yes")
	for _, tc := range []struct {
		name string
		addr string
		tls  *tls.Config
		want string
	}{
		{"unknown CA", addr, &tls.Config{Certificates: []tls.Certificate{certs.Client}}, "certificate signed by unknown authority"},
		{"other CA", addr, &tls.Config{RootCAs: other.Pool, Certificates: []tls.Certificate{certs.Client}}, "certificate signed by unknown authority"},
		{"wrong name", addr, &tls.Config{RootCAs: certs.Pool, ServerName: "redis.example", Certificates: []tls.Certificate{certs.Client}}, "not redis.example"},
		{"no client certificate", addr, &tls.Config{RootCAs: certs.Pool}, "upstream unavailable"},
		{"client certificate of another CA", addr, &tls.Config{RootCAs: certs.Pool, Certificates: []tls.Certificate{other.Client}}, "upstream unavailable"},
		{"plain port", rs.Addr, &tls.Config{RootCAs: certs.Pool}, "TLS handshake"},
		{"plain TCP to the TLS port", addr, nil, "upstream unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Address: tc.addr, Connections: 1, Protocol: 3, DialTimeout: time.Second,
				Timeout: time.Second, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, TLS: tc.tls}
			p, err := NewPool(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var got string
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if got = do(p, []string{"PING"})[0]; got != "-ERR upstream unavailable: connecting\r\n" {
					break
				}
			}
			if p.Ready() || !strings.HasPrefix(got, "-ERR upstream unavailable") || !strings.Contains(got, tc.want) {
				t.Fatalf("ready %v, PING = %q, want an upstream unavailable error containing %q", p.Ready(), got, tc.want)
			}
			t.Logf("PING = %q", got)
		})
	}
}

// A server that accepts but never answers the handshake costs at most the
// dial timeout.
func TestTLSDialTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, silent
		}
	}()
	start := time.Now()
	_, err = Dial(context.Background(), Config{Address: ln.Addr().String(), DialTimeout: 200 * time.Millisecond, TLS: &tls.Config{}})
	if took := time.Since(start); err == nil || !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("Dial = %v after %v, want a deadline error after about 200ms", err, took)
	}
	if !strings.Contains(err.Error(), "TLS handshake") {
		t.Fatalf("error %q does not say the TLS handshake timed out", err)
	}
}

// TestSentinelOverTLS: with SentinelConfig.TLS the Sentinels are asked over
// TLS (verified with the CA): a fake Sentinel that speaks only TLS names
// the master.
func TestSentinelOverTLS(t *testing.T) {
	certs := tlstest.New(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{certs.Server}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &fakeRedis{ln: ln, reply: func(args [][]byte) string {
		if strings.EqualFold(string(args[0]), "SENTINEL") {
			return "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n"
		}
		return "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
	}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			go f.serve(c)
		}
	}()
	t.Cleanup(f.close)
	sen, err := NewSentinel(SentinelConfig{MasterName: "m", Addresses: []string{ln.Addr().String()},
		TLS: &tls.Config{RootCAs: certs.Pool, ServerName: "127.0.0.1"}, Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sen.Close()
	if sen.Master() != "127.0.0.1:6379" {
		t.Fatalf("master over TLS: %q (%s)", sen.Master(), sen.LastError())
	}
	plain, err := NewSentinel(SentinelConfig{MasterName: "m", Addresses: []string{ln.Addr().String()}, Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()
	if plain.Master() != "" {
		t.Fatalf("a plain-TCP Sentinel client got %q from a TLS-only Sentinel", plain.Master())
	}
}

// TestClientTLSTakesTheCurrentRoots: each dial's TLS config has the CAs
// TLSRoots gives then (a reload's new upstream.tls.ca_file) and the
// address's host as ServerName; the shared config is not changed.
func TestClientTLSTakesTheCurrentRoots(t *testing.T) {
	first, second := x509.NewCertPool(), x509.NewCertPool()
	roots := first
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	cfg := Config{Address: "redis.example:6379", TLS: base, TLSRoots: func() *x509.CertPool { return roots }}
	c := clientTLS(cfg, cfg.Address)
	if c.RootCAs != first || c.ServerName != "redis.example" || c.MinVersion != tls.VersionTLS12 {
		t.Fatalf("first dial: RootCAs %p (want %p), ServerName %q", c.RootCAs, first, c.ServerName)
	}
	roots = second
	if c := clientTLS(cfg, cfg.Address); c.RootCAs != second {
		t.Errorf("after the roots changed: RootCAs %p, want %p", c.RootCAs, second)
	}
	if base.RootCAs != nil || base.ServerName != "" {
		t.Error("clientTLS changed the shared config")
	}
	if c := clientTLS(Config{Address: "h:1", TLS: &tls.Config{ServerName: "named"}}, "h:1"); c.ServerName != "named" || c.RootCAs != nil {
		t.Errorf("without TLSRoots: ServerName %q, RootCAs %p", c.ServerName, c.RootCAs)
	}
	// A Sentinel pool's Address is only a name: the master's host is the
	// name checked.
	if c := clientTLS(Config{Address: "sentinel/mymaster", TLS: base}, "10.0.0.5:6379"); c.ServerName != "10.0.0.5" {
		t.Errorf("a Sentinel's master: ServerName %q, want 10.0.0.5", c.ServerName)
	}
	if clientTLS(Config{Address: "h:1"}, "h:1") != nil {
		t.Error("no TLS became TLS")
	}
}

// TestSentinelMasterOverTLSByItsHost: a master the Sentinels name is
// checked by the host it is dialled at when no server name is set (the
// pool's Address is only a name); before, the handshake had no name at
// all and failed.
func TestSentinelMasterOverTLSByItsHost(t *testing.T) {
	certs := tlstest.New(t)
	_, addr := startTLSRedis(t, certs, "no")
	host, port, _ := net.SplitHostPort(addr)
	f := startFake(t, func(args [][]byte) string {
		if strings.EqualFold(string(args[0]), "SENTINEL") {
			return "*2\r\n$" + strconv.Itoa(len(host)) + "\r\n" + host + "\r\n$" + strconv.Itoa(len(port)) + "\r\n" + port + "\r\n"
		}
		return "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
	})
	sen, err := NewSentinel(SentinelConfig{MasterName: "m", Addresses: []string{f.ln.Addr().String()}, Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sen.Close()
	nc, err := Dial(context.Background(), Config{Address: "sentinel/m", Sentinel: sen, DialTimeout: 2 * time.Second,
		TLS: &tls.Config{RootCAs: certs.Pool}})
	if err != nil {
		t.Fatalf("dial of the master %s over TLS with no server name: %v", addr, err)
	}
	nc.Close()
}

// TestDialAcceptsTheOtherName: with TLSOtherName (a cluster's seed host), a
// certificate for the dialled host or for the other name passes, one for
// neither or from another CA fails, and the chain is still checked when the
// pool's config was made by an earlier clientTLS (Pool does that once).
func TestDialAcceptsTheOtherName(t *testing.T) {
	certs, stranger := tlstest.New(t), tlstest.New(t)
	serve := func(c *tlstest.Certs, name string) string {
		certFile, keyFile := c.ServerCertFor(t, name)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { c.(*tls.Conn).Handshake(); c.Close() }()
			}
		}()
		return ln.Addr().String()
	}
	for _, tc := range []struct {
		certs                  *tlstest.Certs
		certFor                string
		other, announced, want string // want: "" for a handshake that passes, else part of its error
	}{
		{certs, "127.0.0.1", "seed.example", "", ""},                   // the node's own address
		{certs, "seed.example", "seed.example", "", ""},                // the seed's certificate, shared
		{certs, "seed.example", "", "", "doesn't contain any IP SANs"}, // no other name: its own only
		{certs, "node9.example", "seed.example", "", "nor for seed.example"},
		{stranger, "seed.example", "seed.example", "", "unknown authority"},
		{stranger, "127.0.0.1", "seed.example", "", "unknown authority"},
		// The hostname the node announces (cluster-announce-hostname).
		{certs, "node9.example", "seed.example", "node9.example", ""},
		{certs, "node9.example", "", "node9.example", ""},
		{certs, "node9.example", "seed.example", "node8.example", "nor for seed.example or node8.example"},
		{stranger, "node9.example", "seed.example", "node9.example", "unknown authority"},
	} {
		addr := serve(tc.certs, tc.certFor)
		for _, earlier := range []bool{false, true} {
			cfg := Config{Address: addr, DialTimeout: 2 * time.Second, TLSOtherName: tc.other,
				TLS: &tls.Config{RootCAs: certs.Pool, MinVersion: tls.VersionTLS12}}
			if tc.announced != "" {
				cfg.TLSAnnouncedName = func() string { return tc.announced }
			}
			if earlier {
				cfg.TLS = clientTLS(cfg, addr)
			}
			nc, err := Dial(context.Background(), cfg)
			if err == nil {
				nc.Close()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("certificate for %s, other name %q, announced %q (earlier %v): %v", tc.certFor, tc.other, tc.announced, earlier, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("certificate for %s, other name %q, announced %q (earlier %v): %v, want an error with %q", tc.certFor, tc.other, tc.announced, earlier, err, tc.want)
			}
		}
	}
}
