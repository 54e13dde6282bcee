package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestClusterStart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3, 0)
	t.Logf("3 masters ready in %v", time.Since(start))

	if len(c.Nodes) != 3 || len(c.Masters()) != 3 || len(c.Replicas()) != 0 {
		t.Fatalf("nodes %d, masters %d, replicas %d; want 3, 3, 0", len(c.Nodes), len(c.Masters()), len(c.Replicas()))
	}
	if seeds := c.Seeds(); len(seeds) != 3 || seeds[0] != c.Nodes[0].Addr {
		t.Fatalf("Seeds() = %v", seeds)
	}
	ids := map[string]bool{}
	for _, n := range c.Nodes {
		if len(n.ID) != 40 || ids[n.ID] {
			t.Fatalf("bad or duplicate node id %q", n.ID)
		}
		ids[n.ID] = true
		if _, err := os.Stat(filepath.Join(n.Dir, "nodes.conf")); err != nil {
			t.Fatalf("cluster config file not in the node's dir: %v", err)
		}
		info := string(n.Do(t, "CLUSTER", "INFO"))
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(info, want+"\r\n") {
				t.Fatalf("%s: CLUSTER INFO lacks %q:\n%s", n, want, info)
			}
		}
	}
	// Every node gives the same CLUSTER SLOTS, byte for byte, and the slots
	// are spread evenly over the masters in Nodes order.
	ref := string(c.Nodes[0].Do(t, "CLUSTER", "SLOTS"))
	for _, n := range c.Nodes[1:] {
		if got := string(n.Do(t, "CLUSTER", "SLOTS")); got != ref {
			t.Fatalf("CLUSTER SLOTS differ:\n%s: %q\n%s: %q", c.Nodes[0], ref, n, got)
		}
	}
	for slot, want := range map[int]int{0: 0, 5460: 0, 5461: 1, 10921: 1, 10922: 2, 16383: 2} {
		if got := c.MasterForSlot(t, slot); got != c.Nodes[want] {
			t.Errorf("MasterForSlot(%d) = %s, want %s", slot, got, c.Nodes[want])
		}
	}
}

func TestClusterStartWithReplicas(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3, 1)
	t.Logf("3 masters + 3 replicas ready in %v", time.Since(start))

	if len(c.Masters()) != 3 || len(c.Replicas()) != 3 {
		t.Fatalf("masters %d, replicas %d; want 3, 3", len(c.Masters()), len(c.Replicas()))
	}
	for i, r := range c.Replicas() {
		if r.Master != c.Nodes[i] {
			t.Fatalf("replica %s: master %v, want %s", r, r.Master, c.Nodes[i])
		}
		info := string(r.Do(t, "INFO", "replication"))
		for _, want := range []string{"role:slave", "master_port:" + strconv.Itoa(r.Master.Port), "master_link_status:up"} {
			if !strings.Contains(info, want+"\r\n") {
				t.Fatalf("%s: INFO replication lacks %q:\n%s", r, want, info)
			}
		}
	}
	// Every node was given its own config epoch, replicas included, and
	// none was bumped by a collision: the current epoch is the highest
	// given, and each master keeps the one it was given.
	for _, n := range c.Nodes {
		if info := string(n.Do(t, "CLUSTER", "INFO")); !strings.Contains(info, "\r\ncluster_current_epoch:6\r\n") {
			t.Errorf("%s: CLUSTER INFO:\n%s", n, info)
		}
		_, _, epochs, err := c.clusterNodes(n)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range c.Nodes[:3] {
			if epochs[m.ID] != strconv.Itoa(i+1) {
				t.Errorf("%s sees master %s at configEpoch %s, want %d", n, m, epochs[m.ID], i+1)
			}
		}
	}
}

func TestClusterSlot(t *testing.T) {
	t.Parallel()
	// Extra args override the harness's defaults.
	c := StartCluster(t, 1, 0, "--cluster-node-timeout", "3000")
	n := c.Nodes[0]
	wantReply(t, n.Server, "*2\r\n$20\r\ncluster-node-timeout\r\n$4\r\n3000\r\n", "CONFIG", "GET", "cluster-node-timeout")
	wantReply(t, n.Server, "*2\r\n$12\r\ncluster-port\r\n"+bulk(strconv.Itoa(n.BusPort)), "CONFIG", "GET", "cluster-port")

	// The reference value of CRC-16/XMODEM.
	if got := CRC16("123456789"); got != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#x, want 0x31c3", got)
	}
	keys := []string{"", "{}", "{a", "a}", "}{", "a{b}c", "{b}{c}", "{}{c}", "{{b}}", "x{}y{z}", "foo", "{user1000}.following", "{user1000}.followers", "\x00{\xff}"}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const alphabet = "ab{}{}\x00\xff9"
	for range 400 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		keys = append(keys, string(b))
	}
	cmds := make([][]string, len(keys))
	for i, k := range keys {
		cmds[i] = []string{"CLUSTER", "KEYSLOT", k}
	}
	replies, err := execMulti(n.Addr, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if want := fmt.Sprintf(":%d\r\n", c.Slot(k)); string(replies[i]) != want {
			t.Errorf("key %q: CLUSTER KEYSLOT says %q, Slot says %q", k, replies[i], want)
		}
	}
}

func TestClusterReadWrite(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 1)
	for i := range 30 {
		key, val := "key:"+strconv.Itoa(i), "val"+strconv.Itoa(i)
		slot := c.Slot(key)
		m := c.MasterForSlot(t, slot)
		wantReply(t, m.Server, "+OK\r\n", "SET", key, val)
		wantReply(t, m.Server, fmt.Sprintf("$%d\r\n%s\r\n", len(val), val), "GET", key)
		// Any other master redirects to the owner.
		for _, o := range c.Masters() {
			if o != m {
				wantReply(t, o.Server, fmt.Sprintf("-MOVED %d %s\r\n", slot, m.Addr), "GET", key)
			}
		}
		// The replica gets the write (WAIT) and serves it after READONLY.
		wantReply(t, m.Server, ":1\r\n", "WAIT", "1", "5000")
		var replica *ClusterNode
		for _, r := range c.Replicas() {
			if r.Master == m {
				replica = r
			}
		}
		replies, err := execMulti(replica.Addr, []string{"READONLY"}, []string{"GET", key})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(replies[1]); got != fmt.Sprintf("$%d\r\n%s\r\n", len(val), val) {
			t.Fatalf("replica %s: GET %s after READONLY = %q", replica, key, got)
		}
	}
}

// fillSlot stores n keys sharing a hash tag and returns them; all are in
// c.Slot(keys[0]).
func fillSlot(t *testing.T, c *Cluster, tag string, n int) []string {
	t.Helper()
	m := c.MasterForSlot(t, c.Slot(tag))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("{%s}:%d", tag, i)
		wantReply(t, m.Server, "+OK\r\n", "SET", keys[i], "v"+keys[i])
	}
	return keys
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

func TestClusterMigrateSlot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0)
	const nkeys = 250 // more than one MIGRATE batch
	keys := fillSlot(t, c, "mig", nkeys)
	slot := c.Slot(keys[0])
	from := c.MasterForSlot(t, slot)
	to := c.Nodes[(slices.Index(c.Nodes, from)+1)%3]

	start := time.Now()
	c.MigrateSlot(t, slot, to)
	t.Logf("slot %d with %d keys migrated in %v", slot, nkeys, time.Since(start))

	if got := c.MasterForSlot(t, slot); got != to {
		t.Fatalf("after MigrateSlot: MasterForSlot = %s, want %s", got, to)
	}
	wantReply(t, to.Server, fmt.Sprintf(":%d\r\n", nkeys), "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot))
	wantReply(t, from.Server, ":0\r\n", "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot))
	for _, k := range keys {
		wantReply(t, to.Server, bulk("v"+k), "GET", k)
		wantReply(t, from.Server, fmt.Sprintf("-MOVED %d %s\r\n", slot, to.Addr), "GET", k)
	}
	// Every node agrees, including the master that took no part.
	for _, n := range c.Nodes {
		if got := c.ownerSeenBy(t, n, slot); got != to.ID {
			t.Fatalf("%s thinks slot %d is served by %s", n, slot, got)
		}
	}
	// Neighbouring slots did not move.
	for _, s := range []int{slot - 1, slot + 1} {
		if s >= 0 && s < NumSlots {
			if got := c.MasterForSlot(t, s); got != from {
				t.Fatalf("slot %d moved too: served by %s", s, got)
			}
		}
	}
}

func (c *Cluster) ownerSeenBy(t *testing.T, n *ClusterNode, slot int) string {
	t.Helper()
	slots, err := c.clusterSlots(n)
	if err != nil {
		t.Fatal(err)
	}
	return ownerOf(slots, slot)
}

func TestClusterMigrationAsk(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0)
	keys := fillSlot(t, c, "ask", 10)
	slot := c.Slot(keys[0])
	to := c.Nodes[(slices.Index(c.Nodes, c.MasterForSlot(t, slot))+2)%3]

	m := c.BeginMigration(t, slot, to)
	from := m.From
	if m.Slot != slot || m.To != to || from == to {
		t.Fatalf("Migration = %+v", m)
	}
	if got := m.MoveKeys(t, 3); got != 3 {
		t.Fatalf("MoveKeys(3) = %d", got)
	}
	wantReply(t, from.Server, ":7\r\n", "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot))
	ask := fmt.Sprintf("-ASK %d %s\r\n", slot, to.Addr)
	var moved, kept int
	for _, k := range keys {
		if string(from.Do(t, "EXISTS", k)) == ":1\r\n" {
			// Still on the source, which serves it as usual.
			kept++
			wantReply(t, from.Server, bulk("v"+k), "GET", k)
			continue
		}
		moved++
		wantReply(t, from.Server, ask, "GET", k)
		// The target serves it only to a client that sent ASKING.
		wantReply(t, to.Server, fmt.Sprintf("-MOVED %d %s\r\n", slot, from.Addr), "GET", k)
		replies, err := execMulti(to.Addr, []string{"ASKING"}, []string{"GET", k})
		if err != nil {
			t.Fatal(err)
		}
		if string(replies[0]) != "+OK\r\n" || string(replies[1]) != bulk("v"+k) {
			t.Fatalf("ASKING + GET %s on the target: %q", k, replies)
		}
	}
	if moved != 3 || kept != 7 {
		t.Fatalf("moved %d, kept %d; want 3, 7", moved, kept)
	}
	// A new key of the slot goes to the target too.
	wantReply(t, from.Server, ask, "SET", "{ask}:new", "x")

	if got := m.MoveKeys(t, 0); got != 7 {
		t.Fatalf("MoveKeys(0) = %d, want the 7 remaining keys", got)
	}
	if got := m.MoveKeys(t, 5); got != 0 {
		t.Fatalf("MoveKeys on an empty slot = %d", got)
	}
	m.Finish(t)
	for _, k := range keys {
		wantReply(t, to.Server, bulk("v"+k), "GET", k)
		wantReply(t, from.Server, fmt.Sprintf("-MOVED %d %s\r\n", slot, to.Addr), "GET", k)
	}
	if got := c.MasterForSlot(t, slot); got != to {
		t.Fatalf("after Finish: MasterForSlot = %s, want %s", got, to)
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 1)
	keys := fillSlot(t, c, "fo", 20)
	slot := c.Slot(keys[0])
	victim := c.MasterForSlot(t, slot)
	wantReply(t, victim.Server, ":1\r\n", "WAIT", "1", "5000") // the replica has the keys
	var replica *ClusterNode
	for _, r := range c.Replicas() {
		if r.Master == victim {
			replica = r
		}
	}

	promoted, took := c.Failover(t, victim)
	t.Logf("failover of %s took %v", victim.Addr, took)

	if promoted != replica {
		t.Fatalf("promoted %s, want the victim's replica %s", promoted, replica)
	}
	if victim.Pid() != 0 {
		t.Fatal("the old master is still running")
	}
	if !promoted.IsMaster() || len(c.Masters()) != 3 || len(c.Replicas()) != 2 || !slices.Contains(c.Masters(), promoted) || slices.Contains(c.Masters(), victim) {
		t.Fatalf("roles after failover: masters %v, replicas %v", c.Masters(), c.Replicas())
	}
	if got := string(promoted.Do(t, "ROLE")); !strings.HasPrefix(got, "*3\r\n$6\r\nmaster\r\n") {
		t.Fatalf("ROLE on the promoted node: %q", got)
	}
	if got := c.MasterForSlot(t, slot); got != promoted {
		t.Fatalf("MasterForSlot(%d) = %s, want %s", slot, got, promoted)
	}
	for _, n := range c.Nodes {
		if n == victim {
			continue
		}
		if info := string(n.Do(t, "CLUSTER", "INFO")); !strings.Contains(info, "cluster_state:ok\r\n") {
			t.Fatalf("%s after failover:\n%s", n, info)
		}
		if got := c.ownerSeenBy(t, n, slot); got != promoted.ID {
			t.Fatalf("%s thinks slot %d is served by %s", n, slot, got)
		}
	}
	for _, k := range keys {
		wantReply(t, promoted.Server, bulk("v"+k), "GET", k)
	}
	wantReply(t, promoted.Server, "+OK\r\n", "SET", keys[0], "after")
	c.WaitStable(t)
}

// TestClusterAddMaster: a master added to a running cluster is known to
// every node, owns nothing until a slot is moved to it, then serves it.
func TestClusterAddMaster(t *testing.T) {
	c := StartCluster(t, 2, 0)
	n := c.AddMaster(t)
	if !n.IsMaster() || len(c.Masters()) != 3 {
		t.Fatalf("after AddMaster: %s, %d masters", n, len(c.Masters()))
	}
	c.MigrateSlot(t, 5, n)
	if got := c.MasterForSlot(t, 5); got != n {
		t.Fatalf("slot 5 served by %s, want the new master %s", got, n)
	}
}

// TestEpochsSettled: migrations wait until every node sees the same
// configEpoch for every master and no two masters share one.
func TestEpochsSettled(t *testing.T) {
	view := func(name string, epochs map[string]string) nodeView {
		return nodeView{node: &ClusterNode{Server: &Server{Addr: name}, ID: name}, masterEpochs: epochs}
	}
	settled := map[string]string{"a": "1", "b": "5", "c": "3"}
	for _, tc := range []struct {
		name  string
		views []nodeView
		ok    bool
	}{
		{"agreed", []nodeView{view("a", settled), view("b", settled), view("c", settled)}, true},
		{"one node behind", []nodeView{view("a", settled), view("b", map[string]string{"a": "1", "b": "4", "c": "3"}), view("c", settled)}, false},
		{"collision", []nodeView{view("a", map[string]string{"a": "1", "b": "3", "c": "3"})}, false},
		{"a master unknown to one node", []nodeView{view("a", settled), view("b", map[string]string{"a": "1", "b": "5"})}, false},
	} {
		if err := epochsSettled(tc.views); (err == nil) != tc.ok {
			t.Errorf("%s: epochsSettled = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestStartNodeRetriesTakenBusPort: a bus port taken between its pick and
// the start fails redis-server like a taken client port; startNode must
// pick both again rather than retry the taken bus port until start gives
// up (a failure CI met in TestClusterFailoverUnderLoad).
func TestStartNodeRetriesTakenBusPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	picks := 0
	c := &Cluster{busPort: func(tb testing.TB) int {
		picks++
		if picks == 1 {
			return taken
		}
		return FreePort(tb)
	}}
	n := c.startNode(t)
	if picks < 2 {
		t.Fatalf("bus port picked %d times; want a second pick after the taken port %d", picks, taken)
	}
	if n.BusPort == taken {
		t.Fatalf("node started with the taken bus port %d", taken)
	}
	wantReply(t, n.Server, "*2\r\n$12\r\ncluster-port\r\n"+bulk(strconv.Itoa(n.BusPort)), "CONFIG", "GET", "cluster-port")
}
