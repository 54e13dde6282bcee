// Package proxytest runs an in-process rproxy server in front of a given
// upstream for tests, on a free loopback port, and shuts it down at cleanup.
package proxytest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/rproxy/rproxy/coalesce"
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// Proxy is a running proxy server.
type Proxy struct {
	Addr     string
	Server   *proxy.Server
	Registry *prometheus.Registry
	done     chan error
}

// Config returns the test defaults: short timeouts so failure tests are fast.
func Config(upstreamAddr string) proxy.Config {
	return proxy.Config{
		Listen: "127.0.0.1:0",
		Upstream: upstream.Config{
			Address:       upstreamAddr,
			Connections:   1,
			GatherYields:  4,
			StallDivert:   100 * time.Millisecond, // the shipped default
			BacklogDivert: 1 << 20,                // the shipped default
			DialTimeout:   time.Second,
			Timeout:       2 * time.Second,
			BackoffMin:    10 * time.Millisecond,
			BackoffMax:    200 * time.Millisecond,
		},
		Limits: proxy.Limits{
			MaxClients:     10000,
			MaxBulkLen:     512 << 20,
			MaxQueryBuffer: 1 << 30,
			MaxReplyBuffer: 16 << 20,
			// Short, so the deadline code runs in every test.
			ClientWriteTimeout: 10 * time.Second,
		},
		ShutdownDrain: 5 * time.Second,
		TableRetry:    20 * time.Millisecond,
		Coalesce:      &coalesce.Config{Commands: []string{"get"}},
		HotKey:        HotKeyConfig(),
	}
}

// HotKeyConfig returns the shipped hot-key settings: detection on, the tier
// on, with the shipped max lag (1s).
func HotKeyConfig() *tier.Config {
	return &tier.Config{
		Detector:   hotkey.DefaultDetectorConfig(),
		Tier:       true,
		TierConfig: hotkey.DefaultTierConfig(),
		MaxLag:     time.Second,
		MissWait:   200 * time.Millisecond,
		Churn:      hotkey.DefaultChurnConfig(),
	}
}

// Start runs a proxy with Config(upstreamAddr), modified by each option, and
// waits until it is ready (upstream reachable, command table loaded) unless
// the upstream is expected to be down (see NoWait).
func Start(tb testing.TB, upstreamAddr string, opts ...func(*proxy.Config)) *Proxy {
	tb.Helper()
	return start(tb, nil, upstreamAddr, opts...)
}

// StartLogged is Start with the proxy logging to log, for tests that check
// what is logged (e.g. with go.uber.org/zap/zaptest/observer).
func StartLogged(tb testing.TB, log *zap.Logger, upstreamAddr string, opts ...func(*proxy.Config)) *Proxy {
	tb.Helper()
	return start(tb, log, upstreamAddr, opts...)
}

func start(tb testing.TB, log *zap.Logger, upstreamAddr string, opts ...func(*proxy.Config)) *Proxy {
	tb.Helper()
	cfg := Config(upstreamAddr)
	wait := true
	for _, o := range opts {
		if o == nil {
			wait = false
			continue
		}
		o(&cfg)
	}
	reg := prometheus.NewRegistry()
	if log == nil {
		log = zaptest.NewLogger(tb, zaptest.Level(zap.WarnLevel))
		if _, fuzzing := tb.(*testing.F); fuzzing {
			// A fuzz target's *testing.F must not log from inside the target.
			log = zap.NewNop()
		}
	}
	srv, err := proxy.New(cfg, reg, log)
	if err != nil {
		tb.Fatalf("proxy.New: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), Server: srv, Registry: reg, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ln) }()
	tb.Cleanup(func() { p.Stop(tb) })
	if wait {
		deadline := time.Now().Add(10 * time.Second)
		for !srv.Ready() {
			if time.Now().After(deadline) {
				tb.Fatalf("proxy in front of %s not ready after 10s", upstreamAddr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return p
}

// NoWait is an option for Start: do not wait for readiness.
var NoWait func(*proxy.Config) = nil

// Stop shuts the proxy down (idempotent) and fails the test if Serve failed.
func (p *Proxy) Stop(tb testing.TB) {
	if p.Server == nil {
		return
	}
	srv := p.Server
	p.Server = nil
	if err := srv.Shutdown(context.Background()); err != nil {
		tb.Errorf("proxy shutdown: %v", err)
	}
	if err := <-p.done; err != nil {
		tb.Errorf("proxy serve: %v", err)
	}
}
