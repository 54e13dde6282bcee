package load

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// testConfig is a small, quick configuration against addr.
func testConfig(addr string) Config {
	c := DefaultConfig()
	c.Addr = addr
	c.Clients = 4
	c.Pipeline = 4
	c.Duration = time.Second
	c.Keys = 1000
	c.Timeout = 2 * time.Second
	return c
}

func run(t *testing.T, cfg Config) Result {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%s: %d ops, %.0f ops/s, p50 %dµs p99 %dµs max %dµs, %.2f µs CPU/op, conn errors %v",
		res.Mode, res.Ops, res.OpsPerSec, res.Latency.P50, res.Latency.P99, res.Latency.Max,
		res.ClientCPUMicrosPerOp, res.ConnErrorSamples)
	return res
}

func checkOrdered(t *testing.T, l Latency) {
	t.Helper()
	if !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) || l.P50 < 1 {
		t.Errorf("latency percentiles out of order: %+v", l)
	}
}

func TestClosedLoopAfterPrepopulate(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Dist, cfg.ZipfS = DistZipf, 0.99
	cfg.Prepopulate = true
	res := run(t, cfg)

	if got := string(srv.Do(t, "DBSIZE")); got != ":1000\r\n" {
		t.Errorf("DBSIZE after prepopulate = %q, want :1000", got)
	}
	if res.PrepopulateSeconds <= 0 {
		t.Errorf("PrepopulateSeconds = %v", res.PrepopulateSeconds)
	}
	if res.Ops == 0 || res.Errors != 0 || res.ConnErrors != 0 {
		t.Fatalf("ops %d, errors %d, conn errors %d: want ops > 0 and no errors", res.Ops, res.Errors, res.ConnErrors)
	}
	if res.Reads != res.Ops || res.Hits != res.Reads || res.Nulls != 0 {
		t.Errorf("reads %d, hits %d, nulls %d, ops %d: every GET should hit", res.Reads, res.Hits, res.Nulls, res.Ops)
	}
	if res.Mode != "closed" || res.LatencyFrom != FromActualSend || res.Latency.Count != res.Ops {
		t.Errorf("mode %q, latency from %q, %d latencies for %d ops", res.Mode, res.LatencyFrom, res.Latency.Count, res.Ops)
	}
	if res.Seconds < 1 || res.Seconds > 1.5 {
		t.Errorf("measured %.3fs, want about 1s", res.Seconds)
	}
	checkOrdered(t, res.Latency)
}

func TestOpenLoopRate(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Rate = 2000
	res := run(t, cfg)

	if res.Mode != "open" || res.LatencyFrom != FromIntendedSend || res.TargetRate != 2000 {
		t.Errorf("mode %q, latency from %q, target %v", res.Mode, res.LatencyFrom, res.TargetRate)
	}
	if r := res.OpsPerSec / 2000; r < 0.9 || r > 1.1 {
		t.Errorf("achieved %.0f ops/s, want 2000 ± 10%%", res.OpsPerSec)
	}
	if res.Errors != 0 || res.ConnErrors != 0 || res.Unsent != 0 {
		t.Errorf("errors %d, conn errors %d, unsent %d", res.Errors, res.ConnErrors, res.Unsent)
	}
	// Nothing was prepopulated: every GET misses.
	if res.Nulls != res.Reads || res.Reads != res.Ops {
		t.Errorf("reads %d, nulls %d, ops %d", res.Reads, res.Nulls, res.Ops)
	}
	checkOrdered(t, res.Latency)
}

// A stall delays every command that should have been sent during it; open
// loop must charge the delay to all of them (no coordinated omission).
func TestOpenLoopChargesStalls(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Rate = 1000
	cfg.Pipeline = 1
	cfg.Clients = 2
	stall := time.AfterFunc(300*time.Millisecond, func() {
		srv.Pause()
		time.Sleep(300 * time.Millisecond)
		srv.Resume()
	})
	defer stall.Stop()
	defer srv.Resume()
	res := run(t, cfg)

	// About 300 of the 1000 commands fell due during the stall, waiting
	// 0 to 300 ms: the 90th percentile lies among them. Closed-loop timing
	// would charge the stall to only the 2 commands in flight.
	if res.Latency.P90 < 100_000 {
		t.Errorf("p90 = %dµs after a 300ms stall, want >= 100ms", res.Latency.P90)
	}
	if res.Latency.Max < 250_000 {
		t.Errorf("max = %dµs after a 300ms stall, want >= 250ms", res.Latency.Max)
	}
	if res.ConnErrors != 0 {
		t.Errorf("conn errors: %v", res.ConnErrorSamples)
	}
}

func TestMixDoesSets(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Duration = 300 * time.Millisecond
	cfg.ReadRatio = 0.5
	cfg.Keys = 1
	cfg.TTL = 100
	res := run(t, cfg)

	if res.Writes == 0 || res.Reads == 0 || res.Errors != 0 {
		t.Fatalf("reads %d, writes %d, errors %d", res.Reads, res.Writes, res.Errors)
	}
	if frac := float64(res.Writes) / float64(res.Ops); frac < 0.4 || frac > 0.6 {
		t.Errorf("SET share %.2f, want about 0.5", frac)
	}
	info := string(srv.Do(t, "INFO", "commandstats"))
	m := regexp.MustCompile(`cmdstat_set:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no cmdstat_set in INFO commandstats:\n%s", info)
	}
	// No warm-up, so every SET sent was measured.
	if calls, _ := strconv.ParseInt(m[1], 10, 64); calls != res.Writes {
		t.Errorf("cmdstat_set calls = %d, Result.Writes = %d", calls, res.Writes)
	}
	ttl := strings.TrimSpace(strings.TrimPrefix(string(srv.Do(t, "TTL", "key:0")), ":"))
	if n, err := strconv.Atoi(ttl); err != nil || n <= 0 || n > 100 {
		t.Errorf("TTL key:0 = %q, want 1..100", ttl)
	}
}

func TestErrorRepliesCountedByType(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "LPUSH", "list:0", "x")
	cfg := testConfig(srv.Addr)
	cfg.Duration = 0
	cfg.Requests = 101 // not a multiple of clients or pipeline
	cfg.Clients = 3
	cfg.KeyPrefix = "list:"
	cfg.Keys = 1
	res := run(t, cfg)

	if res.Ops != 101 || res.TotalOps != 101 {
		t.Errorf("ops %d, total %d, want exactly 101", res.Ops, res.TotalOps)
	}
	if res.Errors != 101 || res.ErrorsByType["WRONGTYPE"] != 101 || len(res.ErrorsByType) != 1 {
		t.Errorf("errors %d, by type %v: want 101 WRONGTYPE", res.Errors, res.ErrorsByType)
	}
	if res.ConnErrors != 0 || res.Hits != 0 || res.Nulls != 0 {
		t.Errorf("conn errors %d, hits %d, nulls %d: want 0", res.ConnErrors, res.Hits, res.Nulls)
	}
}

func TestBrokenConnectionsAreCounted(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Duration = 5 * time.Second
	killed := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { srv.Kill(); close(killed) })
	start := time.Now()
	res := run(t, cfg)
	<-killed
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Run took %v after every connection broke", d)
	}
	if res.ConnErrors != int64(cfg.Clients) || len(res.ConnErrorSamples) == 0 {
		t.Errorf("conn errors %d (%v), want %d", res.ConnErrors, res.ConnErrorSamples, cfg.Clients)
	}
	if res.Ops == 0 {
		t.Error("no ops measured before the kill")
	}
}

func TestNothingConnects(t *testing.T) {
	cfg := testConfig("127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)))
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("Run with no server: no error")
	}
}

func TestInterrupted(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Duration = time.Minute
	cfg.Rate = 100 // sleeping between sends, too
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second || !res.Interrupted || res.ConnErrors != 0 {
		t.Errorf("after %v: interrupted %v, conn errors %v", d, res.Interrupted, res.ConnErrorSamples)
	}
}

func TestWarmupExcluded(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Warmup = 200 * time.Millisecond
	cfg.Duration = 200 * time.Millisecond
	res := run(t, cfg)
	if res.Ops == 0 || res.TotalOps <= res.Ops {
		t.Errorf("ops %d, total %d: want warm-up commands sent but not measured", res.Ops, res.TotalOps)
	}
	if res.Seconds < 0.2 || res.Seconds > 0.5 {
		t.Errorf("measured %.3fs, want about 0.2s", res.Seconds)
	}
}

// TestTrackingConnections: with Tracking every connection is in RESP3 with
// tracking on (Redis's CLIENT LIST shows t and resp=3 for each), its GETs
// are answered and counted, and a push among the replies (an invalidation
// of a key read with CLIENT CACHING YES, written meanwhile) is not taken
// for one.
func TestTrackingConnections(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr)
	cfg.Tracking = true
	cfg.ReadRatio = 0.5
	res := run(t, cfg)
	if res.Ops == 0 || res.Errors != 0 || res.ConnErrors != 0 || res.Reads == 0 {
		t.Fatalf("ops %d, reads %d, errors %d, conn errors %d", res.Ops, res.Reads, res.Errors, res.ConnErrors)
	}

	conns, errs := dialAll(context.Background(), cfg)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	list := string(srv.Do(t, "CLIENT", "LIST"))
	if strings.Count(list, "flags=t ") != cfg.Clients || strings.Count(list, "resp=3") != cfg.Clients {
		t.Errorf("%d connections: CLIENT LIST\n%s", cfg.Clients, list)
	}
	c := conns[0]
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var cmds []byte
	cmds = resp.AppendCommandString(cmds, "CLIENT", "CACHING", "YES")
	cmds = resp.AppendCommandString(cmds, "GET", "tracked")
	if _, err := c.Write(cmds); err != nil {
		t.Fatal(err)
	}
	w := newWire(c, time.Now())
	for range 2 {
		if _, _, err := w.next(); err != nil {
			t.Fatal(err)
		}
	}
	srv.Do(t, "SET", "tracked", "1") // Redis pushes an invalidation to c
	if _, err := c.Write(resp.AppendCommandString(nil, "PING")); err != nil {
		t.Fatal(err)
	}
	if kind, head, err := w.next(); err != nil || kind != '+' {
		t.Errorf("after an invalidation, PING's reply read as %q %q (%v), want the +PONG past the push", kind, head, err)
	}
}
