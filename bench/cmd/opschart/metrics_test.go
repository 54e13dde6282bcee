package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP rproxy_proxy_commands_total Client commands by outcome.
# TYPE rproxy_proxy_commands_total counter
rproxy_proxy_commands_total{outcome="forwarded"} 502
rproxy_proxy_commands_total{outcome="local"} 2500
rproxy_proxy_commands_total{outcome="refused"} 3
rproxy_policy_decisions_total{action="allow",rule="allow-client-kill-id"} 1
rproxy_policy_decisions_total{action="deny",rule="deny-keys"} 2
rproxy_policy_decisions_total{action="deny",rule="deny \"odd\", rule"} 1
rproxy_hotkey_tier_hits_total 2500
rproxy_hotkey_tier_misses_total 500
rproxy_hotkey_tier_fills_total 2
rproxy_hotkey_tier_serving 1
rproxy_hotkey_tier_entries 1
rproxy_hotkey_tier_stops_total 0
rproxy_hotkey_hot_keys 1
rproxy_coalesce_joins_total 7 1700000000000
rproxy_proxy_batch_duration_seconds_bucket{stage="client",le="+Inf"} 375
rproxy_upstream_commands_total{protocol="2"} 503
rproxy_upstream_commands_total{protocol="3"} 8

`

func TestParseMetrics(t *testing.T) {
	ss, err := parseMetrics(exposition)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 17 {
		t.Errorf("%d series, want 17", len(ss))
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"rproxy_upstream_commands_total", nil, 511},
		{"rproxy_policy_decisions_total", []string{"action", "deny"}, 3},
		{"rproxy_policy_decisions_total", []string{"rule", `deny "odd", rule`}, 1},
		{"rproxy_proxy_batch_duration_seconds_bucket", []string{"le", "+Inf"}, 375},
		{"rproxy_coalesce_joins_total", nil, 7}, // the timestamp is not the value
	} {
		if got, ok := sum(ss, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("sum(%s%v) = %v, %v; want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := sum(ss, "rproxy_proxy_commands_total", "outcome", "lost"); ok {
		t.Error("a label value that no series has matched")
	}

	s, err := newSample(1.5, ss, 42)
	if err != nil {
		t.Fatal(err)
	}
	want := sample{at: 1.5, clientCmds: 3002, denied: 3, refused: 3, tierHits: 2500, serving: 1, entries: 1, hotKeys: 1, joins: 7, misses: 500, fills: 2, upstream: 511, redisGets: 42}
	if s != want {
		t.Errorf("newSample = %+v\nwant %+v", s, want)
	}
	// A renamed metric is an error, not a zero.
	ss, _ = parseMetrics(strings.Replace(exposition, "rproxy_hotkey_tier_hits_total", "rproxy_hotkey_hits_total", 1))
	if _, err := newSample(0, ss, 0); err == nil || !strings.Contains(err.Error(), "rproxy_hotkey_tier_hits_total") {
		t.Errorf("missing metric: err = %v", err)
	}

	for _, bad := range []string{"novalue", `x{a="b} 1`, `x{a} 1`, "x abc"} {
		if _, err := parseMetrics(bad); err == nil {
			t.Errorf("parseMetrics(%q) accepted it", bad)
		}
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_getex:calls=9,usec=1\r\ncmdstat_get:calls=1234,usec=567,usec_per_call=0.46,rejected_calls=0,failed_calls=0\r\n"
	if n, err := parseCommandStats(info, "get"); err != nil || n != 1234 {
		t.Errorf("get: %v, %v", n, err)
	}
	if n, err := parseCommandStats(info, "set"); err != nil || n != 0 {
		t.Errorf("set (never run): %v, %v", n, err)
	}
	if _, err := parseCommandStats("cmdstat_get:calls=x\r\n", "get"); err == nil {
		t.Error("bad calls= accepted")
	}
}

func TestRatesAndPhaseMedian(t *testing.T) {
	ss := []sample{{at: 0, tierHits: 0}, {at: 0.5, tierHits: 50}, {at: 1, tierHits: 150}, {at: 1.5, tierHits: 100}, {at: 2, tierHits: 400}}
	rs := rates(ss, func(s sample) float64 { return s.tierHits })
	if len(rs) != 4 || rs[0].v != 100 || rs[1].v != 200 || !math.IsNaN(rs[2].v) || rs[3].v != 600 {
		t.Fatalf("rates = %+v", rs)
	}
	if got := phaseMedian(rs, 0, 1); got != 150 {
		t.Errorf("median over 0-1 = %v, want 150", got)
	}
	if got := phaseMedian(rs, 0, 2); got != 200 { // NaN (a reset) is left out
		t.Errorf("median over 0-2 = %v, want 200", got)
	}
	if got := phaseMedian(rs, 0.2, 0.4); !math.IsNaN(got) {
		t.Errorf("median over no interval = %v", got)
	}
}

func TestTrackingClient(t *testing.T) {
	list := "id=3 addr=127.0.0.1:1 flags=N cmd=get resp=2\nid=5 addr=127.0.0.1:2 flags=t cmd=ping redir=0 resp=3\nid=7 addr=127.0.0.1:3 flags=N cmd=client|list\n"
	line, id, err := trackingClient(list)
	if err != nil || id != "5" || !strings.HasPrefix(line, "id=5 ") {
		t.Errorf("got %q, %q, %v", line, id, err)
	}
	if _, _, err := trackingClient("id=3 flags=N\n"); err == nil {
		t.Error("no tracking client: no error")
	}
	if _, _, err := trackingClient("id=3 flags=t\nid=4 flags=t\n"); err == nil {
		t.Error("two tracking clients: no error")
	}
}

func TestParseTierLog(t *testing.T) {
	start := time.Unix(1000, 0)
	log := `plain text line
{"level":"info","ts":999.5,"msg":"local tier serving"}
{"level":"warn","ts":1025.003,"logger":"proxy.hotkey","msg":"local tier emptied and stopped","tracking_up":false,"within_lag":true}
{"level":"warn","ts":1025.0031,"msg":"upstream connection lost"}
{"level":"info","ts":1025.055,"msg":"local tier serving"}
{"level":"warn","ts":1040,"msg":"local tier emptied and stopped","tracking_up":true,"within_lag":false}
`
	got, err := parseTierLog(log, start, 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 ||
		math.Abs(got[0].from-25.003) > 1e-6 || math.Abs(got[0].to-25.055) > 1e-6 || got[0].why != "tracking_up=false within_lag=true" ||
		got[1].from != 40 || got[1].to != 60 || got[1].why != "tracking_up=true within_lag=false" {
		t.Errorf("outages = %+v", got)
	}
	if _, err := parseTierLog("{not json\n", start, 60); err == nil {
		t.Error("broken JSON line accepted")
	}
}

func TestParseProcStat(t *testing.T) {
	busy, steal, err := parseProcStat("cpu  739887 10 549655 1286851 6136 3 158909 2332 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil || busy != 739887+10+549655+3+158909 || steal != 2332 {
		t.Errorf("got %d, %d, %v", busy, steal, err)
	}
	if _, _, err := parseProcStat("intr 1 2 3\n"); err == nil {
		t.Error("a file without a cpu line accepted")
	}
}
