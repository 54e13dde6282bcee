package proxy_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// histogramCount is the sample count of the histogram series of name
// whose labels match.
func histogramCount(t *testing.T, p *proxytest.Proxy, name string, labels map[string]string) uint64 {
	t.Helper()
	var n uint64
	for _, mf := range lintGather(t, p.Registry) {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, labels) {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// Short connections count: 20 one-command redis-cli runs move the client
// batch latency count by 20 (a per-connection 1-in-8 sample timed none of
// them), the per-family histogram counts them as reads, and INFO shows
// their percentiles.
func TestLatencyCountsShortConnections(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	host, port, _ := strings.Cut(p.Addr, ":")
	client := map[string]string{"stage": "client"}
	read := map[string]string{"family": "read"}
	before := histogramCount(t, p, "rproxy_proxy_batch_duration_seconds", client)
	beforeRead := histogramCount(t, p, "rproxy_proxy_command_duration_seconds", read)
	for range 20 {
		out, err := exec.Command("redis-cli", "-h", host, "-p", port, "GET", "lat:k").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli: %v %s", err, out)
		}
	}
	if got := histogramCount(t, p, "rproxy_proxy_batch_duration_seconds", client) - before; got < 20 {
		t.Errorf("20 one-command connections moved batch_duration_seconds_count{stage=client} by %d, want >= 20", got)
	}
	if got := histogramCount(t, p, "rproxy_proxy_command_duration_seconds", read) - beforeRead; got < 20 {
		t.Errorf("20 GETs moved command_duration_seconds_count{family=read} by %d, want >= 20", got)
	}
	info := dialClient(t, p.Addr).do("INFO", "proxy")
	for _, want := range []string{"\r\nbatch_latency_usec:p50=", "\r\nlatency_percentiles_usec_read:p50="} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO proxy lacks %q:\n%s", want, info)
		}
	}
}
