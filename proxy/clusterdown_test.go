package proxy_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// TestClusterDownForAMomentIsRetried: a node that sees the cluster down
// refuses every command with keys (-CLUSTERDOWN, running nothing) until
// it sees it whole again, as a master does for a moment around a failover
// or a partition. rproxy sends the command, and a shared transaction
// whole, again after a pause, as go-redis's and redis-py's cluster clients
// do, and a pinned session's batch that the node refused whole runs again
// on its connection, so that a moment's CLUSTERDOWN does not reach the
// client (found by
// TestClusterManualFailoverUnderLoad in CI, 2026-11-30). A node that
// stays down gets its CLUSTERDOWN to the client once the rounds are spent.
func TestClusterDownForAMomentIsRetried(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.MaxRedirects = 8 })
	key, counter, watched := "{cd}k", "{cd}n", "{cd}w"
	owner := cl.MasterForSlot(t, cl.Slot(key))
	// Another slot of the same master: deleting it there makes that
	// master alone see an unserved slot, so the cluster down.
	other := -1
	for s := 0; s < redistest.NumSlots && other < 0; s++ {
		if s != cl.Slot(key) && cl.MasterForSlot(t, s).Addr == owner.Addr {
			other = s
		}
	}
	c := dialClient(t, p.Addr)
	if r := c.do("SET", key, "v"); r != "+OK\r\n" {
		t.Fatalf("SET: %q", r)
	}
	down := func() {
		t.Helper()
		if r := string(owner.Do(t, "CLUSTER", "DELSLOTS", strconv.Itoa(other))); r != "+OK\r\n" {
			t.Fatalf("CLUSTER DELSLOTS: %q", r)
		}
		waitFor(t, "the master to see the cluster down", func() bool {
			return string(owner.Do(t, "GET", key)) == "-CLUSTERDOWN The cluster is down\r\n"
		})
	}
	up := func() {
		t.Helper()
		if r := string(owner.Do(t, "CLUSTER", "ADDSLOTS", strconv.Itoa(other))); r != "+OK\r\n" {
			t.Fatalf("CLUSTER ADDSLOTS: %q", r)
		}
	}

	down()
	tx, watch := dialClient(t, p.Addr), dialClient(t, p.Addr)
	before := redirects(t, p, "clusterdown")
	c.send(pipeline([]string{"GET", key}))
	tx.send(pipeline([]string{"MULTI"}, []string{"INCR", counter}, []string{"EXEC"}))
	// A WATCH loop's round in one write runs pinned: refused whole, it
	// runs again whole on its connection.
	watch.send(pipeline([]string{"WATCH", watched}, []string{"GET", watched}, []string{"MULTI"}, []string{"INCR", watched}, []string{"EXEC"}))
	waitFor(t, "rproxy to meet CLUSTERDOWN", func() bool { return redirects(t, p, "clusterdown") >= before+3 })
	up()
	if r := string(c.read()); r != "$1\r\nv\r\n" {
		t.Errorf("GET through a moment's CLUSTERDOWN: %q", r)
	}
	want := []string{"+OK\r\n", "+QUEUED\r\n", "*1\r\n:1\r\n"}
	if got := []string{string(tx.read()), string(tx.read()), string(tx.read())}; !slices.Equal(got, want) {
		t.Errorf("transaction through a moment's CLUSTERDOWN: %q, want %q", got, want)
	}

	want = []string{"+OK\r\n", "$-1\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n:1\r\n"}
	if got := []string{string(watch.read()), string(watch.read()), string(watch.read()), string(watch.read()), string(watch.read())}; !slices.Equal(got, want) {
		t.Errorf("WATCH round through a moment's CLUSTERDOWN: %q, want %q", got, want)
	}

	// Down for longer than the rounds: Redis's reply reaches the client.
	down()
	if r := c.do("GET", key); r != "-CLUSTERDOWN The cluster is down\r\n" {
		t.Errorf("GET while the cluster stays down: %q", r)
	}
	up()
	waitFor(t, "the master to serve again", func() bool { return c.do("GET", key) == "$1\r\nv\r\n" })
}

// TestClusterBlockedCommandWaitsOnlyWhatIsLeft: a node unblocks a blocked
// BLPOP with -MOVED when its slot moves away, and with -CLUSTERDOWN when it
// sees the cluster down. rproxy runs it again (on the slot's new master;
// after a pause), with what is left of the client's timeout: sent again as
// the client sent it, it would wait its whole timeout a second time.
func TestClusterBlockedCommandWaitsOnlyWhatIsLeft(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.MaxRedirects = 8 })
	key := "{bt}list"
	slot := cl.Slot(key)
	from := cl.MasterForSlot(t, slot)
	var to *redistest.ClusterNode
	for _, m := range cl.Masters() {
		if m.Addr != from.Addr {
			to = m
			break
		}
	}
	c, b, mon := dialClient(t, p.Addr), dialClient(t, p.Addr), dialClient(t, to.Addr)
	if r := mon.do("MONITOR"); r != "+OK\r\n" {
		t.Fatalf("MONITOR: %q", r)
	}
	const timeout = 30.0
	// blocked waits until a BLPOP is blocked on node n, and then until it
	// has been for held, the wait rproxy must take off its timeout.
	const held = 300 * time.Millisecond
	blocked := func(n *redistest.ClusterNode, sent time.Time) time.Duration {
		t.Helper()
		waitFor(t, "the BLPOP to block on "+n.Addr, func() bool {
			return strings.Contains(string(n.Do(t, "CLIENT", "LIST")), "flags=b ")
		})
		time.Sleep(time.Until(sent.Add(held)))
		return time.Since(sent)
	}
	// resent reads MONITOR on to until the RPUSH of key, and returns the
	// BLPOPs' timeouts before it.
	resent := func() []float64 {
		t.Helper()
		var got []float64
		for {
			line := string(mon.read())
			if strings.Contains(line, `"RPUSH"`) {
				return got
			}
			if f := strings.Fields(strings.TrimSpace(line)); len(f) == 6 && f[3] == `"BLPOP"` {
				v, err := strconv.ParseFloat(strings.Trim(f[5], `"`), 64)
				if err != nil {
					t.Fatalf("MONITOR line %q: %v", line, err)
				}
				got = append(got, v)
			}
		}
	}
	served := func(what string) {
		t.Helper()
		if r := c.do("RPUSH", key, "x"); r != ":1\r\n" {
			t.Fatalf("RPUSH: %q", r)
		}
		if r := string(b.read()); r != "*2\r\n$8\r\n{bt}list\r\n$1\r\nx\r\n" {
			t.Fatalf("BLPOP %s: %q", what, r)
		}
	}

	// The slot moves while the BLPOP waits on its old master.
	sent := time.Now()
	b.send(resp.AppendCommandString(nil, "BLPOP", key, "30"))
	waited := blocked(from, sent)
	cl.MigrateSlot(t, slot, to)
	waitFor(t, "the BLPOP to block on the slot's new master", func() bool {
		return strings.Contains(string(to.Do(t, "CLIENT", "LIST")), "flags=b ")
	})
	served("after its slot moved")
	got := resent()
	if len(got) != 1 || got[0] > timeout-waited.Seconds()+0.002 || got[0] < timeout-time.Since(sent).Seconds() {
		t.Errorf("BLPOP %s 30 held %v on the slot's old master reached the new one with timeouts %v, want one of %.3f at most",
			key, waited, got, timeout-waited.Seconds())
	}

	// The slot's master sees the cluster down while the BLPOP waits.
	other := -1
	for s := 0; s < redistest.NumSlots && other < 0; s++ {
		if s != slot && cl.MasterForSlot(t, s).Addr == to.Addr {
			other = s
		}
	}
	before := redirects(t, p, "clusterdown")
	sent = time.Now()
	b.send(resp.AppendCommandString(nil, "BLPOP", key, "30"))
	waited = blocked(to, sent)
	if r := string(to.Do(t, "CLUSTER", "DELSLOTS", strconv.Itoa(other))); r != "+OK\r\n" {
		t.Fatalf("CLUSTER DELSLOTS: %q", r)
	}
	waitFor(t, "the BLPOP to meet CLUSTERDOWN", func() bool { return redirects(t, p, "clusterdown") > before })
	if r := string(to.Do(t, "CLUSTER", "ADDSLOTS", strconv.Itoa(other))); r != "+OK\r\n" {
		t.Fatalf("CLUSTER ADDSLOTS: %q", r)
	}
	waitFor(t, "the master to serve again", func() bool { return c.do("LLEN", key) == ":0\r\n" })
	waitFor(t, "the BLPOP to block again", func() bool {
		return strings.Contains(string(to.Do(t, "CLIENT", "LIST")), "flags=b ")
	})
	served("through a CLUSTERDOWN")
	got = resent()
	// The first is the client's own; each one after it waits less.
	falling := true
	for i := 2; i < len(got); i++ {
		falling = falling && got[i] < got[i-1]
	}
	if len(got) < 2 || got[0] != timeout || got[1] > timeout-waited.Seconds()+0.002 || !falling {
		t.Errorf("BLPOP %s 30 held %v before CLUSTERDOWN was sent as %v, want 30 and then %.3f at most, falling", key, waited, got, timeout-waited.Seconds())
	}
}
