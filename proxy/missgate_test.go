package proxy_test

import (
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// missGated caches keys under "c:" and holds their missing GETs for wait.
func missGated(wait time.Duration) func(*proxy.Config) {
	return func(c *proxy.Config) {
		cacheAll(c)
		c.HotKey.MissWait = wait
	}
}

// heldGets sends GET key from n new clients, each in its own goroutine,
// and returns their replies as they come.
func heldGets(t *testing.T, addr, key string, n int) <-chan string {
	out := make(chan string, n)
	for range n {
		c := dialClient(t, addr)
		go func() { out <- c.doErr("GET", key) }()
	}
	return out
}

// Cache-aside stampede, collapsed: the first reader to miss fills the key;
// the other readers' GETs are held, and its SET through rproxy releases
// them all with the value it wrote. Without the gate each would get the
// miss and go to the database.
func TestMissCollapsingFillThroughProxy(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, missGated(10*time.Second))
	waitServing(t, p)
	filler := dialClient(t, p.Addr)
	if r := filler.do("GET", "c:user:1"); r != "$-1\r\n" {
		t.Fatalf("first GET = %q", r)
	}
	if r := filler.do("GET", "c:user:1"); r != "$-1\r\n" {
		t.Fatalf("the filler's second GET = %q: it must not wait for itself", r)
	}
	replies := heldGets(t, p.Addr, "c:user:1", 10)
	waitFor(t, "10 held readers", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_miss_waits_total", nil) == 10
	})
	select {
	case r := <-replies:
		t.Fatalf("a held reader got %q before the fill", r)
	default:
	}
	if r := filler.do("SET", "c:user:1", "from-db", "EX", "2"); r != "+OK\r\n" {
		t.Fatalf("SET = %q", r)
	}
	for range 10 {
		if r := <-replies; r != "$7\r\nfrom-db\r\n" {
			t.Fatalf("held reader got %q, want the filled value", r)
		}
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_miss_wait_timeouts_total", nil); n != 0 {
		t.Fatalf("%v held reads timed out", n)
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_miss_fillers_total", nil); n != 1 {
		t.Fatalf("%v fillers, want 1", n)
	}
}

// A fill written straight to Redis releases the held readers through
// client tracking's invalidation.
func TestMissCollapsingFillDirect(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, missGated(10*time.Second))
	waitServing(t, p)
	fills := counterValue(t, p.Registry, "rproxy_hotkey_tier_fills_total", nil)
	if r := dialClient(t, p.Addr).do("GET", "c:user:2"); r != "$-1\r\n" {
		t.Fatalf("first GET = %q", r)
	}
	// The tier has read the key on the tracking connection: Redis tracks it.
	waitFor(t, "the tier's fill of the missing key", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_fills_total", nil) > fills
	})
	replies := heldGets(t, p.Addr, "c:user:2", 5)
	waitFor(t, "5 held readers", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_miss_waits_total", nil) == 5
	})
	rs.Do(t, "SET", "c:user:2", "direct")
	for range 5 {
		if r := <-replies; r != "$6\r\ndirect\r\n" {
			t.Fatalf("held reader got %q, want the value written on Redis", r)
		}
	}
}

// A key that stays absent holds its readers once, for the wait, and gives
// them Redis's reply then; it is learned absent and not held again.
func TestMissCollapsingAbsentKey(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, missGated(50*time.Millisecond))
	waitServing(t, p)
	dialClient(t, p.Addr).do("GET", "c:nope")
	replies := heldGets(t, p.Addr, "c:nope", 1)
	if r := <-replies; r != "$-1\r\n" {
		t.Fatalf("held reader got %q", r)
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_miss_wait_timeouts_total", nil); n != 1 {
		t.Fatalf("%v timeouts, want 1", n)
	}
	waits := counterValue(t, p.Registry, "rproxy_hotkey_miss_waits_total", nil)
	c := dialClient(t, p.Addr)
	for range 20 {
		if r := c.do("GET", "c:nope"); r != "$-1\r\n" {
			t.Fatalf("GET = %q", r)
		}
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_miss_waits_total", nil); n != waits {
		t.Fatalf("a key learned absent held %v more reads", n-waits)
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_miss_absent_keys_total", nil); n != 1 {
		t.Fatalf("%v keys learned absent, want 1", n)
	}
}
