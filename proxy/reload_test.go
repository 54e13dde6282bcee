package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

func hotKeyNames(p *proxytest.Proxy) []string {
	var names []string
	for _, h := range p.Server.HotKeys() {
		names = append(names, h.Key)
	}
	return names
}

// SetHotKeys changes detection and the tier while a client stays
// connected: the threshold at once, prefixes, the tier off (emptied, not
// counted as a lag stop) and on again, and a lower budget evicts at once.
// An invalid config changes nothing.
func TestSetHotKeysAtRunTime(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr) // threshold 500/s, no prefixes
	waitServing(t, p)
	rs.Do(t, "SET", "h", "v")
	c := dialClient(t, p.Addr)
	for range 50 {
		c.do("GET", "h")
	}
	if names := hotKeyNames(p); len(names) != 0 {
		t.Fatalf("hot at 500/s after 50 reads: %v", names)
	}
	cfg, _ := p.Server.HotKeyConfig()

	// The threshold lowered: the reads already counted make h hot.
	cfg.Detector.Threshold = 5
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	c.do("GET", "h")
	if names := hotKeyNames(p); len(names) != 1 || names[0] != "h" {
		t.Fatalf("hot keys after threshold 5: %v", names)
	}
	cached(t, p, c, "h")

	// Prefixes: c: keys are cached without being hot.
	cfg.Detector.Threshold = 1e6
	cfg.Prefixes = []string{"c:"}
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	rs.Do(t, "SET", "c:1", "one")
	if r := cached(t, p, c, "c:1"); r != "$3\r\none\r\n" {
		t.Fatalf("GET c:1 = %q", r)
	}

	// The tier off: emptied at once, reads go to Redis, no lag stop.
	stops := counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil)
	cfg.Tier = false
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	if st, _ := p.Server.TierStats(); st.Entries != 0 {
		t.Fatalf("tier holds %d entries after turning it off", st.Entries)
	}
	if v := counterValue(t, p.Registry, "rproxy_hotkey_tier_serving", nil); v != 0 {
		t.Fatalf("tier_serving = %v with the tier off", v)
	}
	hits := counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil)
	for range 20 {
		if r := c.do("GET", "c:1"); r != "$3\r\none\r\n" {
			t.Fatalf("GET c:1 with the tier off = %q", r)
		}
	}
	time.Sleep(50 * time.Millisecond) // a fill, if one were wrongly queued, lands
	c.do("GET", "c:1")
	if st, _ := p.Server.TierStats(); st.Entries != 0 || counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil) != hits {
		t.Fatalf("the tier filled or served while off: %+v", st)
	}
	if v := counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil); v != stops {
		t.Fatalf("turning the tier off counted as a lag stop (%v -> %v)", stops, v)
	}

	// On again: it serves and fills.
	cfg.Tier = true
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	waitServing(t, p)
	rs.Do(t, "SET", "c:2", strings.Repeat("x", 2000))
	cached(t, p, c, "c:1")
	cached(t, p, c, "c:2")

	// A budget below what is held evicts down to it at once.
	st, _ := p.Server.TierStats()
	if st.Entries != 2 {
		t.Fatalf("tier entries %d, want 2", st.Entries)
	}
	cfg.TierConfig.MaxBytes = st.Bytes - 1
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	if st2, _ := p.Server.TierStats(); st2.Entries != 1 || st2.Bytes > cfg.TierConfig.MaxBytes {
		t.Fatalf("after max_bytes %d: %+v", cfg.TierConfig.MaxBytes, st2)
	}

	// Invalid: refused, nothing changes.
	bad := cfg
	bad.Detector.Threshold = 0
	bad.Prefixes = []string{"other:"}
	if err := p.Server.SetHotKeys(bad); err == nil {
		t.Fatal("threshold 0 accepted")
	}
	if got, _ := p.Server.HotKeyConfig(); got.Detector.Threshold != cfg.Detector.Threshold || got.Prefixes[0] != "c:" {
		t.Fatalf("a refused config changed the settings: %+v", got)
	}
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("client after the changes: %q", r)
	}
}

// A tier that was off at start cannot be turned on (there is no tracking
// connection): the error says a restart is needed and detection settings
// given with it are not applied.
func TestSetHotKeysTierOnNeedsRestart(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.HotKey.Tier = false })
	cfg, _ := p.Server.HotKeyConfig()
	cfg.Tier = true
	cfg.Detector.Threshold = 7
	err := p.Server.SetHotKeys(cfg)
	if err == nil || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("turning on a tier that was off at start: %v", err)
	}
	if got, _ := p.Server.HotKeyConfig(); got.Tier || got.Detector.Threshold == 7 {
		t.Fatalf("a refused config changed the settings: %+v", got)
	}
	if _, ok := p.Server.TierStats(); ok {
		t.Fatal("a tier appeared")
	}
	// Detection settings alone apply.
	cfg.Tier = false
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Server.HotKeyConfig(); got.Detector.Threshold != 7 {
		t.Fatalf("threshold %v, want 7", got.Detector.Threshold)
	}
}

// A lowered max_lag applies to the running probe loop: with invalidations
// delayed ~50ms, max_lag 10ms stops the tier and 1s lets it serve again.
func TestSetHotKeysMaxLag(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		cacheAll(c)
		c.HotKey.TrackingDial = slowDial(50*time.Millisecond, 1<<16)
	})
	waitServing(t, p)
	stops := counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil)
	cfg, _ := p.Server.HotKeyConfig()
	cfg.MaxLag = 10 * time.Millisecond
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a lag stop with max_lag 10ms", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil) > stops
	})
	cfg.MaxLag = time.Second
	if err := p.Server.SetHotKeys(cfg); err != nil {
		t.Fatal(err)
	}
	waitServing(t, p)
}

// A new idle timeout applies to connected clients at once (one already
// idle longer is closed) and to new ones; raised or turned off, it spares
// a client that the old one would have closed.
func TestIdleTimeoutReload(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr) // idle_timeout 0
	lim := proxy.Limits{MaxClients: 100, MaxBulkLen: 1 << 20, MaxQueryBuffer: 1 << 20, ClientWriteTimeout: time.Minute}
	a := dialClient(t, p.Addr)
	a.do("PING")
	time.Sleep(300 * time.Millisecond)
	lim.IdleTimeout = 200 * time.Millisecond
	if err := p.Server.SetLimits(lim); err != nil {
		t.Fatal(err)
	}
	a.expectClosed() // idle 300ms already: closed now, not 200ms later
	waitFor(t, "the idle close counted", func() bool {
		v, _ := metricSum(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", map[string]string{"reason": "idle"})
		return v == 1
	})
	b := dialClient(t, p.Addr)
	b.do("PING")
	b.expectClosed()

	// Raised: a client idle for more than twice the old timeout stays.
	c := dialClient(t, p.Addr)
	c.do("PING")
	lim.IdleTimeout = time.Hour
	p.Server.SetLimits(lim)
	time.Sleep(500 * time.Millisecond)
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING after raising idle_timeout = %q", r)
	}
	// Off: the same.
	lim.IdleTimeout = 200 * time.Millisecond
	p.Server.SetLimits(lim)
	d := dialClient(t, p.Addr)
	d.do("PING")
	lim.IdleTimeout = 0
	p.Server.SetLimits(lim)
	time.Sleep(500 * time.Millisecond)
	if r := d.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING after turning idle_timeout off = %q", r)
	}
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING after turning idle_timeout off = %q", r)
	}
	lim.IdleTimeout = -time.Second
	if err := p.Server.SetLimits(lim); err == nil {
		t.Fatal("negative idle timeout accepted")
	}
}

// A client blocked in BLPOP or subscribed is not idle (as on Redis): the
// idle timeout neither aborts the blocking command nor closes the
// subscriber, whether set at start or by a reload.
func TestIdleTimeoutSparesBlockedAndSubscribed(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.IdleTimeout = 200 * time.Millisecond })
	c := dialClient(t, p.Addr)
	if r := c.do("BLPOP", "nolist", "0.6"); r != "*-1\r\n" {
		t.Fatalf("BLPOP 0.6s with idle_timeout 200ms = %q", r)
	}
	s := dialClient(t, p.Addr)
	s.do("SUBSCRIBE", "ch")
	lim := proxy.Limits{MaxClients: 100, MaxBulkLen: 1 << 20, MaxQueryBuffer: 1 << 20, ClientWriteTimeout: time.Minute,
		IdleTimeout: 100 * time.Millisecond}
	p.Server.SetLimits(lim)
	time.Sleep(500 * time.Millisecond)
	rs.Do(t, "PUBLISH", "ch", "m")
	if r := string(s.read()); r != "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n" {
		t.Fatalf("subscriber after 500ms with idle_timeout 100ms: %q", r)
	}
	// After the blocking command the client is idle again.
	c.expectClosed()
}
