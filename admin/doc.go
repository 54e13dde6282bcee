// Package admin serves rproxy's operator HTTP endpoints: /healthz (the
// process is up), /readyz (the upstream is reachable and the command table is
// loaded) and /metrics (Prometheus) and /debug/pprof. The operations issue adds more.
package admin
