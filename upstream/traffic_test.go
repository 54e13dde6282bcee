package upstream

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTraffic: each counter is summed over its protocols' series, the
// diverts over the backlog series only, and a series that was never made
// counts nothing.
func TestTraffic(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	if got, err := m.Traffic(); err != nil || got != (Traffic{}) {
		t.Fatalf("Traffic before any pool = %+v, %v; want zeros", got, err)
	}
	p2, p3 := m.forProtocol(2), m.forProtocol(3)
	p2.diverted.backlog.Add(3)
	p3.diverted.backlog.Add(4)
	p2.diverted.stall.Add(100)
	p2.observeWrite(10, 1000)
	p3.observeWrite(5, 500)
	p3.bytesIn.Add(2000)
	want := Traffic{BacklogDiverts: 7, Commands: 15, WrittenBytes: 1500, ReadBytes: 2000}
	if got, err := m.Traffic(); err != nil || got != want {
		t.Fatalf("Traffic = %+v, %v; want %+v", got, err, want)
	}
	// The registry's view agrees: the governor reads what /metrics shows.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if f.GetName() == "rproxy_upstream_diverted_batches_total" && !hasReason(s.GetLabel(), "backlog") {
				continue
			}
			sums[f.GetName()] += s.GetCounter().GetValue()
		}
	}
	fromRegistry := Traffic{BacklogDiverts: sums["rproxy_upstream_diverted_batches_total"], Commands: sums["rproxy_upstream_commands_total"],
		WrittenBytes: sums["rproxy_upstream_written_bytes_total"], ReadBytes: sums["rproxy_upstream_read_bytes_total"]}
	if fromRegistry != want {
		t.Fatalf("the registry's counters sum to %+v, Traffic to %+v", fromRegistry, want)
	}
}

// BenchmarkTraffic is the governor's read, four times a second.
func BenchmarkTraffic(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	m.forProtocol(2).observeWrite(1, 10)
	m.forProtocol(3).observeWrite(1, 10)
	for b.Loop() {
		if _, err := m.Traffic(); err != nil {
			b.Fatal(err)
		}
	}
}
