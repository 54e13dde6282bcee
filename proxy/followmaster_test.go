package proxy_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// startPair starts a master and its replica, neither waiting for the
// other at start or at the end.
func startPair(t *testing.T) (a, b *redistest.Server) {
	a = redistest.Start(t, "--shutdown-timeout", "0", "--repl-diskless-sync-delay", "0")
	b = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(a.Port), "--shutdown-timeout", "0", "--repl-diskless-sync-delay", "0")
	return a, b
}

func followFast(c *proxy.Config) { c.FollowMaster, c.FollowEvery = true, 20*time.Millisecond }

// TestStandaloneFollowsTheMasterBehindOneAddress: a failover behind the
// one address rproxy dials (a cloud provider's primary endpoint, whose
// DNS name moves to the promoted replica a moment after the promotion)
// while clients increment counters, run one-write transactions, read and
// run WATCH loops. rproxy's connections to the old master, now a replica,
// get READONLY for writes as a client connected to it directly does; at
// the first, rproxy looks for a master at the address, and once the name
// has moved it dials every connection again, to the new master: writes
// succeed with no error from then on. Before, every write got READONLY
// until rproxy restarted.
func TestStandaloneFollowsTheMasterBehindOneAddress(t *testing.T) {
	a, b := startPair(t)
	var target atomic.Pointer[string] // where the name resolves now
	target.Store(&a.Addr)
	var d net.Dialer
	p := proxytest.Start(t, "redis.example:6379", followFast, func(c *proxy.Config) {
		c.Upstream.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, *target.Load())
		}
	})
	workers := counterWorkers("fm")
	stop := runLoadWorkers(p.Addr, workers)
	defer stop()
	waitAcked(t, workers, 300, "before the failover")

	// The failover: the replica promoted, the old master made its replica
	// (rproxy's connections to it stay), and the name moved 200 ms later.
	b.Do(t, "REPLICAOF", "NO", "ONE")
	a.Do(t, "REPLICAOF", "127.0.0.1", strconv.Itoa(b.Port))
	time.Sleep(200 * time.Millisecond) // the DNS record's lag, on purpose
	target.Store(&b.Addr)
	c := dialClient(t, p.Addr)
	waitFor(t, "a write through rproxy to succeed", func() bool { return c.do("SET", "after", "1") == "+OK\r\n" })
	if got := string(b.Do(t, "GET", "after")); got != "$1\r\n1\r\n" {
		t.Errorf("GET on the new master = %q", got)
	}
	if info := c.do("INFO", "proxy"); !strings.Contains(info, "upstream_master_follows:1\r\n") {
		t.Errorf("INFO proxy after the failover does not count one move:\n%s", info)
	}
	for _, w := range workers {
		if n := w.errs.Swap(0); n > 0 {
			t.Logf("%s on %s: %d errors during the failover, the last %q", w.kind, w.key, n, *w.last.Load())
		}
	}
	waitAcked(t, workers, ackedSum(workers)+300, "after the failover")
	stop()
	for _, w := range workers {
		if n := w.errs.Load(); n > 0 {
			t.Errorf("%s on %s: %d errors once the name had moved, the last %q", w.kind, w.key, n, *w.last.Load())
		}
	}
}

// TestStandaloneServerMadeReplicaAndBack: the server made a replica and
// then a master again through rproxy (REPLICAOF, then REPLICAOF NO ONE,
// as Redis's own tests do): writes get READONLY in between, as on Redis,
// and afterwards succeed on the same connections: a session pinned
// across it (SELECT 1) is not closed.
func TestStandaloneServerMadeReplicaAndBack(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, followFast)
	c := dialClient(t, p.Addr)
	pinned := dialClient(t, p.Addr)
	if r := pinned.do("SELECT", "1"); r != "+OK\r\n" {
		t.Fatalf("SELECT 1 = %q", r)
	}
	pinned.do("SET", "k", "v")
	dead := redistest.FreePort(t)
	if r := c.do("REPLICAOF", "127.0.0.1", strconv.Itoa(dead)); r != "+OK\r\n" {
		t.Fatalf("REPLICAOF = %q", r)
	}
	if r := c.do("SET", "x", "1"); !strings.HasPrefix(r, "-READONLY ") {
		t.Fatalf("SET on the replica = %q, want Redis's READONLY", r)
	}
	if r := pinned.do("SET", "k", "w"); !strings.HasPrefix(r, "-READONLY ") {
		t.Fatalf("SET on the replica, pinned = %q", r)
	}
	if info := c.do("INFO", "proxy"); !strings.Contains(info, "upstream_master_searching:1\r\n") {
		t.Errorf("INFO proxy after a READONLY does not show the search:\n%s", info)
	}
	if r := c.do("REPLICAOF", "NO", "ONE"); r != "+OK\r\n" {
		t.Fatalf("REPLICAOF NO ONE = %q", r)
	}
	waitFor(t, "the search to end", func() bool {
		return strings.Contains(c.do("INFO", "proxy"), "upstream_master_searching:0\r\n")
	})
	if r := c.do("SET", "x", "2"); r != "+OK\r\n" {
		t.Errorf("SET after REPLICAOF NO ONE = %q", r)
	}
	if r := pinned.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Errorf("GET on the pinned session after = %q (closed?)", r)
	}
	if info := c.do("INFO", "proxy"); !strings.Contains(info, "upstream_master_follows:0\r\n") {
		t.Errorf("INFO proxy: the same server a master again moved the connections:\n%s", info)
	}
}

// TestStandaloneInFrontOfAReplicaStays: rproxy pointed at a replica on
// purpose (its address never answered as a master) serves its reads and
// passes Redis's READONLY on for writes, as the replica does, and looks
// for no master.
func TestStandaloneInFrontOfAReplicaStays(t *testing.T) {
	a, b := startPair(t)
	a.Do(t, "SET", "k", "v")
	waitFor(t, "the replica's sync", func() bool { return string(b.Do(t, "GET", "k")) == "$1\r\nv\r\n" })
	p := proxytest.Start(t, b.Addr, followFast)
	c := dialClient(t, p.Addr)
	waitFor(t, "the connections up", func() bool { return c.do("GET", "k") == "$1\r\nv\r\n" })
	// Connections the replica accepted, the asking one included.
	conns := func() int {
		_, rest, _ := strings.Cut(string(b.Do(t, "INFO", "stats")), "total_connections_received:")
		n, _ := strconv.Atoi(strings.SplitN(rest, "\r\n", 2)[0])
		return n
	}
	before := conns()
	if r := c.do("SET", "k", "w"); !strings.HasPrefix(r, "-READONLY ") {
		t.Fatalf("SET on a replica through rproxy = %q, want Redis's READONLY", r)
	}
	time.Sleep(200 * time.Millisecond) // ten search rounds, had one started
	if after := conns(); after != before+1 {
		t.Errorf("the replica's total_connections_received %d -> %d (one of them this count's) after a READONLY: rproxy searched for a master", before, after)
	}
	if r := c.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Errorf("GET after the refused write = %q", r)
	}
}
