package proxy_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// cacheAll admits every key under "c:" to the tier ("cache these" mode), so
// tests need not make a key hot first.
func cacheAll(c *proxy.Config) {
	c.HotKey = proxytest.HotKeyConfig()
	c.HotKey.Prefixes = []string{"c:"}
}

// waitServing waits until the tier serves (the tracking connection is up).
func waitServing(t *testing.T, p *proxytest.Proxy) {
	t.Helper()
	waitFor(t, "tier serving", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_serving", nil) == 1
	})
}

// cached reads key through the proxy until the tier holds it, and returns
// the reply.
func cached(t *testing.T, p *proxytest.Proxy, c *rawClient, key string) string {
	t.Helper()
	var r string
	waitFor(t, "tier fill of "+key, func() bool {
		r = c.do("GET", key)
		hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil)
		c.do("GET", key)
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil) > hits
	})
	return r
}

// A cached key is served without reaching Redis, byte for byte what Redis
// sends, in RESP2 and RESP3, missing keys included.
func TestTierServesWithoutUpstream(t *testing.T) {
	rs := redistest.Start(t)
	// Miss collapsing off: with it, another client's GET of the missing
	// key would wait for a fill and read Redis again (missgate_test.go).
	p := proxytest.Start(t, rs.Addr, cacheAll, func(c *proxy.Config) { c.HotKey.MissWait = 0 })
	waitServing(t, p)
	rs.Do(t, "SET", "c:k", "value")
	c := dialClient(t, p.Addr)
	if r := cached(t, p, c, "c:k"); r != "$5\r\nvalue\r\n" {
		t.Fatalf("GET = %q", r)
	}
	cached(t, p, c, "c:missing")
	rs.Do(t, "CONFIG", "RESETSTAT")
	for i := 0; i < 100; i++ {
		if r := c.do("GET", "c:k"); r != "$5\r\nvalue\r\n" {
			t.Fatalf("GET %d = %q", i, r)
		}
	}
	if r := c.do("GET", "c:missing"); r != "$-1\r\n" {
		t.Fatalf("RESP2 GET of a missing key = %q", r)
	}
	c3 := dialClient(t, p.Addr)
	c3.do("HELLO", "3")
	if r := c3.do("GET", "c:missing"); r != "_\r\n" {
		t.Fatalf("RESP3 GET of a missing key = %q", r)
	}
	if r := c3.do("GET", "c:k"); r != "$5\r\nvalue\r\n" {
		t.Fatalf("RESP3 GET = %q", r)
	}
	if n := upstreamGets(t, rs); n != 0 {
		t.Fatalf("Redis saw %d GETs of cached keys", n)
	}
	if n, ok := p.Server.TierStats(); !ok || n.Entries != 2 {
		t.Fatalf("tier stats %+v", n)
	}
}

// Writes through rproxy: the writer always reads its own write, and a
// reader that starts after a write was acknowledged never sees an older
// value, while readers keep the key in the tier.
//
// Admission by write rate is off: the key is written a thousand times a
// second, which would keep it out of the tier after its fourth write, and
// this test is about the writes' invalidations while it is in.
func TestTierNeverStaleAfterProxiedWrite(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll, func(c *proxy.Config) { c.HotKey.Churn.Limit = 0 })
	waitServing(t, p)
	w := dialClient(t, p.Addr)
	w.do("SET", "c:n", "0")
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stale atomic.Int64
	var staleMsg atomic.Value
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialClient(t, p.Addr)
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := acked.Load()
				got := c.do("GET", "c:n")
				v, err := strconv.ParseInt(strings.Split(got, "\r\n")[1], 10, 64)
				if err != nil || v < floor {
					stale.Add(1)
					staleMsg.Store(fmt.Sprintf("read %q after write %d was acknowledged", got, floor))
				}
			}
		}()
	}
	for i := 1; i <= 1000; i++ {
		s := strconv.Itoa(i)
		if r := w.do("SET", "c:n", s); r != "+OK\r\n" {
			t.Fatalf("SET = %q", r)
		}
		acked.Store(int64(i))
		if r := w.do("GET", "c:n"); r != fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) {
			t.Fatalf("writer read %q after writing %s", r, s)
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
}

// Each kind of write through rproxy empties the key from the tier: the next
// GET returns what Redis holds.
func TestTierProxiedWritesInvalidate(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	c := dialClient(t, p.Addr)
	cases := []struct {
		name  string
		write [][]string
	}{
		{"DEL", [][]string{{"DEL", "c:k"}}},
		{"UNLINK", [][]string{{"UNLINK", "c:x", "c:k"}}},
		{"EXPIRE", [][]string{{"PEXPIRE", "c:k", "1"}}},
		{"RENAME", [][]string{{"SET", "c:other", "renamed"}, {"RENAME", "c:other", "c:k"}}},
		{"APPEND", [][]string{{"APPEND", "c:k", "-more"}}},
		{"FLUSHALL", [][]string{{"FLUSHALL"}}},
		{"FLUSHDB", [][]string{{"FLUSHDB", "ASYNC"}}},
		{"EVAL", [][]string{{"EVAL", "redis.call('SET', 'c:k', 'by-script')", "0"}}},
		{"FCALL", [][]string{{"FUNCTION", "LOAD", "REPLACE", "#!lua name=t\nredis.register_function('w', function() return redis.call('SET', 'c:k', 'by-function') end)"}, {"FCALL", "w", "0"}}},
		{"MULTI", [][]string{{"MULTI"}, {"SET", "c:k", "in-multi"}, {"EXEC"}}},
		{"MULTI-EVAL", [][]string{{"MULTI"}, {"EVAL", "redis.call('SET', 'c:k', 'multi-script')", "0"}, {"EXEC"}}},
		{"SELECT-MOVE", [][]string{{"SELECT", "0"}, {"MOVE", "c:k", "1"}}},
	}
	for _, tc := range cases {
		rs.Do(t, "SET", "c:k", "old")
		cached(t, p, c, "c:k")
		for _, cmd := range tc.write {
			if r := c.do(cmd...); strings.HasPrefix(r, "-") {
				t.Fatalf("%s: %v = %q", tc.name, cmd, r)
			}
		}
		time.Sleep(2 * time.Millisecond) // let PEXPIRE 1 lapse
		want := string(rs.Do(t, "GET", "c:k"))
		if got := c.do("GET", "c:k"); got != want {
			t.Errorf("%s: GET through rproxy = %q, Redis has %q", tc.name, got, want)
		}
	}
}

// A write made straight to Redis is no longer served once its invalidation
// arrives. The lag, as a client polling through rproxy sees it, is measured
// unloaded and under load (16 clients reading cached keys and writing
// through rproxy meanwhile). Each write is to a key of its own.
func TestTierDirectWriteInvalidates(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	c := dialClient(t, p.Addr)
	// A key per write: one key written hundreds of times would be refused
	// the tier (hotkeys.write_limit) and each fill would wait out the
	// window.
	keys := 0
	measure := func(n int) []time.Duration {
		var lags []time.Duration
		for i := 0; i < n; i++ {
			keys++
			k := "c:d" + strconv.Itoa(keys)
			rs.Do(t, "SET", k, "old")
			cached(t, p, c, k)
			want := fmt.Sprintf("new%d", i)
			rs.Do(t, "SET", k, want)
			start := time.Now()
			for c.do("GET", k) != fmt.Sprintf("$%d\r\n%s\r\n", len(want), want) {
				if time.Since(start) > time.Second {
					t.Fatalf("still served the old value 1s after a direct write")
				}
			}
			lags = append(lags, time.Since(start))
		}
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		return lags
	}
	pct := func(l []time.Duration, q float64) time.Duration { return l[int(q*float64(len(l)-1))] }
	idle := measure(100)
	t.Logf("invalidation lag, unloaded (100 direct writes): p50 %v, p99 %v, max %v", pct(idle, 0.5), pct(idle, 0.99), idle[len(idle)-1])

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops atomic.Int64
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := dialClient(t, p.Addr)
			k := "c:load" + strconv.Itoa(i%4)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if n%10 == 0 {
					lc.do("SET", k, "v")
				} else {
					lc.do("GET", k)
				}
				ops.Add(1)
			}
		}()
	}
	start := time.Now()
	loaded := measure(200)
	rate := float64(ops.Load()) / time.Since(start).Seconds()
	close(stop)
	wg.Wait()
	t.Logf("invalidation lag under load (%.0f background ops/s through rproxy, 200 direct writes): p50 %v, p99 %v, max %v",
		rate, pct(loaded, 0.5), pct(loaded, 0.99), loaded[len(loaded)-1])
	if counterValue(t, p.Registry, "rproxy_hotkey_tracking_invalidations_total", nil) < 300 {
		t.Fatal("fewer invalidation pushes than direct writes")
	}
}

// Losing the tracking connection empties the tier and stops it until the
// connection is back.
func TestTierStopsWithoutTracking(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	c := dialClient(t, p.Addr)
	rs.Do(t, "SET", "c:k", "v")
	cached(t, p, c, "c:k")
	stops := counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil)
	rs.Do(t, "CLIENT", "KILL", "ID", trackingClientID(t, rs))
	waitFor(t, "tier stop", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil) > stops
	})
	if st, _ := p.Server.TierStats(); st.Entries != 0 {
		t.Fatalf("tier holds %d entries after losing tracking", st.Entries)
	}
	waitServing(t, p)
	cached(t, p, c, "c:k")
}

// The tracking connection's lag probe (a PING every quarter of max_lag)
// runs only while the tier holds or fills something: an idle rproxy's
// PINGs would be Redis's to count and log (INFO commandstats, SLOWLOG) on
// every master from every node, caching or not.
func TestTierProbesOnlyWhileHolding(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll, func(c *proxy.Config) { c.HotKey.MaxLag = 20 * time.Millisecond })
	waitServing(t, p)
	probes := func() uint64 {
		return histogramCount(t, p, "rproxy_hotkey_tracking_probe_seconds", nil)
	}
	pings := func() int {
		m := regexp.MustCompile(`cmdstat_ping:calls=(\d+)`).FindStringSubmatch(string(rs.Do(t, "INFO", "commandstats")))
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// There is no event to wait for when nothing happens: a window is 40
	// probe intervals (5ms each), and one probe may be under way. On a
	// loaded machine a probe may come back later than max_lag and stop the
	// tier, which is then probed until it serves again; so one quiet window
	// out of a few passes (before the loop waited, each had about 40).
	idleWindow := func(when string) {
		t.Helper()
		var n uint64
		var r int
		for try := 0; try < 5; try++ {
			p0, r0 := probes(), pings()
			time.Sleep(200 * time.Millisecond)
			n, r = probes()-p0, pings()-r0
			if n <= 1 && r <= 1 {
				return
			}
		}
		t.Errorf("%s: %d lag probes and %d Redis PINGs in the last of 5 windows of 200ms with max_lag 20ms, want none", when, n, r)
	}
	idleWindow("empty tier")

	rs.Do(t, "SET", "c:k", "v")
	c := dialClient(t, p.Addr)
	cached(t, p, c, "c:k")
	p0 := probes()
	waitFor(t, "lag probes while the tier holds a key", func() bool {
		if st, _ := p.Server.TierStats(); st.Entries == 0 {
			c.do("GET", "c:k") // a late probe emptied it: fill it again
		}
		return probes() >= p0+5
	})

	// A write through rproxy invalidates the key: the tier is empty again.
	c.do("SET", "c:k", "w")
	waitFor(t, "the tier emptied", func() bool {
		st, _ := p.Server.TierStats()
		return st.Entries == 0
	})
	idleWindow("emptied tier")
	if r := cached(t, p, c, "c:k"); r != "$1\r\nw\r\n" {
		t.Fatalf("GET after the probe loop waited = %q", r)
	}
}

// A cached entry never outlives the key's TTL on Redis.
func TestTierHonoursKeyTTL(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	c := dialClient(t, p.Addr)
	rs.Do(t, "SET", "c:t", "v", "PX", "300")
	cached(t, p, c, "c:t")
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline.Add(-20 * time.Millisecond)) {
		c.do("GET", "c:t")
	}
	time.Sleep(time.Until(deadline) + 5*time.Millisecond)
	if r := c.do("GET", "c:t"); r != "$-1\r\n" {
		t.Fatalf("GET after the key's TTL = %q", r)
	}
}

// Detected hot keys enter the tier without any prefix configured.
func TestTierAdmitsDetectedHotKey(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.HotKey = proxytest.HotKeyConfig()
		c.HotKey.Detector.Threshold = 100
	})
	waitServing(t, p)
	rs.Do(t, "SET", "hot", "v")
	c := dialClient(t, p.Addr)
	for i := 0; i < 300; i++ {
		c.do("GET", "hot")
	}
	cached(t, p, c, "hot")
	hot := p.Server.HotKeys()
	if len(hot) == 0 || hot[0].Key != "hot" {
		t.Fatalf("hot keys = %+v", hot)
	}
	// A key read a few times is not cached.
	c.do("GET", "cold")
	if st, _ := p.Server.TierStats(); st.Entries != 1 {
		t.Fatalf("tier entries = %d, want only the hot key", st.Entries)
	}
}

func trackingClientID(t *testing.T, rs *redistest.Server) string {
	t.Helper()
	for _, line := range strings.Split(string(rs.Do(t, "CLIENT", "LIST")), "\n") {
		if !strings.Contains(line, "flags=t") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "id=") {
				return f[3:]
			}
		}
	}
	t.Fatal("no tracking connection in CLIENT LIST")
	return ""
}

// slowConn delivers what it reads in small pieces, each after a pause: on
// the tracking connection, a fill's reply and the invalidation Redis sends
// right after it arrive far apart, which opens the windows that the
// post-acknowledgement invalidation and the barrier must close.
type slowConn struct {
	net.Conn
	pause time.Duration
	piece int
}

func (c *slowConn) Read(p []byte) (int, error) {
	time.Sleep(c.pause)
	if len(p) > c.piece {
		p = p[:c.piece]
	}
	return c.Conn.Read(p)
}

func slowTracking(c *proxy.Config) {
	cacheAll(c)
	c.HotKey.TrackingDial = slowDial(3*time.Millisecond, 4)
}

// slowDial dials connections whose every read waits pause and takes at
// most piece bytes: a tracking connection whose invalidations come late.
func slowDial(pause time.Duration, piece int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &slowConn{Conn: nc, pause: pause, piece: piece}, nil
	}
}

// A write whose keys rproxy cannot see (a script, EXEC) is acknowledged
// only after the tracking connection has caught up: with invalidations
// arriving ~30ms late, the writer's next GET still reads its write.
func TestTierBarrierForUndeclaredWrites(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, slowTracking)
	waitServing(t, p)
	w := dialClient(t, p.Addr)
	r := dialClient(t, p.Addr)
	for round := 0; round < 5; round++ {
		val := "v" + strconv.Itoa(round)
		want := fmt.Sprintf("$%d\r\n%s\r\n", len(val), val)

		rs.Do(t, "SET", "c:s", "old")
		cached(t, p, r, "c:s")
		w.do("EVAL", "redis.call('SET', 'c:s', ARGV[1])", "0", val)
		if got := w.do("GET", "c:s"); got != want {
			t.Fatalf("round %d: GET after EVAL = %q, want %q", round, got, want)
		}

		rs.Do(t, "SET", "c:s", "old")
		cached(t, p, r, "c:s")
		w.do("MULTI")
		w.do("SET", "c:s", val+"m")
		cached(t, p, r, "c:s") // the old value is cached again before EXEC
		w.do("EXEC")
		if got, want := w.do("GET", "c:s"), fmt.Sprintf("$%d\r\n%sm\r\n", len(val)+1, val); got != want {
			t.Fatalf("round %d: GET after EXEC = %q, want %q", round, got, want)
		}
	}
	if counterValue(t, p.Registry, "rproxy_hotkey_tracking_barriers_total", nil) < 10 {
		t.Fatal("writes with undeclared keys did not wait for the barrier")
	}
}

// A fill that read the old value just before a proxied write reached Redis,
// but whose reply arrives after the write was acknowledged, is not stored:
// the write invalidates again on acknowledgement. Staged by slowing the
// shared connections' writes (the SET sits 5ms between its first
// invalidation and Redis) and the tracking connection's reads (the fill's
// reply, then the invalidation, trickle in).
func TestTierSecondInvalidation(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, slowTracking, func(c *proxy.Config) {
		c.Upstream.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowWriter{Conn: nc, pause: 5 * time.Millisecond}, nil
		}
	})
	waitServing(t, p)
	w := dialClient(t, p.Addr)
	r := dialClient(t, p.Addr)
	for round := 0; round < 20; round++ {
		// A key per round: one key written 40 times would be refused the
		// tier (hotkeys.write_limit) and each fill would wait out the window.
		k, val := "c:s"+strconv.Itoa(round), "v"+strconv.Itoa(round)
		rs.Do(t, "SET", k, "old")
		cached(t, p, r, k)
		w.send(resp.AppendCommandString(nil, "SET", k, val))
		time.Sleep(time.Millisecond)
		r.do("GET", k) // misses (invalidated) and starts a fill that reads "old"
		w.read()
		time.Sleep(15 * time.Millisecond) // the fill's reply is in, the invalidation is not
		if got, want := w.do("GET", k), fmt.Sprintf("$%d\r\n%s\r\n", len(val), val); got != want {
			t.Fatalf("round %d: writer read %q after its SET was acknowledged, want %q", round, got, want)
		}
	}
	if counterValue(t, p.Registry, "rproxy_hotkey_tier_fills_refused_total", nil) == 0 {
		t.Fatal("no fill raced a write: the test did not stage the race")
	}
}

type slowWriter struct {
	net.Conn
	pause time.Duration
}

func (c *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(c.pause)
	return c.Conn.Write(p)
}

// A write from a client in stream mode (RESP3 subscriber) drops the key from
// the tier before it is sent.
func TestTierStreamModeWriteInvalidates(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	r := dialClient(t, p.Addr)
	rs.Do(t, "SET", "c:s", "old")
	cached(t, p, r, "c:s")
	s := dialClient(t, p.Addr)
	s.do("HELLO", "3")
	s.do("SUBSCRIBE", "ch")
	if got := s.do("SET", "c:s", "new"); got != "+OK\r\n" {
		t.Fatalf("SET in stream mode = %q", got)
	}
	if got := r.do("GET", "c:s"); got != "$3\r\nnew\r\n" {
		t.Fatalf("GET after a stream-mode SET = %q", got)
	}
}

// TestTierSwapdbInsideMulti: a SWAPDB queued in a transaction runs at
// EXEC, maybe batches later, and client tracking sends no invalidation
// for it: the tier is emptied again at EXEC. Before, it was emptied only
// when the SWAPDB was queued, refilled by reads before the EXEC, and then
// served values from before the swap (up to hotkeys.ttl_cap).
func TestTierSwapdbInsideMulti(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	a, b := dialClient(t, p.Addr), dialClient(t, p.Addr)
	a.do("SET", "c:swapped", "before")
	a.do("MULTI")
	if r := a.do("SWAPDB", "0", "1"); r != "+QUEUED\r\n" {
		t.Fatalf("SWAPDB in MULTI: %q", r)
	}
	cached(t, p, b, "c:swapped")
	if r := a.do("EXEC"); r != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC: %q", r)
	}
	if r, want := b.do("GET", "c:swapped"), string(rs.Do(t, "GET", "c:swapped")); r != want {
		t.Errorf("GET after the swap: %q, want Redis's %q", r, want)
	}
}

// TestTierNotInsideSharedTransaction: a transaction sent whole goes on the
// shared connections, where the tier and shared flights serve reads; a GET
// of a cached key inside it is still queued by Redis and answered at EXEC
// (the tier's answer in its place would show the value where +QUEUED
// belongs), and a write in it leaves no stale copy behind.
func TestTierNotInsideSharedTransaction(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	waitServing(t, p)
	rs.Do(t, "SET", "c:t", "old")
	c := dialClient(t, p.Addr)
	cached(t, p, c, "c:t")
	got := sendAll(c, []string{"MULTI"}, []string{"GET", "c:t"}, []string{"SET", "c:t", "new"}, []string{"GET", "c:t"}, []string{"EXEC"})
	want := []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*3\r\n$3\r\nold\r\n+OK\r\n$3\r\nnew\r\n"}
	if !slices.Equal(got, want) {
		t.Fatalf("MULTI GET SET GET EXEC of a cached key = %q, want %q", got, want)
	}
	if r := dialClient(t, p.Addr).do("GET", "c:t"); r != "$3\r\nnew\r\n" {
		t.Fatalf("GET after the transaction = %q", r)
	}
}
