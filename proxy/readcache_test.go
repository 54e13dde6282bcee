package proxy_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

var cmdstatCalls = regexp.MustCompile(`cmdstat_(\w+):calls=(\d+),`)

// commandCalls is Redis's own count of calls of a command (INFO
// commandstats): what reached Redis, whoever sent it.
func commandCalls(t *testing.T, rs *redistest.Server, name string) int {
	t.Helper()
	for _, m := range cmdstatCalls.FindAllStringSubmatch(string(rs.Do(t, "INFO", "commandstats")), -1) {
		if m[1] == name {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return 0
}

// hotOnly makes a key hot after 100 reads a second, with no cached prefix.
func hotOnly(c *proxy.Config) {
	c.HotKey = proxytest.HotKeyConfig()
	c.HotKey.Detector.Threshold = 100
}

// servedFromTier reads cmd through c until a read is a tier hit, and
// returns that reply.
func servedFromTier(t *testing.T, p *proxytest.Proxy, c *rawClient, cmd ...string) string {
	t.Helper()
	var r string
	waitFor(t, "tier fill of "+cmd[0], func() bool {
		hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil)
		r = c.do(cmd...)
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil) > hits
	})
	return r
}

// A hot leaderboard's ZREVRANGE 0 9 WITHSCORES is served from the tier with
// the exact bytes Redis sends, in RESP2 and RESP3 (they differ: RESP3 has
// pairs of member and double), without reaching Redis; ZADD and ZINCRBY
// through rproxy and straight to Redis invalidate it.
func TestTierHotZRevRange(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, hotOnly)
	waitServing(t, p)
	for i := range 20 {
		rs.Do(t, "ZADD", "game:scores", strconv.Itoa(i*10), "player:"+strconv.Itoa(i))
	}
	rs.Do(t, "ZADD", "game:scores", "1.5", "player:half")
	top := []string{"ZREVRANGE", "game:scores", "0", "9", "WITHSCORES"}

	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			direct := dialClient(t, rs.Addr)
			c := dialClient(t, p.Addr)
			direct.do("HELLO", proto)
			c.do("HELLO", proto)
			want := direct.do(top...)
			for range 300 { // hot: over 100 reads a second
				c.do(top...)
			}
			if got := servedFromTier(t, p, c, top...); got != want {
				t.Fatalf("from the tier:\n %q\nRedis sends:\n %q", got, want)
			}
			calls := commandCalls(t, rs, "zrevrange")
			hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil)
			for range 50 {
				if got := c.do(top...); got != want {
					t.Fatalf("from the tier: %q, want %q", got, want)
				}
			}
			if n := commandCalls(t, rs, "zrevrange"); n != calls {
				t.Fatalf("50 reads of a cached ZREVRANGE reached Redis %d times", n-calls)
			}
			if h := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil); h < hits+50 {
				t.Fatalf("tier hits went from %v to %v over 50 reads", hits, h)
			}

			// A write through rproxy: the very next read sees it.
			if r := c.do("ZINCRBY", "game:scores", "1000", "player:half"); r[0] == '-' {
				t.Fatal(r)
			}
			want = direct.do(top...)
			if got := c.do(top...); got != want {
				t.Fatalf("after ZINCRBY through rproxy: %q, want %q", got, want)
			}
			servedFromTier(t, p, c, top...)

			// A write straight to Redis: once its invalidation is in, the
			// next read sees it.
			pushes := counterValue(t, p.Registry, "rproxy_hotkey_tracking_invalidations_total", nil)
			direct.do("ZADD", "game:scores", "5000", "player:new"+proto)
			want = direct.do(top...)
			waitFor(t, "the invalidation of the direct ZADD", func() bool {
				return counterValue(t, p.Registry, "rproxy_hotkey_tracking_invalidations_total", nil) > pushes
			})
			if got := c.do(top...); got != want {
				t.Fatalf("after a direct ZADD and its invalidation: %q, want %q", got, want)
			}
			// Cached again, with the new value.
			if got := servedFromTier(t, p, c, top...); got != want {
				t.Fatalf("refilled: %q, want %q", got, want)
			}
		})
	}
}

// Hashes, sets, lists and strings of a hot key are served from the tier as
// Redis sends them, per protocol and per command; commands whose reply is
// not a function of the key's value alone never are.
func TestTierHotKeyCommands(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, hotOnly)
	waitServing(t, p)
	rs.Do(t, "HSET", "hk", "a", "1", "b", "2")
	rs.Do(t, "SADD", "sk", "x", "y", "z")
	rs.Do(t, "RPUSH", "lk", "1", "2", "3")
	rs.Do(t, "SET", "str", "hello", "EX", "1000")
	cached := [][]string{
		{"HGETALL", "hk"}, {"HGET", "hk", "a"}, {"HMGET", "hk", "a", "nope"}, {"HLEN", "hk"},
		{"SMEMBERS", "sk"}, {"SISMEMBER", "sk", "x"}, {"SCARD", "sk"},
		{"LRANGE", "lk", "0", "-1"}, {"LLEN", "lk"},
		{"STRLEN", "str"}, {"EXISTS", "str"}, {"ZRANGE", "nokey", "0", "-1"},
	}
	for _, proto := range []string{"2", "3"} {
		direct := dialClient(t, rs.Addr)
		c := dialClient(t, p.Addr)
		direct.do("HELLO", proto)
		c.do("HELLO", proto)
		for _, cmd := range cached {
			want := direct.do(cmd...)
			for range 300 {
				c.do(cmd...)
			}
			if got := servedFromTier(t, p, c, cmd...); got != want {
				t.Errorf("RESP%s %v from the tier: %q, Redis sends %q", proto, cmd, got, want)
			}
		}
	}
	// Never from the tier: chance, time, or more than one key, though the
	// keys are hot.
	c := dialClient(t, p.Addr)
	for _, cmd := range [][]string{
		{"SRANDMEMBER", "sk"}, {"HRANDFIELD", "hk"}, {"TTL", "str"}, {"PTTL", "str"},
		{"OBJECT", "FREQ", "str"}, {"EXISTS", "str", "hk"},
	} {
		hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil)
		calls := commandCalls(t, rs, toLower(cmd[0]))
		for range 300 {
			c.do(cmd...)
		}
		if h := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil); h != hits {
			t.Errorf("%v: %v tier hits", cmd, h-hits)
		}
		if cmd[0] == "OBJECT" {
			continue // counted by Redis as object|freq
		}
		if n := commandCalls(t, rs, toLower(cmd[0])); n != calls+300 {
			t.Errorf("%v: %d of 300 calls reached Redis", cmd, n-calls)
		}
	}
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// A hot key's read-only commands are coalesced like GETs, whatever
// coalesce.commands lists (here GET only, the tier off): ten identical
// pipelined ZREVRANGEs of a hot key reach Redis at most twice; of a cold
// key, ten times.
func TestCoalesceHotKeyCommands(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		hotOnly(c)
		c.HotKey.Tier = false
		c.Coalesce.Recent = time.Hour // the filter keeps the key's reads
	})
	rs.Do(t, "ZADD", "hot", "1", "a", "2", "b")
	rs.Do(t, "ZADD", "cold", "1", "a", "2", "b")
	c := dialClient(t, p.Addr)
	top := []string{"ZREVRANGE", "hot", "0", "9", "WITHSCORES"}
	want := c.do(top...)
	for range 300 {
		c.do(top...)
	}
	if hot := p.Server.HotKeys(); len(hot) == 0 || hot[0].Key != "hot" {
		t.Fatalf("hot keys %+v", hot)
	}
	for _, key := range []string{"hot", "cold"} {
		calls := commandCalls(t, rs, "zrevrange")
		joins := counterValue(t, p.Registry, "rproxy_coalesce_joins_total", nil)
		var pipe [][]string
		for range 10 {
			pipe = append(pipe, []string{"ZREVRANGE", key, "0", "9", "WITHSCORES"})
		}
		for i, r := range sendAll(c, pipe...) {
			if r != want {
				t.Fatalf("%s reply %d = %q, want %q", key, i, r, want)
			}
		}
		n := commandCalls(t, rs, "zrevrange") - calls
		j := counterValue(t, p.Registry, "rproxy_coalesce_joins_total", nil) - joins
		t.Logf("%s: 10 pipelined ZREVRANGE reached Redis %d times, %v joins", key, n, j)
		if key == "hot" && (n > 2 || j < 8) {
			t.Fatalf("hot key: %d upstream calls, %v joins", n, j)
		}
		if key == "cold" && (n != 10 || j != 0) {
			t.Fatalf("cold key: %d upstream calls, %v joins", n, j)
		}
	}
}

// Writes through rproxy to a hash whose HGET is cached: a reader (RESP2,
// whose replies are filled by a second read on a shared connection, and
// RESP3) that starts after a write was acknowledged never sees an older
// value, with the tracking connection fast or slowed down (fills and
// invalidations then arrive far apart).
func TestTierCommandsNeverStaleAfterProxiedWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*proxy.Config)
	}{{"fast", cacheAll}, {"slow-tracking", slowTracking}} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t)
			// hotkeys.write_limit off: the key, written 300 times, is
			// filled again after every write (more fills to race them), and
			// the waits for a hit below need not wait out its window.
			p := proxytest.Start(t, rs.Addr, tc.opt, func(c *proxy.Config) { c.HotKey.Churn.Limit = 0 })
			waitServing(t, p)
			w := dialClient(t, p.Addr)
			w.do("HSET", "c:h", "n", "0")
			var acked atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var stale atomic.Int64
			var staleMsg atomic.Value
			for r := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := dialClient(t, p.Addr)
					c.do("HELLO", strconv.Itoa(2+r%2))
					for {
						select {
						case <-stop:
							return
						default:
						}
						floor := acked.Load()
						got := c.doErr("HGET", "c:h", "n")
						parts := strings.Split(got, "\r\n")
						v, err := strconv.ParseInt(parts[min(1, len(parts)-1)], 10, 64)
						if err != nil || v < floor {
							stale.Add(1)
							staleMsg.Store(fmt.Sprintf("RESP%d read %q after write %d was acknowledged", 2+r%2, got, floor))
						}
					}
				}()
			}
			for i := 1; i <= 300; i++ {
				if r := w.do("HSET", "c:h", "n", strconv.Itoa(i)); r != ":0\r\n" {
					t.Fatalf("HSET = %q", r)
				}
				acked.Store(int64(i))
				if i%50 == 0 { // let a fill land now and then: the tier must serve
					hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil)
					waitFor(t, "a tier hit", func() bool {
						return counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil) > hits
					})
				}
			}
			close(stop)
			wg.Wait()
			if n := stale.Load(); n > 0 {
				t.Fatalf("%d stale reads, e.g. %s", n, staleMsg.Load())
			}
			if hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil); hits == 0 {
				t.Fatal("the tier served nothing: the test did not exercise it")
			}
		})
	}
}
