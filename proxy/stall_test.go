package proxy_test

import (
	"errors"
	"net"
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
