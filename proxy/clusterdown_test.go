package proxy_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
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
