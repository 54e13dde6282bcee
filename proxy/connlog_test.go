package proxy_test

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// Connection events are debug lines; at info, a periodic summary says how
// many clients connected and left, and why rproxy closed any.
func TestConnectionSummaryLog(t *testing.T) {
	rs := redistest.Start(t)
	core, logs := observer.New(zapcore.DebugLevel)
	p := proxytest.StartLogged(t, zap.New(core), rs.Addr, func(c *proxy.Config) {
		c.ConnSummaryEvery = 5 * time.Millisecond
		c.MaxBulkLen = 1 << 10
	})
	for range 3 {
		c := dialClient(t, p.Addr)
		c.do("PING")
		c.nc.Close()
	}
	bad := dialClient(t, p.Addr)
	bad.send([]byte("*2\r\n$3\r\nGET\r\n$99999\r\n")) // over max_bulk_len: closed
	bad.expectClosed()

	sum := func(key string) int64 {
		var n int64
		for _, e := range logs.FilterMessage("client connections").All() {
			if v, ok := e.ContextMap()[key].(int64); ok {
				n += v
			}
		}
		return n
	}
	waitFor(t, "summary lines counting 4 opened and 4 closed, 1 for the input limit", func() bool {
		return sum("opened") == 4 && sum("closed") == 4 && sum("closed_input_limit") == 1
	})
	for _, e := range logs.FilterMessage("client connections").All() {
		if e.Level != zapcore.InfoLevel {
			t.Errorf("summary at %v, want info", e.Level)
		}
		if _, ok := e.ContextMap()["interval_seconds"]; !ok {
			t.Errorf("summary lacks interval_seconds: %v", e.ContextMap())
		}
	}
	for _, msg := range []string{"client connected", "client disconnected"} {
		entries := logs.FilterMessage(msg).All()
		if len(entries) == 0 {
			t.Errorf("no %q line at debug", msg)
		}
		for _, e := range entries {
			if e.Level != zapcore.DebugLevel {
				t.Errorf("%q at %v, want debug", msg, e.Level)
			}
		}
	}
}
