package proxy_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// The error and close counters are exported at zero for every known label
// value right after start, before any event: a dashboard panel shows 0,
// not "No data", and increase() sees the first event.
func TestZeroSeriesAtStart(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	for _, reason := range []string{"max_clients", "input_limit", "idle", "write_timeout", "tls_handshake", "upstream_lost"} {
		labels := map[string]string{"reason": reason}
		if n := seriesCount(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", labels); n != 1 {
			t.Errorf("client_closed_by_proxy_total%v: %d series right after start, want 1", labels, n)
		} else if v := counterValue(t, p.Registry, "rproxy_proxy_client_closed_by_proxy_total", labels); v != 0 {
			t.Errorf("client_closed_by_proxy_total%v = %v, want 0", labels, v)
		}
	}
	for _, proto := range []string{"2", "3"} {
		for _, kind := range []string{"dial", "read", "write", "timeout"} {
			labels := map[string]string{"protocol": proto, "kind": kind}
			if n := seriesCount(t, p.Registry, "rproxy_upstream_errors_total", labels); n != 1 {
				t.Errorf("rproxy_upstream_errors_total%v: %d series right after start, want 1", labels, n)
			}
		}
	}
}

// seriesCount counts the series of name whose labels match.
func seriesCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) int {
	t.Helper()
	n := 0
	for _, mf := range lintGather(t, reg) {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, labels) {
				n++
			}
		}
	}
	return n
}
