package proxy_test

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/proxy/resp"
)

var cmdstatGet = regexp.MustCompile(`cmdstat_get:calls=(\d+)`)

// upstreamGets is how many GETs reached Redis since the last CONFIG RESETSTAT.
func upstreamGets(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	m := cmdstatGet.FindSubmatch(rs.Do(t, "INFO", "commandstats"))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// pipelinedGets sends n GETs of key in one write and returns the replies.
func pipelinedGets(c *rawClient, key string, n int) []string {
	var b []byte
	for i := 0; i < n; i++ {
		b = resp.AppendCommandString(b, "GET", key)
	}
	c.send(b)
	replies := make([]string, n)
	for i := range replies {
		replies[i] = string(c.read())
	}
	return replies
}

// TestCoalescedPipelineOneUpstreamCall: ten identical GETs in one client
// batch: the key's first read goes alone (the recently-read filter starts no
// flight for a key not read before), the second leads a flight and the other
// eight join it; Redis sees two GETs and every reply is the same bytes.
func TestCoalescedPipelineOneUpstreamCall(t *testing.T) {
	rs := redistest.Start(t)
	// The filter must not forget the first read before the second.
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.CoalesceRecent = time.Hour })
	rs.Do(t, "SET", "hot", "value")
	rs.Do(t, "CONFIG", "RESETSTAT")
	for i, got := range pipelinedGets(dialClient(t, p.Addr), "hot", 10) {
		if got != "$5\r\nvalue\r\n" {
			t.Fatalf("reply %d = %q", i, got)
		}
	}
	if n := upstreamGets(t, rs); n != 2 {
		t.Fatalf("Redis saw %d GETs for 10 identical pipelined GETs, want 2", n)
	}
	if j := counterValue(t, p.Registry, "rproxy_coalesce_joins_total", nil); j != 8 {
		t.Fatalf("joins = %v, want 8", j)
	}
}

// TestCoalesceReadYourWrites: a GET after a write in the same batch never
// joins the flight of a GET sent before that write.
func TestCoalesceReadYourWrites(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	rs.Do(t, "SET", "k", "old")
	c := dialClient(t, p.Addr)
	var b []byte
	b = resp.AppendCommandString(b, "GET", "k") // leads a flight
	b = resp.AppendCommandString(b, "SET", "k", "new")
	b = resp.AppendCommandString(b, "GET", "k") // must not join it
	c.send(b)
	for i, want := range []string{"$3\r\nold\r\n", "+OK\r\n", "$3\r\nnew\r\n"} {
		if got := string(c.read()); got != want {
			t.Fatalf("reply %d = %q, want %q (read-your-writes broken)", i, got, want)
		}
	}
}

// TestCoalescedErrorsFanOut: when the upstream is down, the leader's error
// reaches every joiner unchanged.
func TestCoalescedErrorsFanOut(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	rs.Kill()
	replies := pipelinedGets(dialClient(t, p.Addr), "k", 5)
	if !strings.HasPrefix(replies[0], "-ERR upstream unavailable") {
		t.Fatalf("first reply = %q", replies[0])
	}
	for i, got := range replies[1:] {
		if got != replies[0] {
			t.Fatalf("reply %d = %q, want the same as the first, %q", i+1, got, replies[0])
		}
	}
}

// TestCoalescingAcrossClients: 200 clients GET one key at once; fewer GETs
// reach Redis than clients sent, and every client gets the right bytes.
func TestCoalescingAcrossClients(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	rs.Do(t, "SET", "hot", "v")
	var clients []*rawClient
	for i := 0; i < 200; i++ {
		clients = append(clients, dialClient(t, p.Addr))
	}
	rs.Do(t, "CONFIG", "RESETSTAT")
	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan string, len(clients))
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				if got := c.doErr("GET", "hot"); got != "$1\r\nv\r\n" {
					errs <- got
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("client got %q", e)
	}
	n := upstreamGets(t, rs)
	total := len(clients) * rounds
	t.Logf("%d client GETs, %d reached Redis", total, n)
	if n >= total {
		t.Fatalf("%d client GETs, %d reached Redis: nothing was coalesced", total, n)
	}
}

// TestCoalesceOffWithoutConfig: with no eligible commands, every GET goes up.
func TestCoalesceOffWithoutConfig(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Coalesce = nil })
	rs.Do(t, "CONFIG", "RESETSTAT")
	pipelinedGets(dialClient(t, p.Addr), "k", 10)
	if n := upstreamGets(t, rs); n != 10 {
		t.Fatalf("Redis saw %d GETs with coalescing off, want 10", n)
	}
}
