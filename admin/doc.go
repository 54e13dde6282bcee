// Package admin serves rproxy's operator HTTP endpoints: /healthz (the
// process is up), /readyz (the upstream is reachable and the command table
// is loaded), /metrics (Prometheus), POST /reload (re-read the config file
// and apply what can change without a restart: policy, jitter, hot-key and
// tier settings, log level, request logging, client limits), /hotkeys (JSON), /config (the
// running configuration, secrets redacted) and /debug/pprof.
package admin
