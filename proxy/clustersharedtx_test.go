package proxy_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// TestClusterSharedTransactionIsolated: on a cluster, a transaction sent
// whole whose keys are in one slot goes on the shared connections of that
// slot's master, as on one Redis (sharedtx.go), not on a dedicated
// connection: clients' transactions on keys of every master and other
// clients' pipelines on the same masters each get their own replies, and
// no dedicated connection is lent. Before, every such transaction pinned.
func TestClusterSharedTransactionIsolated(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Upstream.Connections = 1 })
	key := func(w int) string { return fmt.Sprintf("{tx%d}n", w) } // the hash tag: a client's keys in one slot
	masters := map[string]bool{}
	for w := range 6 {
		masters[cl.MasterForSlot(t, cl.Slot(key(w))).Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the transactions' keys are on %d master(s): the test needs them on several", len(masters))
	}
	sharedTransactionsBesidePipelines(t, p, 6, 100, key)
}

// movedKey sets key to 10, then moves its slot to another master behind
// rproxy's back, and returns that master.
func movedKey(t *testing.T, cl *redistest.Cluster, c *rawClient, key string) *redistest.ClusterNode {
	t.Helper()
	if r := c.do("SET", key, "10"); r != "+OK\r\n" {
		t.Fatalf("SET: %q", r)
	}
	slot := cl.Slot(key)
	from := cl.MasterForSlot(t, slot)
	for _, m := range cl.Masters() {
		if m.Addr != from.Addr {
			cl.MigrateSlot(t, slot, m)
			return m
		}
	}
	t.Fatal("no other master")
	return nil
}

// TestClusterSharedTransactionNotRedirected: a shared transaction's
// command that meets a MOVED (rproxy's slot map is stale) is not sent
// again alone to the slot's new master, where it would run outside the
// transaction Redis has discarded: the client gets TRYAGAIN and EXEC's
// EXECABORT, as from a pinned transaction, nothing runs, and its retry
// runs once on the new master (the MOVED corrected rproxy's map).
func TestClusterSharedTransactionNotRedirected(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		// No timed map read: the map stays stale until a MOVED.
		c.Cluster.Refresh = time.Hour
	})
	const key = "{moving}n"
	c := dialClient(t, p.Addr)
	to := movedKey(t, cl, c, key)
	slot := cl.Slot(key)
	tx := [][]string{{"MULTI"}, {"INCR", key}, {"GET", key}, {"EXEC"}}
	got := sendAll(c, tx...)
	want := []string{"+OK\r\n", "-TRYAGAIN rproxy: slot " + strconv.Itoa(slot) + " is moving between the cluster's masters; try again\r\n",
		"-TRYAGAIN rproxy: slot " + strconv.Itoa(slot) + " is moving between the cluster's masters; try again\r\n",
		"-EXECABORT Transaction discarded because of previous errors.\r\n"}
	if !slices.Equal(got, want) {
		t.Fatalf("the transaction on the moved slot: %q, want %q", got, want)
	}
	if r := string(to.Do(t, "GET", key)); r != "$2\r\n10\r\n" {
		t.Fatalf("after the discarded transaction the key is %q on its new master, want 10: a command ran outside it", r)
	}
	// The client's retry runs on the new master, once: the MOVED put the
	// slot there in rproxy's map.
	if got = sendAll(c, tx...); got[3] != "*2\r\n:11\r\n$2\r\n11\r\n" {
		t.Fatalf("the retried transaction: %q", got)
	}
	if r := string(to.Do(t, "GET", key)); r != "$2\r\n11\r\n" {
		t.Fatalf("after the retry the key is %q, want 11", r)
	}
	if n := counterValue(t, p.Registry, "rproxy_upstream_idle_dedicated_connections", nil); n != 0 {
		t.Errorf("idle dedicated connections = %v: the transactions pinned, the test shows nothing of the shared path", n)
	}
}

// TestClusterPinnedMovedCorrectsTheMap: a MOVED that a pinned session's
// command meets (WATCH, a blocking command, a transaction with a WATCH)
// reaches the client as TRYAGAIN, and corrects rproxy's slot map as a
// followed one does, so the client's retry goes to the slot's new
// master. Before, the map stayed stale until its next timed read
// (upstream.cluster.refresh, 10 s by default), and every retry got
// TRYAGAIN until then.
func TestClusterPinnedMovedCorrectsTheMap(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.Refresh = time.Hour })
	const key = "{pinned}n"
	c := dialClient(t, p.Addr)
	movedKey(t, cl, c, key)
	slot := cl.Slot(key)
	if r := c.do("WATCH", key); !strings.HasPrefix(r, "-TRYAGAIN rproxy: slot "+strconv.Itoa(slot)+" ") {
		t.Fatalf("WATCH on the moved slot: %q, want TRYAGAIN", r)
	}
	got := sendAll(c, []string{"WATCH", key}, []string{"GET", key}, []string{"MULTI"}, []string{"SET", key, "11"}, []string{"EXEC"})
	if want := []string{"+OK\r\n", "$2\r\n10\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"}; !slices.Equal(got, want) {
		t.Fatalf("the retry: %q, want %q", got, want)
	}
}

// TestClusterSharedTransactionRefusalAborts: a command rproxy refuses
// inside a shared transaction on a cluster (Redis's arity error, checked
// first by rproxy) aborts it as on Redis: the command that makes Redis
// discard it goes to the transaction's master, inside it. Before, it went
// to any master, and the EXEC ran the rest (found by
// TestClusterPipelinesAsStandaloneRandomSequences, seed 144).
func TestClusterSharedTransactionRefusalAborts(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	direct := redistest.Start(t)
	p := startClusterProxy(t, cl)
	for i := range 6 { // keys on every master
		key := "{ab" + strconv.Itoa(i) + "}n"
		// A read of another master's key first: the batch is split by
		// master, where a command without a key goes with the first
		// keyed command's master.
		other := "other0"
		for j := 1; cl.MasterForSlot(t, cl.Slot(other)).Addr == cl.MasterForSlot(t, cl.Slot(key)).Addr; j++ {
			other = "other" + strconv.Itoa(j)
		}
		seq := [][]string{{"GET", other}, {"MULTI"}, {"GET"}, {"INCR", key}, {"PING"}, {"EXEC"}, {"GET", key}}
		want, got := sendAll(dialClient(t, direct.Addr), seq...), sendAll(dialClient(t, p.Addr), seq...)
		if !slices.Equal(got, want) {
			t.Fatalf("key %s: %q, Redis %q", key, got, want)
		}
	}
}
