package proxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the client side's Prometheus metrics (namespace rproxy,
// subsystem proxy). Outcome counters are resolved once so the hot path does
// no label lookups.
type metrics struct {
	clients         prometheus.Gauge
	accepted        prometheus.Counter
	rejected        *prometheus.CounterVec
	forwarded       prometheus.Counter
	local           prometheus.Counter
	refused         prometheus.Counter
	batchCommands   prometheus.Observer
	tableFromServer prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "rproxy", "proxy"
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "commands_total", Help: "Client commands by outcome: forwarded upstream, answered locally, or refused."}, []string{"outcome"})
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "client_batch_commands", Help: "Commands per client read batch (client-side pipelining).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}})
	m := &metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "client_connections", Help: "Client connections currently open."}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "client_connections_total", Help: "Client connections accepted."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "client_closed_by_proxy_total", Help: "Client connections refused or closed by the proxy, by reason."}, []string{"reason"}),
		forwarded:     commands.WithLabelValues("forwarded"),
		local:         commands.WithLabelValues("local"),
		refused:       commands.WithLabelValues("refused"),
		batchCommands: batch,
		tableFromServer: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "command_table_loaded", Help: "1 once the command table has been loaded from the upstream's COMMAND reply."}),
	}
	if reg != nil {
		reg.MustRegister(m.clients, m.accepted, m.rejected, commands, batch, m.tableFromServer)
	}
	return m
}
