package proxy_test

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/coalesce"
	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// TestStallDivertServesReadsDuringAWritePause: while Redis pauses writes
// (CLIENT PAUSE WRITE, as FAILOVER does), it stops reading a connection at
// its first write. A client's SET on the shared connection held every
// other client's commands behind it for the whole pause, where on Redis
// only the writer waits. With upstream.stall_divert, once the connection
// has been stalled that long, another client's GET goes around it (to a
// spare connection) and is answered while the SET still waits; the SET is
// answered when the pause ends. Run twice: the spare, once dialled, is
// kept and reused.
func TestStallDivertServesReadsDuringAWritePause(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	rs.Do(t, "SET", "x", "1")
	for round := range 2 {
		writer, reader := dialClient(t, p.Addr), dialClient(t, p.Addr)
		writer.do("PING")
		reader.do("PING")
		if r := string(rs.Do(t, "CLIENT", "PAUSE", "20000", "WRITE")); r != "+OK\r\n" {
			t.Fatalf("CLIENT PAUSE: %q", r)
		}
		writer.send(resp.AppendCommandString(nil, "SET", "k", "v"))
		waitFor(t, "the shared connection stalled", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) >= 1
		})
		diverted := counterValue(t, p.Registry, "rproxy_upstream_diverted_batches_total", nil)
		if r := reader.do("GET", "x"); r != "$1\r\n1\r\n" {
			t.Fatalf("round %d: GET during the write pause: %q", round, r)
		}
		if got := counterValue(t, p.Registry, "rproxy_upstream_diverted_batches_total", nil); got <= diverted {
			t.Errorf("round %d: diverted batches %v, want more than %v", round, got, diverted)
		}
		writer.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var ne net.Error
		if _, err := writer.rd.ReadByte(); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("round %d: the paused SET was answered before the pause ended (%v)", round, err)
		}
		rs.Do(t, "CLIENT", "UNPAUSE")
		if r := string(writer.read()); r != "+OK\r\n" {
			t.Fatalf("round %d: SET after the pause: %q", round, r)
		}
		waitFor(t, "no stalled connection", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) == 0
		})
	}
}

// TestStallDivertLongScriptBusyAsRedis: while a script runs past Redis's
// busy-reply-threshold, Redis answers other clients -BUSY. Through rproxy
// their commands waited behind the script on the shared connection; with
// upstream.stall_divert they go around it and get Redis's -BUSY, as a
// direct client does at the same moment. In mode sentinel every dial asks
// ROLE, which a busy Redis answers -BUSY too: the spare's dial failed, and
// the client got "upstream unavailable: ROLE: ..." (Redis's Tcl suite in
// database 0 through a Sentinel found it).
func TestStallDivertLongScriptBusyAsRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		rs := redistest.Start(t, "--busy-reply-threshold", "100")
		longScriptBusyAsRedis(t, rs, proxytest.Start(t, rs.Addr), false)
	})
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinelReplicas(t, "busy", 0)
		g.Master.Do(t, "CONFIG", "SET", "busy-reply-threshold", "100")
		sen, err := upstream.NewSentinel(upstream.SentinelConfig{MasterName: g.Name, Addresses: g.Addrs()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sen.Close)
		p := proxytest.Start(t, "sentinel/busy", func(c *proxy.Config) { c.Upstream.Sentinel = sen })
		longScriptBusyAsRedis(t, g.Master, p, true)
	})
}

// longScriptBusyAsRedis runs a 1.5 s script through p and another client's
// ECHO during it. A Sentinel sends SCRIPT KILL to a master that has
// answered -BUSY for its down-after time: with killable, the script may end
// so.
func longScriptBusyAsRedis(t *testing.T, rs *redistest.Server, p *proxytest.Proxy, killable bool) {
	caller, other := dialClient(t, p.Addr), dialClient(t, p.Addr)
	other.do("PING")
	caller.send(resp.AppendCommandString(nil, "EVAL", busyScript, "0", "1500"))
	waitBusy(t, rs)
	waitFor(t, "the shared connection stalled", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) >= 1
	})
	direct, err := rs.Exec("ECHO", "x")
	if err != nil {
		t.Fatal(err)
	}
	if r := other.doErr("ECHO", "x"); r != string(direct) || !strings.HasPrefix(r, "-BUSY") {
		t.Errorf("ECHO during the script through rproxy: %q, want %q as from Redis directly", r, direct)
	}
	r := string(caller.read())
	if r != "$4\r\ndone\r\n" && !(killable && strings.Contains(r, "killed by user")) {
		t.Errorf("the script: %q, want its result", r)
	}
}

// TestStallDivertHotKeyReadsNotHeldBehindAStalledFlight: a hot key's reads
// share flights (coalescing), and a new flight of the key is held until
// the key's previous shared flight has its reply. When that flight was
// sent behind a paused write, the key's reads waited for the whole pause,
// where on Redis (and for every other key through rproxy) they are
// answered during it. With coalesce.window inflight, a later read also
// joined that flight and waited with it. On a cluster the batch that led
// the flight is split across masters, and one of its parts stalls.
func TestStallDivertHotKeyReadsNotHeldBehindAStalledFlight(t *testing.T) {
	for _, window := range []coalesce.Window{coalesce.Unsent, coalesce.InFlight} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			rs := redistest.Start(t)
			p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
				c.Coalesce.Window = window
				c.Coalesce.Recent = time.Hour // the filter must not forget "hot" between the batch's reads
			})
			hotKeyReadsDuringAWritePause(t, p, func(args ...string) []byte { return rs.Do(t, args...) }, "hot", "k", "far")
		})
	}
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0)
		p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Coalesce.Recent = time.Hour })
		m := cl.MasterForSlot(t, cl.Slot("hot"))
		var setKey, far string
		for i := 0; setKey == "" || far == ""; i++ {
			k := fmt.Sprintf("x%d", i)
			if cl.MasterForSlot(t, cl.Slot(k)) == m {
				setKey = cmp.Or(setKey, k)
			} else {
				far = cmp.Or(far, k)
			}
		}
		hotKeyReadsDuringAWritePause(t, p, func(args ...string) []byte { return m.Do(t, args...) }, "hot", setKey, far)
	})
}

// hotKeyReadsDuringAWritePause pauses writes on the server behind do, which
// holds hot and setKey, and reads hot during the pause (far: a key read in
// the same batch, on another master of a cluster).
func hotKeyReadsDuringAWritePause(t *testing.T, p *proxytest.Proxy, do func(args ...string) []byte, hot, setKey, far string) {
	do("SET", hot, "1")
	writer, first, later := dialClient(t, p.Addr), dialClient(t, p.Addr), dialClient(t, p.Addr)
	writer.do("PING")
	first.do("PING")
	later.do("PING")
	if r := string(do("CLIENT", "PAUSE", "20000", "WRITE")); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE: %q", r)
	}
	t.Cleanup(func() { do("CLIENT", "UNPAUSE") })
	// The SET stops Redis reading the shared connection; the reads sent
	// after it (a shared flight: the second leads it, the third joins)
	// wait behind it.
	writer.send(resp.AppendCommandString(nil, "SET", setKey, "v"))
	waitFor(t, "the SET postponed by the pause", func() bool {
		return strings.Contains(string(do("INFO", "clients")), "blocked_clients:1\r\n")
	})
	var reads []byte
	for range 3 {
		reads = resp.AppendCommandString(reads, "GET", hot)
	}
	first.send(resp.AppendCommandString(reads, "GET", far))
	waitFor(t, "the shared connection stalled", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) >= 1
	})
	first.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := first.rd.ReadByte(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatal("the first reads were answered before the pause held them: sent after the stall was noticed, so the test exercised nothing")
	}
	if j := counterValue(t, p.Registry, "rproxy_coalesce_joins_total", nil); j != 1 {
		t.Fatalf("joins: %v, want the first client's third read joined to its second", j)
	}
	start := time.Now()
	later.nc.SetReadDeadline(start.Add(time.Second))
	later.send(append(resp.AppendCommandString(nil, "GET", hot), resp.AppendCommandString(nil, "GET", hot)...))
	for i := range 2 {
		r, err := resp.ReadReply(later.rd, nil)
		if err != nil {
			t.Fatalf("GET %d of the hot key during the write pause: no reply after %v (%v)", i+1, time.Since(start), err)
		}
		if string(r) != "$1\r\n1\r\n" {
			t.Fatalf("GET %d of the hot key during the write pause: %q", i+1, r)
		}
	}
	// The stalled flight takes no joiners: the later client's first read
	// leads a flight of its own and its second joins that one.
	if f := counterValue(t, p.Registry, "rproxy_coalesce_flights_total", nil); f != 2 {
		t.Errorf("flights: %v, want 2 (the later client's first read leads one)", f)
	}
	if j := counterValue(t, p.Registry, "rproxy_coalesce_joins_total", nil); j != 2 {
		t.Errorf("joins: %v, want 2 (the later client's second read joined its first)", j)
	}
	do("CLIENT", "UNPAUSE")
	for range 3 {
		if r := string(first.read()); r != "$1\r\n1\r\n" {
			t.Fatalf("a read behind the paused SET: %q", r)
		}
	}
	if r := string(first.read()); r != "$-1\r\n" {
		t.Fatalf("GET %s: %q", far, r)
	}
	if r := string(writer.read()); r != "+OK\r\n" {
		t.Fatalf("SET after the pause: %q", r)
	}
}

// TestStallDivertOnACluster: a write paused on one master (CLIENT PAUSE
// WRITE) holds the reads that share its connection; they go around it on a
// cluster upstream too.
func TestStallDivertOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	// Two keys on one master: the SET's and the GET's.
	m := cl.MasterForSlot(t, cl.Slot("k"))
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("x%d", i); cl.MasterForSlot(t, cl.Slot(k)) == m {
			other = k
		}
	}
	m.Do(t, "SET", other, "1")
	writer, reader := dialClient(t, p.Addr), dialClient(t, p.Addr)
	writer.do("GET", "k")
	reader.do("GET", other)
	if r := string(m.Do(t, "CLIENT", "PAUSE", "20000", "WRITE")); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE: %q", r)
	}
	t.Cleanup(func() { m.Do(t, "CLIENT", "UNPAUSE") })
	writer.send(resp.AppendCommandString(nil, "SET", "k", "v"))
	waitFor(t, "the master's shared connection stalled", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) >= 1
	})
	reader.nc.SetReadDeadline(time.Now().Add(time.Second))
	reader.send(resp.AppendCommandString(nil, "GET", other))
	if r, err := resp.ReadReply(reader.rd, nil); err != nil || string(r) != "$1\r\n1\r\n" {
		t.Fatalf("GET of another key of the paused master: %q, %v", r, err)
	}
	m.Do(t, "CLIENT", "UNPAUSE")
	if r := string(writer.read()); r != "+OK\r\n" {
		t.Fatalf("SET after the pause: %q", r)
	}
}

// TestPausedWriteWaitsPastTimeout: a write Redis holds while writes are
// paused (CLIENT PAUSE WRITE, FAILOVER) waits for the pause to end, as on
// Redis, however long past upstream.timeout. Before, rproxy took its
// shared connection for dead at upstream.timeout, failed the write and
// every command behind it with "upstream unavailable", and reset the
// connection (Redis's Tcl suite in cluster mode, unit/pause). A pinned
// session's write (inside MULTI) waits the same way.
func TestPausedWriteWaitsPastTimeout(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.Timeout = 300 * time.Millisecond })
	writer, tx := dialClient(t, p.Addr), dialClient(t, p.Addr)
	writer.do("PING")
	tx.do("MULTI")
	tx.do("SET", "t", "1")
	if r := string(rs.Do(t, "CLIENT", "PAUSE", "1500", "WRITE")); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE: %q", r)
	}
	start := time.Now()
	writer.send(resp.AppendCommandString(nil, "SET", "k", "v"))
	tx.send(resp.AppendCommandString(nil, "EXEC"))
	if r := string(writer.read()); r != "+OK\r\n" {
		t.Errorf("SET during a 1.5 s write pause, upstream.timeout 300ms: %q after %v, want +OK once the pause ends", r, time.Since(start))
	}
	if r := string(tx.read()); r != "*1\r\n+OK\r\n" {
		t.Errorf("EXEC of a SET during the pause: %q after %v, want its +OK once the pause ends", r, time.Since(start))
	}
	if r := string(rs.Do(t, "MGET", "k", "t")); r != "*2\r\n$1\r\nv\r\n$1\r\n1\r\n" {
		t.Errorf("after the pause: MGET k t = %q", r)
	}
}

// TestClientPauseThroughProxyHoldsOnlyTheWriter: during a CLIENT PAUSE
// WRITE sent through rproxy, a client's write waits for the pause, and
// another client's commands sent right after it are answered at once, as
// on Redis: Redis's own test polls INFO for the blocked writer. Before,
// the write went on the shared connection, Redis stopped reading it there,
// and the INFO sent behind it waited for the whole pause (Redis's Tcl suite
// in cluster mode, unit/pause: the unit hung).
func TestClientPauseThroughProxyHoldsOnlyTheWriter(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	admin, writer, reader := dialClient(t, p.Addr), dialClient(t, p.Addr), dialClient(t, p.Addr)
	writer.do("PING")
	reader.do("PING")
	if r := admin.do("CLIENT", "PAUSE", "20000", "WRITE"); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE through rproxy: %q", r)
	}
	t.Cleanup(func() { rs.Do(t, "CLIENT", "UNPAUSE") })
	writer.send(resp.AppendCommandString(nil, "SET", "k", "v"))
	for blocked := false; !blocked; {
		start := time.Now()
		reader.nc.SetDeadline(time.Now().Add(time.Second))
		reader.send(resp.AppendCommandString(nil, "INFO", "clients"))
		r, err := resp.ReadReply(reader.rd, nil)
		if err != nil {
			t.Fatalf("INFO during the pause, sent after the paused SET: %v after %v", err, time.Since(start))
		}
		blocked = strings.Contains(string(r), "blocked_clients:1\r\n")
	}
	if r := reader.do("GET", "k"); r != "$-1\r\n" {
		t.Errorf("GET k during the pause: %q, want nil (the SET waits)", r)
	}
	if r := admin.do("CLIENT", "UNPAUSE"); r != "+OK\r\n" {
		t.Fatalf("CLIENT UNPAUSE: %q", r)
	}
	if r := string(writer.read()); r != "+OK\r\n" {
		t.Errorf("the paused SET after UNPAUSE: %q", r)
	}
	if r := reader.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Errorf("GET k after the pause: %q", r)
	}
}

// TestScriptKillPipelinedBehindTheScript: a SCRIPT KILL pipelined after a
// command that went onto the shared connection behind another client's
// endless script stops the script at once. Before 2026-12-01 rproxy sent
// the kill only once the command before it was answered, which Redis does
// only after the script: the client waited for upstream.timeout, and the
// script ran on. Stall diverting is off here, so the ECHO is sure to wait
// behind the script (with it on, a command sent before the stall is seen
// waits the same way).
func TestScriptKillPipelinedBehindTheScript(t *testing.T) {
	rs := redistest.Start(t, "--busy-reply-threshold", "50")
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Upstream.StallDivert = 0
		c.Upstream.Timeout = 20 * time.Second
	})
	running, killer := dialClient(t, p.Addr), dialClient(t, p.Addr)
	killer.do("PING")
	running.send(resp.AppendCommandString(nil, "EVAL", "while true do end", "0"))
	waitBusy(t, rs)
	start := time.Now()
	killer.send(append(resp.AppendCommandString(nil, "ECHO", "e"), resp.AppendCommandString(nil, "SCRIPT", "KILL")...))
	echo, kill := string(killer.read()), string(killer.read())
	if echo != "$1\r\ne\r\n" && !strings.HasPrefix(echo, "-BUSY") || kill != "+OK\r\n" {
		t.Fatalf("ECHO, SCRIPT KILL behind a running script: %q, %q; want ECHO's reply (or -BUSY), +OK", echo, kill)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the replies took %v: the kill waited behind the script", took)
	}
	if r := string(running.read()); !strings.Contains(r, "killed by user") {
		t.Errorf("the killed EVAL got %q", r)
	}
}

// TestBacklogDivertServesAGetBehindAHeldLargeSet: a client's small read
// queued on the shared connection behind other clients' large commands
// waited for Redis to read and run all of them, where directly Redis
// reads each client's connection in turn (bench/mixed.sh measured a
// small GET at 5.5 ms behind ten clients' pipelined 100 KB SETs). With
// upstream.backlog_divert (the shipped 1mb), a small batch goes around a
// connection holding that many unanswered bytes, to a spare. Here the
// backlog is a 1.5 MB SET that a write pause holds (stall_divert off, so
// that only the backlog sends batches around it): once the spare is up,
// another client's GET is answered during the pause, and the SET, with
// the GET that went before the spare was up, when it ends.
func TestBacklogDivertServesAGetBehindAHeldLargeSet(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.StallDivert = 0 })
	rs.Do(t, "SET", "x", "1")
	writer, first, reader := dialClient(t, p.Addr), dialClient(t, p.Addr), dialClient(t, p.Addr)
	for _, c := range []*rawClient{writer, first, reader} {
		c.do("PING")
	}
	if r := string(rs.Do(t, "CLIENT", "PAUSE", "20000", "WRITE")); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE: %q", r)
	}
	t.Cleanup(func() { rs.Do(t, "CLIENT", "UNPAUSE") })
	big := strings.Repeat("v", 1536<<10)
	writer.send(resp.AppendCommandString(nil, "SET", "big", big))
	waitFor(t, "Redis holding the SET", func() bool {
		for _, line := range strings.Split(string(rs.Do(t, "CLIENT", "LIST")), "\n") {
			if strings.Contains(line, " flags=b ") && strings.Contains(line, " cmd=set ") {
				return true
			}
		}
		return false
	})
	// The first small batch starts the spare, and waits behind the SET
	// if it comes before the spare is up.
	first.send(resp.AppendCommandString(nil, "GET", "x"))
	resp2 := map[string]string{"protocol": "2"}
	waitFor(t, "the spare connection up", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_connections", resp2) >= 2
	})
	backlog := map[string]string{"reason": "backlog"}
	diverted := counterValue(t, p.Registry, "rproxy_upstream_diverted_batches_total", backlog)
	if r := reader.do("GET", "x"); r != "$1\r\n1\r\n" {
		t.Fatalf("GET behind the held SET: %q", r)
	}
	if got := counterValue(t, p.Registry, "rproxy_upstream_diverted_batches_total", backlog); got <= diverted {
		t.Errorf("diverted batches (backlog) %v, want more than %v", got, diverted)
	}
	writer.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := writer.rd.ReadByte(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the paused SET was answered before the pause ended (%v)", err)
	}
	rs.Do(t, "CLIENT", "UNPAUSE")
	if r := string(writer.read()); r != "+OK\r\n" {
		t.Fatalf("SET after the pause: %q", r)
	}
	if r := string(first.read()); r != "$1\r\n1\r\n" {
		t.Fatalf("the first GET: %q", r)
	}
	if r := reader.do("STRLEN", "big"); r != fmt.Sprintf(":%d\r\n", len(big)) {
		t.Fatalf("STRLEN big: %q", r)
	}
}
