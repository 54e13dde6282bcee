package upstream

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ErrorKinds are the values of errors_total's kind label.
var ErrorKinds = []string{"dial", "read", "write", "timeout"}

// Metrics are the upstream connections' Prometheus metrics, shared by the
// pools of every protocol (labelled by protocol).
type Metrics struct {
	connected     *prometheus.GaugeVec
	connects      *prometheus.CounterVec
	errors        *prometheus.CounterVec
	writes        *prometheus.CounterVec
	commands      *prometheus.CounterVec
	bytesOut      *prometheus.CounterVec
	bytesIn       *prometheus.CounterVec
	batchCommands *prometheus.HistogramVec
	pinned        *prometheus.GaugeVec
	idle          *prometheus.GaugeVec

	// Cluster mode (zero in standalone mode).
	redirects     *prometheus.CounterVec
	refreshes     *prometheus.CounterVec
	clusterNodes  prometheus.Gauge
	slotsAssigned prometheus.Gauge
	stalled       *prometheus.GaugeVec
	diverted      *prometheus.CounterVec
	draining      *prometheus.GaugeVec
	drains        *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "rproxy", "upstream"
	proto := []string{"protocol"}
	m := &Metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "connections", Help: "Shared upstream connections currently up."}, proto),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "connects_total", Help: "Successful upstream connects, including reconnects."}, proto),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "errors_total", Help: "Upstream connection failures by kind (dial, read, write, timeout)."}, []string{"protocol", "kind"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "writes_total", Help: "Write calls on upstream connections."}, proto),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "commands_total", Help: "Commands written to upstream connections."}, proto),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "written_bytes_total", Help: "Bytes written to upstream connections."}, proto),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "read_bytes_total", Help: "Bytes of replies read from upstream connections, pushes included (not the streams copied to subscribers, MONITOR clients and replicas)."}, proto),
		batchCommands: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "write_batch_commands", Help: "Commands per upstream write (how well pipelining batches).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}}, proto),
		pinned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "pinned_connections", Help: "Dedicated upstream connections currently lent to sessions holding state, or kept by a session for the keys Redis tracks on them."}, proto),
		idle: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "idle_dedicated_connections", Help: "Dedicated upstream connections ready to lend (reset after use, or dialled ahead) to the next session that comes to hold state."}, proto),
		redirects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cluster_redirects_total", Help: "Cluster replies rproxy followed instead of passing them on, by kind (moved, ask, tryagain, clusterdown)."}, []string{"kind"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cluster_slot_map_refreshes_total", Help: "Cluster slot map reads, by outcome (changed, unchanged, error)."}, []string{"outcome"}),
		clusterNodes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "cluster_masters", Help: "Masters in the current cluster slot map."}),
		slotsAssigned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "cluster_slots_assigned", Help: "Hash slots with a master in the current cluster slot map (16384 when the map is whole)."}),
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "stalled_connections", Help: "Upstream connections, shared or spare, whose oldest request has seen no reply for upstream.stall_divert (new batches go around them)."}, proto),
		diverted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "diverted_batches_total", Help: "Batches sent around a shared upstream connection, by reason (stall: its oldest request has seen no reply for upstream.stall_divert; backlog: it holds upstream.backlog_divert bytes of commands not yet answered)."}, []string{"protocol", "reason"}),
		draining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "draining_connections", Help: "Shared upstream connections whose requests timed out, kept open until Redis answers what was written on them; new requests wait for them, at most upstream.timeout."}, proto),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "drains_total", Help: "Drains of shared upstream connections whose requests timed out, by outcome (answered: Redis answered every command written, and the connection serves again; closed: it ended first, or was given up after ten upstream timeouts)."}, []string{"protocol", "outcome"}),
	}
	// Every kind and outcome exported from the start, at zero.
	for _, k := range []string{"moved", "ask", "tryagain", "clusterdown"} {
		m.redirects.WithLabelValues(k)
	}
	for _, o := range []string{"changed", "unchanged", "error"} {
		m.refreshes.WithLabelValues(o)
	}
	for _, p := range []string{"2", "3"} {
		for _, k := range ErrorKinds {
			m.errors.WithLabelValues(p, k)
		}
		for _, o := range []string{"answered", "closed"} {
			m.drains.WithLabelValues(p, o)
		}
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.connects, m.errors, m.writes, m.commands, m.bytesOut, m.bytesIn, m.batchCommands, m.pinned, m.idle,
			m.redirects, m.refreshes, m.clusterNodes, m.slotsAssigned, m.stalled, m.diverted, m.draining, m.drains)
	}
	return m
}

// poolMetrics are Metrics curried for one protocol, so the hot path does no
// label lookups.
type poolMetrics struct {
	connected     prometheus.Gauge
	connects      prometheus.Counter
	errors        *prometheus.CounterVec
	writes        prometheus.Counter
	commands      prometheus.Counter
	bytesOut      prometheus.Counter
	bytesIn       prometheus.Counter
	batchCommands prometheus.Observer
	pinned        prometheus.Gauge
	idle          prometheus.Gauge
	stalled       prometheus.Gauge
	diverted      divertedCounters
	draining      prometheus.Gauge
	drains        *prometheus.CounterVec
}

// divertedCounters are diverted_batches_total's series of one protocol.
type divertedCounters struct{ stall, backlog prometheus.Counter }

func (m *Metrics) forProtocol(protocol int) *poolMetrics {
	p := strconv.Itoa(protocol)
	return &poolMetrics{
		connected:     m.connected.WithLabelValues(p),
		connects:      m.connects.WithLabelValues(p),
		errors:        m.errors.MustCurryWith(prometheus.Labels{"protocol": p}),
		writes:        m.writes.WithLabelValues(p),
		commands:      m.commands.WithLabelValues(p),
		bytesOut:      m.bytesOut.WithLabelValues(p),
		bytesIn:       m.bytesIn.WithLabelValues(p),
		batchCommands: m.batchCommands.WithLabelValues(p),
		pinned:        m.pinned.WithLabelValues(p),
		idle:          m.idle.WithLabelValues(p),
		stalled:       m.stalled.WithLabelValues(p),
		diverted:      divertedCounters{stall: m.diverted.WithLabelValues(p, "stall"), backlog: m.diverted.WithLabelValues(p, "backlog")},
		draining:      m.draining.WithLabelValues(p),
		drains:        m.drains.MustCurryWith(prometheus.Labels{"protocol": p}),
	}
}

// Traffic is what the upstream connections carried since start, summed
// over protocols. The procs governor (cmd/rproxy) reads it four times a
// second, on the scheduler thread the requests run on: it reads these
// series alone, because gathering the registry (the Go and process
// collectors included) held that thread about 90 times longer
// (bench/results/2026-12-02/governor-read.md).
type Traffic struct {
	BacklogDiverts float64 // batches sent around a shared connection's backlog (diverted_batches_total, reason backlog)
	Commands       float64 // commands written (commands_total)
	WrittenBytes   float64 // written_bytes_total
	ReadBytes      float64 // read_bytes_total
}

// Traffic reads the counters of Traffic.
func (m *Metrics) Traffic() (Traffic, error) {
	var t Traffic
	for _, s := range []struct {
		c      prometheus.Collector
		sum    *float64
		reason string // diverted_batches_total's series of this reason only
	}{
		{m.diverted, &t.BacklogDiverts, "backlog"},
		{m.commands, &t.Commands, ""},
		{m.bytesOut, &t.WrittenBytes, ""},
		{m.bytesIn, &t.ReadBytes, ""},
	} {
		v, err := sumCounters(s.c, s.reason)
		if err != nil {
			return Traffic{}, err
		}
		*s.sum = v
	}
	return t, nil
}

// sumCounters sums the series c collects, those with label reason equal
// to reason when it is set.
func sumCounters(c prometheus.Collector, reason string) (float64, error) {
	ch := make(chan prometheus.Metric, 8)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var sum float64
	var err error
	var m dto.Metric
	for metric := range ch {
		if err != nil {
			continue // drained, so that Collect ends
		}
		m.Reset()
		if werr := metric.Write(&m); werr != nil {
			err = fmt.Errorf("upstream traffic: %s: %w", metric.Desc(), werr)
			continue
		}
		if reason != "" && !hasReason(m.GetLabel(), reason) {
			continue
		}
		sum += m.GetCounter().GetValue()
	}
	return sum, err
}

func hasReason(labels []*dto.LabelPair, reason string) bool {
	for _, l := range labels {
		if l.GetName() == "reason" && l.GetValue() == reason {
			return true
		}
	}
	return false
}

func (m *poolMetrics) observeWrite(commands, bytes int) {
	m.writes.Inc()
	m.commands.Add(float64(commands))
	m.bytesOut.Add(float64(bytes))
	m.batchCommands.Observe(float64(commands))
}
