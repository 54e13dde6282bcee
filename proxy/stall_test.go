package proxy_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestStallDivertServesReadsDuringAWritePause: while Redis pauses writes
// (CLIENT PAUSE WRITE, as FAILOVER does), it stops reading a connection at
// its first write. A client's SET on the shared connection held every
// other client's commands behind it for the whole pause, where on Redis
// only the writer waits. With upstream.stall_divert, once the connection
// has been stalled that long, another client's GET goes around it (to a
// spare connection) and is answered while the SET still waits; the SET is
// answered when the pause ends. Run twice: the spare, once dialled, is
// kept and reused.
func TestStallDivertServesReadsDuringAWritePause(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	rs.Do(t, "SET", "x", "1")
	for round := range 2 {
		writer, reader := dialClient(t, p.Addr), dialClient(t, p.Addr)
		writer.do("PING")
		reader.do("PING")
		if r := string(rs.Do(t, "CLIENT", "PAUSE", "20000", "WRITE")); r != "+OK\r\n" {
			t.Fatalf("CLIENT PAUSE: %q", r)
		}
		writer.send(resp.AppendCommandString(nil, "SET", "k", "v"))
		waitFor(t, "the shared connection stalled", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) >= 1
		})
		diverted := counterValue(t, p.Registry, "rproxy_upstream_diverted_batches_total", nil)
		if r := reader.do("GET", "x"); r != "$1\r\n1\r\n" {
			t.Fatalf("round %d: GET during the write pause: %q", round, r)
		}
		if got := counterValue(t, p.Registry, "rproxy_upstream_diverted_batches_total", nil); got <= diverted {
			t.Errorf("round %d: diverted batches %v, want more than %v", round, got, diverted)
		}
		writer.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var ne net.Error
		if _, err := writer.rd.ReadByte(); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("round %d: the paused SET was answered before the pause ended (%v)", round, err)
		}
		rs.Do(t, "CLIENT", "UNPAUSE")
		if r := string(writer.read()); r != "+OK\r\n" {
			t.Fatalf("round %d: SET after the pause: %q", round, r)
		}
		waitFor(t, "no stalled connection", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) == 0
		})
	}
}

// TestStallDivertLongScriptBusyAsRedis: while a script runs past Redis's
// busy-reply-threshold, Redis answers other clients -BUSY. Through rproxy
// their commands waited behind the script on the shared connection; with
// upstream.stall_divert they go around it and get Redis's -BUSY, as a
// direct client does at the same moment.
func TestStallDivertLongScriptBusyAsRedis(t *testing.T) {
	rs := redistest.Start(t, "--busy-reply-threshold", "100")
	p := proxytest.Start(t, rs.Addr)
	caller, other := dialClient(t, p.Addr), dialClient(t, p.Addr)
	other.do("PING")
	caller.send(resp.AppendCommandString(nil, "EVAL", busyScript, "0", "1500"))
	waitBusy(t, rs)
	waitFor(t, "the shared connection stalled", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_stalled_connections", nil) >= 1
	})
	direct, err := rs.Exec("ECHO", "x")
	if err != nil {
		t.Fatal(err)
	}
	if r := other.doErr("ECHO", "x"); r != string(direct) || !strings.HasPrefix(r, "-BUSY") {
		t.Errorf("ECHO during the script through rproxy: %q, want %q as from Redis directly", r, direct)
	}
	if r := string(caller.read()); r != "$4\r\ndone\r\n" {
		t.Errorf("the script: %q, want its result", r)
	}
}
