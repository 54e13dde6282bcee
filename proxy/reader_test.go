package proxy_test

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// exchange sends in on a fresh connection to addr and returns what comes
// back until the server closes it, or, for an input the server keeps the
// connection open after, the replies to the PING appended to it.
func exchange(t *testing.T, addr string, in []byte, closes bool) string {
	t.Helper()
	c := dialClient(t, addr)
	if closes {
		go c.nc.Write(in) // the server may close before reading all of it
		return c.expectClosed()
	}
	c.send(append(slices.Clip(in), resp.AppendCommandString(nil, "PING")...))
	var got []byte
	for !bytes.HasSuffix(got, []byte("+PONG\r\n")) {
		got = append(got, c.read()...)
	}
	return string(got)
}

// TestProtocolEdgesLikeRedis: framing Redis ignores, rejects or cuts off
// gets the same bytes through rproxy as from Redis itself, and the same
// close; the shared upstream connections survive all of it.
func TestProtocolEdgesLikeRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	other := dialClient(t, p.Addr)
	other.do("SET", "k", "v")
	for _, tc := range []struct {
		name   string
		in     string
		closes bool
		want   string // as Redis answers, checked against Redis too
	}{
		{"empty and negative counts ignored", "*0\r\n*-1\r\n*-5\r\n", false, "+PONG\r\n"},
		{"empty line ignored", "\r\n\n", false, "+PONG\r\n"},
		{"leading zero bulk length", "*1\r\n$04\r\nPING\r\n", true, "-ERR Protocol error: invalid bulk length\r\n"},
		{"leading zero count", "*01\r\n$4\r\nPING\r\n", true, "-ERR Protocol error: invalid multibulk length\r\n"},
		{"replies before the error", "*1\r\n$4\r\nPING\r\n*1\r\n$-1\r\n", true, "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"},
		{"count over INT_MAX", "*2147483648\r\n", true, "-ERR Protocol error: invalid multibulk length\r\n"},
		{"not a bulk", "*1\r\n:1\r\n", true, "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"unterminated count line", "*" + strings.Repeat("1", 70000), true, "-ERR Protocol error: too big mbulk count string\r\n"},
		{"unterminated bulk length line", "*1\r\n$" + strings.Repeat("1", 70000), true, "-ERR Protocol error: too big bulk count string\r\n"},
		{"inline too long", strings.Repeat("a", 70000), true, "-ERR Protocol error: too big inline request\r\n"},
		{"inline quotes", "ECHO \"a\\x41\\n\"\r\nECHO 'b\\'c'\n", false, "$3\r\naA\n\r\n$3\r\nb'c\r\n+PONG\r\n"},
		{"inline unbalanced quotes", "ECHO \"a\r\n", true, "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"unchecked CRLFs", "*2\r\n$4\r\nECHO\rX$1\r\naYZ", false, "$1\r\na\r\n+PONG\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := exchange(t, rs.Addr, []byte(tc.in), tc.closes)
			proxied := exchange(t, p.Addr, []byte(tc.in), tc.closes)
			if proxied != direct {
				t.Fatalf("through rproxy %q, from Redis %q", proxied, direct)
			}
			if proxied != tc.want {
				t.Fatalf("got %q, want %q", proxied, tc.want)
			}
		})
	}
	if got := other.do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("other client afterwards: %q", got)
	}
	// One connect per protocol and the tier's tracking connection at
	// start; a lost connection would reconnect.
	if n := counterValue(t, p.Registry, "rproxy_upstream_connects_total", nil); n != 3 {
		t.Fatalf("upstream connects = %v, want 3: a shared connection was lost", n)
	}
}

// TestUnauthenticatedLimits: before AUTH, a client gets Redis's limits for
// unauthenticated clients (10 arguments, 16384-byte bulks) and is closed
// with Redis's errors; after AUTH, in the same pipeline, they are lifted.
func TestUnauthenticatedLimits(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"default": sha("pw")}
	})
	big := strings.Repeat("x", 16385)
	t.Run("count", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		args := []string{"MSET"}
		for i := range 5 {
			args = append(args, "k"+string(rune('a'+i)), "v")
		}
		c.send(resp.AppendCommandString(nil, args...)) // 11 arguments
		if got := c.expectClosed(); got != "-ERR Protocol error: unauthenticated multibulk length\r\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("bulk", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		go c.nc.Write(resp.AppendCommandString(nil, "AUTH", big))
		if got := c.expectClosed(); got != "-ERR Protocol error: unauthenticated bulk length\r\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("within limits", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		if got := c.do("GET", "k"); !strings.HasPrefix(got, "-NOAUTH") {
			t.Fatalf("GET before AUTH = %q", got)
		}
	})
	t.Run("back after RESET in the same pipeline", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		var in []byte
		in = resp.AppendCommandString(in, "AUTH", "pw")
		in = resp.AppendCommandString(in, "RESET")
		in = resp.AppendCommandString(in, "MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5")
		c.send(in)
		if got := c.expectClosed(); got != "+OK\r\n+RESET\r\n-ERR Protocol error: unauthenticated multibulk length\r\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("lifted by AUTH in the same pipeline", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		var in []byte
		in = resp.AppendCommandString(in, "AUTH", "pw")
		in = resp.AppendCommandString(in, "SET", "big", big)
		in = resp.AppendCommandString(in, "MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5")
		c.send(in)
		for i, want := range []string{"+OK\r\n", "+OK\r\n", "+OK\r\n"} {
			if got := string(c.read()); got != want {
				t.Fatalf("reply %d = %q, want %q", i, got, want)
			}
		}
	})
}

// processCPU returns the CPU time this process has used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestDripCostsLittle: a client that declares 2^31-1 arguments and then
// sends them a few bytes at a time costs the proxy little CPU, whatever it
// declared, and other clients are served meanwhile.
func TestDripCostsLittle(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	other := dialClient(t, p.Addr)
	other.do("PING")
	drip := dialClient(t, p.Addr)
	drip.send([]byte("*2147483647\r\n"))
	const drips = 300
	before := processCPU(t)
	var pings []time.Duration
	for i := range drips {
		// One byte per write, each followed by another client's PING
		// round trip, so that the drip's bytes arrive one by one.
		drip.send([]byte("$1\r\na\r\n")[i%7 : i%7+1])
		start := time.Now()
		if got := other.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING = %q", got)
		}
		pings = append(pings, time.Since(start))
	}
	// A generous bound: the redcon-based reader spent about 130 ms of CPU per read here.
	used := processCPU(t) - before
	slices.Sort(pings)
	t.Logf("%d one-byte reads of a *2147483647 command: %v of CPU; other client's PING p50 %v", drips, used, pings[len(pings)/2])
	if used > 500*time.Millisecond {
		t.Fatalf("%d drips cost %v of CPU, want well under 500ms", drips, used)
	}
	if p50 := pings[len(pings)/2]; p50 > 20*time.Millisecond {
		t.Fatalf("other client's PING p50 %v during the drip", p50)
	}
}

// TestIdleConnectionMemory: an idle client (connected, one PING served)
// holds no read or reply buffer and, once parked, no goroutine and no
// batch state: the heap grows by well under 4 KB per idle client, both
// ends counted, and goroutine stacks not at all. A first round of as
// many clients, connected, parked and gone, leaves what the runtime
// keeps for reuse (the ended goroutines' descriptors, about 0.5 KB each,
// the session map's buckets), so the round measured counts what each
// client costs while it stays.
func TestIdleConnectionMemory(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleParkAfter = 200 * time.Millisecond })
	const clients = 2000
	measure := func() (heap, stack uint64) {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, ms.StackInuse
	}
	ping := resp.AppendCommandString(nil, "PING")
	buf := make([]byte, 7)
	var conns []net.Conn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	defer closeAll()
	connectAll := func() {
		t.Helper()
		for range clients {
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			conns = append(conns, c)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(ping); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(buf); err != nil || string(buf) != "+PONG\r\n" {
				t.Fatalf("PING = %q, %v", buf, err)
			}
		}
	}
	warm := dialClient(t, p.Addr)
	warm.do("PING")
	connectAll()
	waitParked(t, p, clients+1)
	closeAll()
	waitFor(t, "the first round's clients to leave", func() bool {
		return counterValue(t, p.Registry, "rproxy_proxy_client_connections", nil) == 1
	})
	heap0, stack0 := measure()
	connectAll()
	per := func(after, before uint64) int64 { return (int64(after) - int64(before)) / clients }
	// Before parking (some parked already): the read loops' goroutines
	// hold their stacks, 4 KB each.
	heap1, stack1 := measure()
	t.Logf("per idle client before parking: heap %d B, goroutine stack %d B (client and proxy ends)", per(heap1, heap0), per(stack1, stack0))

	waitParked(t, p, clients+1)
	heap2, stack2 := measure()
	perHeap, perStack := per(heap2, heap0), per(stack2, stack0)
	// The test's own client sockets are on this heap too (about 0.3 KB
	// each); the bound covers both ends.
	t.Logf("per idle client parked: heap %d B, goroutine stack %d B (client and proxy ends)", perHeap, perStack)
	const heapBound = 3584 // -race too: measured 2.4-3.0 KB either way
	if perHeap > heapBound {
		t.Fatalf("heap per parked client %d B, want at most %d", perHeap, heapBound)
	}
	if perStack > 256 {
		t.Fatalf("goroutine stack per parked client %d B, want none", perStack)
	}
}

// TestShortLivedConnectionAllocs: a client that connects, sends one
// command and leaves (a PHP worker without persistent connections) costs
// the heap a few KB, both ends counted: the read buffer its last read took
// goes back to the pool when it leaves, not to the collector (a fresh
// 16 KB buffer per connection before).
func TestShortLivedConnectionAllocs(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	clients := func() float64 { return counterValue(t, p.Registry, "rproxy_proxy_client_connections", nil) }
	ping := resp.AppendCommandString(nil, "PING")
	buf := make([]byte, 7)
	cycle := func() {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(ping); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
			t.Fatalf("PING = %q, %v", buf, err)
		}
		c.Close()
	}
	for range 50 { // the pools and the proxy's lazily made state
		cycle()
	}
	waitFor(t, "the warm-up clients to leave", func() bool { return clients() == 0 })
	const conns = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range conns {
		cycle()
	}
	waitFor(t, "the clients to leave", func() bool { return clients() == 0 })
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / conns
	t.Logf("allocated per short-lived connection: %d B (client and proxy ends)", per)
	// Under the race detector sync.Pool drops a share of what is put back.
	bound := uint64(8 << 10)
	if raceEnabled {
		bound = 24 << 10
	}
	if per > bound {
		t.Fatalf("%d B allocated per short-lived connection, want at most %d", per, bound)
	}
}

// TestBlockedClientInputIsBounded: what a client sends while blocked in
// BLPOP is kept for after it (Redis does not parse a blocked client's
// input either), up to the query buffer limit: past it the client is
// closed, silently as Redis does, and its pinned connection released.
func TestBlockedClientInputIsBounded(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.MaxQueryBuffer = 64 << 10 })
	t.Run("kept", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		c.send(resp.AppendCommandString(nil, "BLPOP", "kept", "0"))
		waitFor(t, "the BLPOP to be pinned", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_pinned_connections", nil) == 1
		})
		c.send(resp.AppendCommandString(nil, "PING"))
		dialClient(t, p.Addr).do("LPUSH", "kept", "v")
		if got := string(c.read()); got != "*2\r\n$4\r\nkept\r\n$1\r\nv\r\n" {
			t.Fatalf("BLPOP woke with %q", got)
		}
		if got := string(c.read()); got != "+PONG\r\n" {
			t.Fatalf("PING sent while blocked = %q", got)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		c.send(resp.AppendCommandString(nil, "BLPOP", "bounded", "0"))
		waitFor(t, "the BLPOP to be pinned", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_pinned_connections", nil) == 1
		})
		var pings []byte
		for len(pings) <= 64<<10 {
			pings = resp.AppendCommandString(pings, "PING")
		}
		go c.nc.Write(pings)
		if got := c.expectClosed(); got != "" {
			t.Fatalf("got %q, want a silent close", got[:min(len(got), 200)])
		}
		assertNoPins(t, p)
	})
}
