package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/upstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TestMonitorHidesOwnConnectionCommands: MONITOR through rproxy showed the
// commands rproxy sends on its own connections: the RESET (with the
// handshake again, and after pub/sub an ECHO marker) that returns a lent
// connection to its pool, and a new connection's handshake (HELLO 3, AUTH)
// and, in mode sentinel, the ROLE that confirms the master at every dial.
// Redis's unit/introspection "MONITOR correctly handles multi-exec cases"
// read the ROLE of a spare connection's dial between MULTI and SET in mode
// sentinel. The same scenario, a subscriber leaving and a transaction,
// against Redis directly and through rproxy must show the same lines.
func TestMonitorHidesOwnConnectionCommands(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		rs := redistest.Start(t)
		p := proxytest.Start(t, rs.Addr)
		compareMonitorLines(t, rs.Addr, p, monitorScenario{})
	})
	t.Run("resp3 and upstream password", func(t *testing.T) {
		rs := redistest.Start(t)
		rs.Do(t, "CONFIG", "SET", "requirepass", "pw") // after start: redistest's readiness PING has no password
		p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.Password = "pw" })
		compareMonitorLines(t, rs.Addr, p, monitorScenario{resp3: true, password: "pw"})
	})
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinelReplicas(t, "mon", 0)
		sen, err := upstream.NewSentinel(upstream.SentinelConfig{MasterName: g.Name, Addresses: g.Addrs()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sen.Close)
		// Info: a connection the pool closes or fails to dial is logged.
		log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
		p := proxytest.StartLogged(t, log, "sentinel/mon", func(c *proxy.Config) { c.Upstream.Sentinel = sen })
		compareMonitorLines(t, g.Master.Addr, p, monitorScenario{sentinel: true})
	})
}

type monitorScenario struct {
	resp3    bool   // the subscriber speaks RESP3 (HELLO 3 before MONITOR)
	password string // clients AUTH with it directly (rproxy authenticates upstream itself)
	sentinel bool   // leave out the Sentinels' own PINGs, INFOs and hellos
}

// compareMonitorLines runs the scenario against Redis at direct and through
// p, and fails unless MONITOR showed the same commands.
func compareMonitorLines(t *testing.T, direct string, p *proxytest.Proxy, sc monitorScenario) {
	t.Helper()
	want := sc.run(t, direct, false, func() {})
	proto := "2"
	if sc.resp3 {
		proto = "3"
	}
	got := sc.run(t, p.Addr, true, func() { waitPoolSettled(t, p, proto) })
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("MONITOR through rproxy:\n%s\nMONITOR of Redis directly:\n%s", strings.Join(got, ""), strings.Join(want, ""))
	}
}

// run returns the commands (each MONITOR line less its time and client)
// that MONITOR on addr shows while the scenario runs.
func (sc monitorScenario) run(t *testing.T, addr string, viaProxy bool, settle func()) []string {
	t.Helper()
	login := func(c *rawClient) {
		if sc.password != "" && !viaProxy {
			if r := c.do("AUTH", sc.password); r != "+OK\r\n" {
				t.Fatalf("AUTH: %q", r)
			}
		}
	}
	m, a, b := dialClient(t, addr), dialClient(t, addr), dialClient(t, addr)
	for _, c := range []*rawClient{m, a, b} {
		login(c)
	}
	if sc.resp3 {
		if r := b.do("HELLO", "3"); !strings.HasPrefix(r, "%") {
			t.Fatalf("HELLO 3: %q", r)
		}
	}
	if r := m.do("MONITOR"); r != "+OK\r\n" {
		t.Fatalf("MONITOR: %q", r)
	}
	a.do("SET", "k", "v")
	b.do("SUBSCRIBE", "ch")
	a.do("PUBLISH", "ch", "x")
	b.read() // the message
	b.do("UNSUBSCRIBE", "ch")
	settle() // the subscriber's connection returned, the spares idle
	b.do("WATCH", "k")
	b.do("MULTI")
	b.do("SET", "k", "2")
	if r := b.do("EXEC"); !strings.Contains(r, "OK") {
		t.Fatalf("EXEC: %q", r)
	}
	settle() // the transaction's connection returned, the spares idle
	a.do("SET", "end", "1")
	var lines []string
	for {
		l := string(m.read())
		_, cmd, ok := strings.Cut(l, "] ")
		if !ok {
			t.Fatalf("not a MONITOR line: %q", l)
		}
		if sc.sentinel && (cmd == "\"PING\"\r\n" || strings.HasPrefix(cmd, `"INFO"`) || strings.Contains(cmd, `"__sentinel__:hello"`)) {
			continue
		}
		lines = append(lines, cmd)
		if cmd == `"SET" "end" "1"`+"\r\n" {
			return lines
		}
		if len(lines) > 40 {
			t.Fatalf("no SET end in MONITOR lines: %q", lines)
		}
	}
}

// waitPoolSettled waits until the subscriber's protocol's pool lends none
// but MONITOR's (RESP2) and holds at least the two idle dedicated
// connections it keeps as spares, dialled in the background. Whether the
// connection the subscriber or the transaction returned makes it three
// depends on the order of two goroutines: a spare's dial that ends after
// the return finds two idle and stops (keepSpare), and then the pool holds
// two. A reset still under way once two are idle sends only rproxy's own
// commands, which the MONITOR view must hide anyway: the comparison checks
// that.
func waitPoolSettled(t *testing.T, p *proxytest.Proxy, proto string) {
	t.Helper()
	want := 0.0
	if proto == "2" {
		want = 1 // MONITOR's own
	}
	labels := map[string]string{"protocol": proto}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pinned := counterValue(t, p.Registry, "rproxy_upstream_pinned_connections", labels)
		idle := counterValue(t, p.Registry, "rproxy_upstream_idle_dedicated_connections", labels)
		if pinned == want && idle >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RESP%s: %v lent (want %v) and %v idle dedicated connections (want 2 or more) after 5s", proto, pinned, want, idle)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
