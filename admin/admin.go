package admin

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Endpoints are what the admin handler serves. Nil funcs leave their
// endpoint out.
type Endpoints struct {
	// Ready reports nil when the proxy can serve, or why it cannot.
	Ready func() error
	// Gatherer is scraped by /metrics.
	Gatherer prometheus.Gatherer
	// Reload re-reads the configuration and applies what can change at run
	// time; an error leaves the running configuration in place. note, when
	// not empty, says what was not applied (keys that need a restart).
	Reload func() (note string, err error)
	// HotKeys returns the current hot keys (any JSON-encodable value).
	HotKeys func() any
	// Config renders the running configuration with secrets redacted.
	Config func() string
	// Token, when not empty, is required as "Authorization: Bearer <token>"
	// by every endpoint but /healthz and /readyz (probes carry no secret).
	Token string
}

// Handler returns the admin endpoints.
func Handler(e Endpoints) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	if e.Ready != nil {
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if err := e.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ready\n"))
		})
	}
	if e.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(e.Gatherer, promhttp.HandlerOpts{}))
	}
	if e.Reload != nil {
		mux.HandleFunc("POST /reload", func(w http.ResponseWriter, _ *http.Request) {
			note, err := e.Reload()
			if err != nil {
				http.Error(w, "reload rejected, configuration unchanged: "+err.Error(), http.StatusBadRequest)
				return
			}
			w.Write([]byte("reloaded\n"))
			if note != "" {
				w.Write([]byte(note + "\n"))
			}
		})
	}
	if e.HotKeys != nil {
		mux.HandleFunc("GET /hotkeys", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(e.HotKeys())
		})
	}
	if e.Config != nil {
		mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			w.Write([]byte(e.Config()))
		})
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if e.Token == "" {
		return mux
	}
	want := []byte("Bearer " + e.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rproxy admin"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <admin token>", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
