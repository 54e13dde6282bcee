package proxy_test

import (
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// Known traffic gives known counts: calls by command name, outcomes, and
// sampled batch latencies.
func TestMetricsCountKnownTraffic(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	for i := 0; i < 3; i++ {
		c.do("GET", "m:k")
	}
	c.do("SET", "m:k", "v")
	c.do("set", "m:k", "w")
	c.do("KEYS", "*")          // refused by the default policy
	c.do("NOSUCHCOMMAND", "x") // forwarded; Redis answers it
	c.do("HELLO", "3")         // answered per session
	for i := 0; i < 8; i++ {
		c.do("PING")
	}
	want := map[string]float64{"get": 3, "set": 2, "keys": 1, "unknown": 1, "hello": 1, "ping": 8}
	for name, n := range want {
		if got := counterValue(t, p.Registry, "rproxy_proxy_command_calls_total", map[string]string{"command": name}); got != n {
			t.Errorf("command_calls_total{command=%q} = %v, want %v", name, got, n)
		}
	}
	for outcome, n := range map[string]float64{"forwarded": 14, "local": 1, "refused": 1} {
		if got := counterValue(t, p.Registry, "rproxy_proxy_commands_total", map[string]string{"outcome": outcome}); got != n {
			t.Errorf("commands_total{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
	mfs, err := p.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed uint64
	for _, mf := range mfs {
		if mf.GetName() == "rproxy_proxy_batch_duration_seconds" {
			for _, m := range mf.GetMetric() {
				if labelsMatch(m, map[string]string{"stage": "client"}) {
					timed = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	// 16 batches, one at a time: every one is timed, unless more than 8
	// fall in one millisecond (then 8 of those are).
	if timed < 8 || timed > 16 {
		t.Errorf("client batch latency samples = %d, want 8 to 16", timed)
	}
}

// In stream mode too, a command is counted once, by what happened to it: a
// refusal (sent as a command Redis rejects) and a reply rproxy makes
// (sent as a script) are not counted as forwarded.
func TestMetricsCountStreamModeOutcomes(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")             // local
	c.do("SUBSCRIBE", "ch")        // forwarded: stream mode from here
	c.do("KEYS", "*")              // refused
	c.do("CLIENT", "ID")           // local, answered by a script
	c.do("CLIENT", "LIST", "TYPE") // local: Redis's syntax error, by a script
	c.do("PING")                   // forwarded
	c.do("GET", "k")               // forwarded
	for outcome, n := range map[string]float64{"forwarded": 3, "local": 3, "refused": 1} {
		if got := counterValue(t, p.Registry, "rproxy_proxy_commands_total", map[string]string{"outcome": outcome}); got != n {
			t.Errorf("commands_total{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
}
