package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rproxy/rproxy/command"
)

// metrics are the client side's Prometheus metrics (namespace rproxy,
// subsystem proxy). Outcome counters are resolved once so the hot path does
// no label lookups.
type metrics struct {
	clients         prometheus.Gauge
	parked          prometheus.Gauge
	accepted        prometheus.Counter
	rejected        *prometheus.CounterVec
	forwarded       prometheus.Counter
	local           prometheus.Counter
	refused         prometheus.Counter
	batchCommands   prometheus.Observer
	tableFromServer prometheus.Gauge
	calls           *prometheus.CounterVec
	unknownCalls    prometheus.Counter
	batchSeconds    prometheus.Observer
	upstreamSeconds prometheus.Observer
	authFailures    prometheus.Counter
	latency         *latencyMetrics // per command family
	sampler         latencySampler  // which batches are timed, process-wide
}

// closeReasons are the values of client_closed_by_proxy_total's reason
// label: every place that counts a close uses one of them.
var closeReasons = [...]string{"max_clients", "input_limit", "idle", "write_timeout", "tls_handshake", "upstream_lost"}

// callCounters are the per-command call counters of one command table,
// indexed by command.Info.ID and created on first use, so only commands
// that are called become series.
type callCounters struct {
	table *command.Table
	c     []lazyCounter
}

type lazyCounter struct {
	once sync.Once
	c    prometheus.Counter
}

func newCallCounters(t *command.Table) *callCounters {
	return &callCounters{table: t, c: make([]lazyCounter, len(t.Names()))}
}

// inc counts one call of info (nil: a command the table does not know).
func (cc *callCounters) inc(m *metrics, info *command.Info) {
	if info == nil || info.ID >= len(cc.c) {
		m.unknownCalls.Inc()
		return
	}
	l := &cc.c[info.ID]
	l.once.Do(func() { l.c = m.calls.WithLabelValues(cc.table.Names()[info.ID]) })
	l.c.Inc()
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "rproxy", "proxy"
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "commands_total", Help: "Client commands by outcome: forwarded upstream, answered locally, or refused."}, []string{"outcome"})
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "client_batch_commands", Help: "Commands per client read batch (client-side pipelining).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}})
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "command_calls_total", Help: "Client commands by name (top-level name from the command table; \"unknown\" for others)."}, []string{"command"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "batch_duration_seconds", Help: "Time to serve a client read batch, from reading it to writing its replies (client-seen latency minus the network), and the upstream round trip within it; every batch is timed up to 8 per millisecond, process-wide.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)}, []string{"stage"})
	m := &metrics{
		calls:           calls,
		unknownCalls:    calls.WithLabelValues("unknown"),
		batchSeconds:    latency.WithLabelValues("client"),
		upstreamSeconds: latency.WithLabelValues("upstream"),
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "client_connections", Help: "Client connections currently open."}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "client_connections_parked", Help: "Idle client connections waiting in the idle poller, without a goroutine."}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "client_connections_total", Help: "Client connections accepted."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "client_closed_by_proxy_total", Help: "Client connections refused or closed by the proxy, by reason."}, []string{"reason"}),
		forwarded:     commands.WithLabelValues("forwarded"),
		local:         commands.WithLabelValues("local"),
		refused:       commands.WithLabelValues("refused"),
		batchCommands: batch,
		latency:       newLatencyMetrics(reg),
		tableFromServer: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "command_table_loaded", Help: "1 once the command table has been loaded from the upstream's COMMAND reply."}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "auth_failures_total", Help: "Failed AUTH and HELLO AUTH attempts (wrong password or unknown user), checked by rproxy (auth.mode proxy) or by Redis (passthrough)."}),
	}
	// Every reason exported from the start, at zero, so dashboards and
	// increase() see the first event.
	for _, r := range closeReasons {
		m.rejected.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.clients, m.parked, m.accepted, m.rejected, commands, batch, m.tableFromServer, calls, latency, m.authFailures)
	}
	return m
}
