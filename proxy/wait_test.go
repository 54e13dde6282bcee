package proxy_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// TestWaitCountsTheClientsWrites: WAIT numreplicas timeout returns once
// that many replicas have the client's writes. Redis counts the replicas
// that have acknowledged the replication offset it noted on the
// connection after its last command; through rproxy, WAIT runs on a
// pinned connection whose last command may come from before the client's
// writes (they went on shared connections), and WAIT then counted a
// replica that had stopped as having them, at once. Here the replica is
// stopped (SIGSTOP) after it has acknowledged everything before the
// client's SET: WAIT must time out with 0, as on Redis.
func TestWaitCountsTheClientsWrites(t *testing.T) {
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(replica.Do(t, "INFO", "replication")), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("the replica's link is not up after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := proxytest.Start(t, master.Addr)
	for _, pipelined := range []bool{false, true} {
		var got [2]string
		for i, addr := range []string{master.Addr, p.Addr} {
			c := dialClient(t, addr)
			c.do("PING")
			side := dialClient(t, master.Addr)
			side.do("SET", "before", "1")
			if r := side.do("WAIT", "1", "5000"); r != ":1\r\n" { // the replica has everything so far
				t.Fatalf("WAIT with the replica up: %q", r)
			}
			replica.Pause()
			if pipelined {
				got[i] = c.pipeline([]string{"SET", "k", "v"}, []string{"WAIT", "1", "200"})
			} else {
				got[i] = c.do("SET", "k", "v") + c.do("WAIT", "1", "200")
			}
			replica.Resume()
		}
		if got[0] != "+OK\r\n:0\r\n" {
			t.Fatalf("pipelined %v: SET, WAIT on Redis with the replica stopped: %q, want WAIT's :0", pipelined, got[0])
		}
		if got[1] != got[0] {
			t.Errorf("pipelined %v: SET, WAIT through rproxy with the replica stopped: %q, want %q as on Redis", pipelined, got[1], got[0])
		}
	}
}

// TestClusterWaitGoesToTheLastWritesMaster: WAIT has no key, and went to
// any master, whose replicas (up) it counted, where the client's write
// went to another master whose replica had stopped. It now goes to the
// master of the session's last write, which a client that sees one node
// means. For each master: its replica stopped, a SET of a key of its
// slots, then WAIT must time out with 0, as on that master directly.
func TestClusterWaitGoesToTheLastWritesMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	p := startClusterProxy(t, cl)
	for _, m := range cl.Masters() {
		var replica *redistest.ClusterNode
		for _, r := range cl.Replicas() {
			if r.Master == m {
				replica = r
			}
		}
		if replica == nil {
			t.Fatalf("no replica of %v", m)
		}
		key := ""
		for i := 0; key == ""; i++ {
			if k := "w" + strconv.Itoa(i); cl.MasterForSlot(t, cl.Slot(k)) == m {
				key = k
			}
		}
		side := dialClient(t, m.Addr)
		side.do("SET", key, "before")
		if r := side.do("WAIT", "1", "5000"); r != ":1\r\n" { // the replica has everything so far
			t.Fatalf("WAIT on %v with its replica up: %q", m, r)
		}
		replica.Pause()
		c := dialClient(t, p.Addr)
		got := c.pipeline([]string{"SET", key, "v"}, []string{"WAIT", "1", "200"})
		replica.Resume()
		if got != "+OK\r\n:0\r\n" {
			t.Errorf("SET %s (on %v, its replica stopped), WAIT 1 200 through rproxy: %q, want WAIT's :0 as on that master", key, m, got)
		}
	}
}
