package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/upstream"
)

// TestUpstreamTrafficCountsSharedAndPinnedReplies: the procs governor's
// counters (Server.UpstreamTraffic) see a large value's command and its
// reply, whether the session runs on the shared connections or is pinned
// (here by SELECT).
func TestUpstreamTrafficCountsSharedAndPinnedReplies(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	traffic := func() upstream.Traffic {
		t.Helper()
		tr, err := p.Server.UpstreamTraffic()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	const size = 100 << 10
	value := strings.Repeat("v", size)
	c := dialClient(t, p.Addr)
	check := func(where string) {
		t.Helper()
		before := traffic()
		if got := c.do("SET", "big", value); got != "+OK\r\n" {
			t.Fatalf("%s: SET = %q", where, got)
		}
		if got := c.do("GET", "big"); len(got) < size {
			t.Fatalf("%s: GET returned %d bytes", where, len(got))
		}
		// The writer counts a write once it returns, which may be after
		// the reply is in: wait for the counts, up to a deadline.
		var after upstream.Traffic
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			after = traffic()
			if after.Commands-before.Commands >= 2 && after.WrittenBytes-before.WrittenBytes >= size &&
				after.ReadBytes-before.ReadBytes >= size || time.Now().After(deadline) {
				break
			}
		}
		if d := after.Commands - before.Commands; d < 2 {
			t.Errorf("%s: %v commands counted for SET and GET", where, d)
		}
		if d := after.WrittenBytes - before.WrittenBytes; d < size {
			t.Errorf("%s: %v bytes written counted for a %d-byte SET", where, d, size)
		}
		if d := after.ReadBytes - before.ReadBytes; d < size {
			t.Errorf("%s: %v bytes read counted for a %d-byte reply", where, d, size)
		}
	}
	check("shared")
	if got := c.do("SELECT", "1"); got != "+OK\r\n" {
		t.Fatalf("SELECT 1 = %q", got)
	}
	check("pinned")
}
