package upstream

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/resp"
)

// Replies captured from a Redis 7.0 cluster of three masters.
const (
	shardsReply = "*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n4138ab161bf128ccd9e647bd744e64e159c2b786\r\n$4\r\nport\r\n:17003\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n" +
		"*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n86db9c46589dc895fc496261aebf1dc24b18c10b\r\n$4\r\nport\r\n:17002\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n" +
		"*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:100\r\n:200\r\n:5460\r\n$5\r\nnodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n7ad7fbb0870803e691dee0103170339ab8e746ff\r\n$4\r\nport\r\n:17001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n" +
		"*14\r\n$2\r\nid\r\n$40\r\n9ad7fbb0870803e691dee0103170339ab8e746ff\r\n$4\r\nport\r\n:17004\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
	slotsReply = "*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:17001\r\n$40\r\n7ad7fbb0870803e691dee0103170339ab8e746ff\r\n*0\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$0\r\n\r\n:17002\r\n$40\r\n86db9c46589dc895fc496261aebf1dc24b18c10b\r\n*0\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:17003\r\n$40\r\n4138ab161bf128ccd9e647bd744e64e159c2b786\r\n*0\r\n"
)

func TestParseClusterShards(t *testing.T) {
	got, err := parseClusterShards([]byte(shardsReply), "10.0.0.9", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []shard{
		{master: "127.0.0.1:17003", ranges: [][2]int{{10923, 16383}}},
		{master: "127.0.0.1:17002", ranges: [][2]int{{5461, 10922}}}, // endpoint "?": the ip
		{master: "127.0.0.1:17001", ranges: [][2]int{{0, 100}, {200, 5460}}},
	}
	if !slices.EqualFunc(got, want, func(a, b shard) bool { return a.master == b.master && slices.Equal(a.ranges, b.ranges) }) {
		t.Errorf("got %v, want %v", got, want)
	}
	// A node's announced hostname (cluster-announce-hostname) is kept by
	// its address; the endpoint stays the address dialled.
	withName := strings.Replace(shardsReply, "*14\r\n$2\r\nid\r\n$40\r\n4138ab161bf128ccd9e647bd744e64e159c2b786\r\n",
		"*16\r\n$8\r\nhostname\r\n$13\r\nnode3.example\r\n$2\r\nid\r\n$40\r\n4138ab161bf128ccd9e647bd744e64e159c2b786\r\n", 1)
	got, err = parseClusterShards([]byte(withName), "10.0.0.9", false)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].master != "127.0.0.1:17003" || got[0].hostnames["127.0.0.1:17003"] != "node3.example" || got[1].hostnames["127.0.0.1:17002"] != "" {
		t.Errorf("with a hostname: %+v", got)
	}
}

func TestParseClusterSlots(t *testing.T) {
	got, err := parseClusterSlots([]byte(slotsReply), "10.0.0.9")
	if err != nil {
		t.Fatal(err)
	}
	want := []shard{
		{master: "127.0.0.1:17001", ranges: [][2]int{{0, 5460}}},
		{master: "10.0.0.9:17002", ranges: [][2]int{{5461, 10922}}}, // no ip: the host asked
		{master: "127.0.0.1:17003", ranges: [][2]int{{10923, 16383}}},
	}
	if !slices.EqualFunc(got, want, func(a, b shard) bool { return a.master == b.master && slices.Equal(a.ranges, b.ranges) }) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseRedirect(t *testing.T) {
	for _, c := range []struct {
		in   string
		kind string
		slot int
		addr string
		ok   bool
	}{
		{"-MOVED 3999 127.0.0.1:6381\r\n", "moved", 3999, "127.0.0.1:6381", true},
		{"-ASK 1 [::1]:7000\r\n", "ask", 1, "[::1]:7000", true},
		{"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", "tryagain", -1, "", true},
		{"-CLUSTERDOWN The cluster is down\r\n", "clusterdown", -1, "", true},
		{"-CLUSTERDOWN Hash slot not served\r\n", "clusterdown", -1, "", true},
		{"-CLUSTERDOWN The cluster is down, a script says\r\n", "", 0, "", false}, // not Redis's own: may follow writes
		{"-MOVED 3999 :6381\r\n", "", 0, "", false},                               // unknown endpoint
		{"-MOVED x 127.0.0.1:6381\r\n", "", 0, "", false},
		{"-MOVED\r\n", "", 0, "", false},
	} {
		kind, slot, addr, ok := parseRedirect([]byte(c.in))
		if kind != c.kind || slot != c.slot || addr != c.addr || ok != c.ok {
			t.Errorf("parseRedirect(%q) = %q %d %q %v", c.in, kind, slot, addr, ok)
		}
	}
}

// FuzzClusterReplies: the slot map and redirect parsers never panic on
// what a (broken) server might send, and what they accept is in range.
func FuzzClusterReplies(f *testing.F) {
	f.Add([]byte(shardsReply))
	f.Add([]byte(slotsReply))
	f.Add([]byte("-MOVED 1 a:1\r\n"))
	f.Add([]byte("*1\r\n*3\r\n:0\r\n:99999\r\n*2\r\n$1\r\na\r\n:1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func() ([]shard, error){
			func() ([]shard, error) { return parseClusterShards(b, "h", false) },
			func() ([]shard, error) { return parseClusterShards(b, "h", true) },
			func() ([]shard, error) { return parseClusterSlots(b, "h") },
		} {
			shards, err := parse()
			if err != nil {
				continue
			}
			for _, s := range shards {
				for _, r := range s.ranges {
					if r[0] < 0 || r[1] >= Slots || r[0] > r[1] {
						t.Fatalf("accepted range %v", r)
					}
				}
			}
		}
		parseRedirect(b)
	})
}

// fakeCluster is three scripted nodes: each announces the same slot map
// (thirds of the slots) in CLUSTER SHARDS, answers GET with its own name,
// and answers MOVED for the slots in its moved set, which truly belong to
// the node named there.
type fakeCluster struct {
	nodes []*fakeRedis
	names []string
	mu    sync.Mutex
	moved map[int]int // slot -> index of the node that now serves it
	// movedAddr: slot -> an address outside the three that every node
	// redirects the slot's GETs to.
	movedAddr map[int]string
	gets      []atomic.Int64
	// held, when set, holds every CLUSTER SHARDS answer until it is
	// closed, after saying on asked that a question came.
	held, asked chan struct{}
}

func startFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{names: []string{"A", "B", "C"}, moved: map[int]int{}, movedAddr: map[int]string{}, gets: make([]atomic.Int64, 3)}
	for i := range 3 {
		fc.nodes = append(fc.nodes, startFake(t, func(args [][]byte) string { return fc.reply(i, args) }))
	}
	return fc
}

func (fc *fakeCluster) owner(slot int) int { return slot * 3 / Slots }

func (fc *fakeCluster) reply(i int, args [][]byte) string {
	switch strings.ToUpper(string(args[0])) {
	case "CLUSTER":
		fc.mu.Lock()
		held, asked := fc.held, fc.asked
		fc.mu.Unlock()
		if held != nil {
			asked <- struct{}{}
			<-held
		}
		var b strings.Builder
		b.WriteString("*3\r\n")
		for j, n := range fc.nodes {
			host, port, _ := net.SplitHostPort(n.ln.Addr().String())
			lo, hi := j*Slots/3, (j+1)*Slots/3-1
			for fc.owner(lo) != j {
				lo++
			}
			for hi+1 < Slots && fc.owner(hi+1) == j {
				hi++
			}
			fmt.Fprintf(&b, "*4\r\n$5\r\nslots\r\n*2\r\n:%d\r\n:%d\r\n$5\r\nnodes\r\n*1\r\n*8\r\n$4\r\nport\r\n:%s\r\n$2\r\nip\r\n$%d\r\n%s\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
				lo, hi, port, len(host), host)
		}
		return b.String()
	case "GET":
		slot := Slot(args[1])
		fc.mu.Lock()
		to, isMoved := fc.moved[slot]
		addr := fc.movedAddr[slot]
		fc.mu.Unlock()
		if addr != "" {
			return fmt.Sprintf("-MOVED %d %s\r\n", slot, addr)
		}
		if isMoved && to != i {
			return fmt.Sprintf("-MOVED %d %s\r\n", slot, fc.nodes[to].ln.Addr())
		}
		fc.gets[i].Add(1)
		return "$1\r\n" + fc.names[i] + "\r\n"
	}
	return "+OK\r\n"
}

func testCluster(t *testing.T, fc *fakeCluster) (*Cluster, *Metrics) {
	t.Helper()
	m := NewMetrics(nil)
	c, err := NewCluster(Config{Connections: 1, DialTimeout: time.Second, Timeout: time.Second,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		ClusterConfig{Seeds: []string{fc.nodes[0].ln.Addr().String()}, Refresh: time.Hour}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(5 * time.Second)
	for !c.Router(2).Ready() {
		if time.Now().After(deadline) {
			t.Fatal("cluster not ready after 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	return c, m
}

// TestRouterRoutesSplitsAndFollowsMoved: each command of a batch reaches
// its slot's master, replies come back in the batch's order, and a MOVED
// is followed and corrects the map so the next command goes straight to
// the new owner.
func TestRouterRoutesSplitsAndFollowsMoved(t *testing.T) {
	fc := startFakeCluster(t)
	c, m := testCluster(t, fc)
	r := c.Router(2)
	b := NewBatch()
	var want []string
	for i := range 48 {
		k := []byte(fmt.Sprintf("key:%d", i))
		b.AddSlot(resp.AppendCommand(nil, []byte("GET"), k), Slot(k))
		want = append(want, "$1\r\n"+fc.names[fc.owner(Slot(k))]+"\r\n")
	}
	r.Do(b)
	for i := range want {
		if got := string(b.Reply(i)); got != want[i] {
			t.Fatalf("reply %d: %q, want %q", i, got, want[i])
		}
	}
	// The slot of "moving" now belongs to the next node.
	k := []byte("moving")
	slot := Slot(k)
	to := (fc.owner(slot) + 1) % 3
	fc.mu.Lock()
	fc.moved[slot] = to
	fc.mu.Unlock()
	for range 3 {
		b.Reset()
		b.AddSlot(resp.AppendCommand(nil, []byte("GET"), k), slot)
		r.Do(b)
		if got, want := string(b.Reply(0)), "$1\r\n"+fc.names[to]+"\r\n"; got != want {
			t.Fatalf("GET after the slot moved: %q, want %q", got, want)
		}
	}
	var moved dto.Metric
	if err := m.redirects.WithLabelValues("moved").Write(&moved); err != nil {
		t.Fatal(err)
	}
	if n := moved.GetCounter().GetValue(); n != 1 {
		t.Errorf("MOVED followed %v times, want 1 (the map is corrected by the first)", n)
	}
}

// TestClusterRetiresNodesLeftOutOfTheMap: a node the slot map no longer
// names (a replaced master) keeps its connections for retireAfter-1 map
// reads, then they are closed and stop reconnecting; a seed is kept; the
// masters in the map are never touched; a retired address that comes back
// gets new connections.
func TestClusterRetiresNodesLeftOutOfTheMap(t *testing.T) {
	fc := startFakeCluster(t)
	gone := startFake(t, func([][]byte) string { return "+OK\r\n" })
	seed := startFake(t, func([][]byte) string { return "+OK\r\n" })
	c, _ := testCluster(t, fc)
	c.mu.Lock()
	c.seeds[seed.ln.Addr().String()] = true
	c.mu.Unlock()
	goneAt, err := c.node(gone.ln.Addr().String()) // as if it had been a master
	if err != nil {
		t.Fatal(err)
	}
	seedAt, err := c.node(seed.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	pool := func(i int32) *Pool { return (*c.nodes.Load())[i].pools[2] }
	waitReady := func(p *Pool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !p.Ready() {
			if time.Now().After(deadline) {
				t.Fatal("pool not connected after 5s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitReady(pool(goneAt))
	ctx := context.Background()
	for i := 1; i < retireAfter; i++ {
		if err := c.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if !pool(goneAt).Ready() {
			t.Fatalf("the node's connections were closed after %d map reads left it out, want %d", i, retireAfter)
		}
	}
	if err := c.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if pool(goneAt).Ready() {
		t.Fatalf("the node's connections are still up after %d map reads left it out", retireAfter)
	}
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "PING"))
	pool(goneAt).Do(b) // stale routing to it fails at once
	if got := string(b.Reply(0)); !strings.HasPrefix(got, "-ERR upstream unavailable") {
		t.Fatalf("a command to the retired node got %q", got)
	}
	gone.mu.Lock()
	conns := len(gone.conns)
	gone.mu.Unlock()
	for range 2 * retireAfter {
		if err := c.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // two reconnect backoffs of the test pools
	gone.mu.Lock()
	if len(gone.conns) != conns {
		t.Errorf("the retired node was dialled again (%d connections, had %d)", len(gone.conns), conns)
	}
	gone.mu.Unlock()
	if !pool(seedAt).Ready() {
		t.Error("a seed left out of the map was retired")
	}
	for _, a := range c.MasterAddrs() {
		i, _ := c.node(a)
		if !pool(i).Ready() {
			t.Errorf("master %s in the map lost its connections", a)
		}
	}
	back, err := c.node(gone.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if back == goneAt {
		t.Fatal("a retired address came back on its closed pools")
	}
	waitReady(pool(back))
}

// TestClusterRetiresOnlyNodesOlderThanTheMap: a node made while a slot
// map read was out (a MOVED naming it, say) is not counted as left out by
// that read, whose map may be older than the node. It was: a lookup racing
// the first read made the node count once more than the reads that saw it.
func TestClusterRetiresOnlyNodesOlderThanTheMap(t *testing.T) {
	fc := startFakeCluster(t)
	late := startFake(t, func([][]byte) string { return "+OK\r\n" })
	c, _ := testCluster(t, fc)
	fc.mu.Lock()
	fc.held, fc.asked = make(chan struct{}), make(chan struct{}, 1)
	fc.mu.Unlock()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- c.refresh(ctx) }()
	<-fc.asked // the read is out
	lateAt, err := c.node(late.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	pool := (*c.nodes.Load())[lateAt].pools[2]
	for deadline := time.Now().Add(5 * time.Second); !pool.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node's pool not connected after 5s")
		}
	}
	fc.mu.Lock()
	close(fc.held)
	fc.held = nil
	fc.mu.Unlock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := 1; i < retireAfter; i++ {
		if err := c.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !pool.Ready() {
		t.Fatalf("the node was retired after %d reads made after it, want %d", retireAfter-1, retireAfter)
	}
	if err := c.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if pool.Ready() {
		t.Fatalf("the node is not retired after %d reads left it out", retireAfter)
	}
}

// TestClusterMasterUpGauge: one series per master of the slot map, by
// address, 1 while its pool is connected and 0 once its server is gone.
func TestClusterMasterUpGauge(t *testing.T) {
	fc := startFakeCluster(t)
	c, _ := testCluster(t, fc)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.MasterCollector())
	up := func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	got := up()
	if len(got) != 3 {
		t.Fatalf("series %v, want one per master", got)
	}
	for _, n := range fc.nodes {
		if got[n.ln.Addr().String()] != 1 {
			t.Fatalf("master %s: %v, want 1 (connected)", n.ln.Addr(), got)
		}
	}
	gone := fc.nodes[1].ln.Addr().String()
	fc.nodes[1].close()
	deadline := time.Now().Add(5 * time.Second)
	for up()[gone] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("master %s still reported connected 5s after its server closed: %v", gone, up())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkRouterDo: batches of 16 GETs over keys of all three masters
// (the split path) and of one slot (the single-master path), from 8
// goroutines, against scripted nodes.
func BenchmarkRouterDo(b *testing.B) {
	t := &testing.T{}
	fc := startFakeCluster(t)
	defer func() {
		for _, n := range fc.nodes {
			n.close()
		}
	}()
	c, _ := testCluster(t, fc)
	defer c.Close()
	r := c.Router(2)
	for _, spread := range []bool{false, true} {
		b.Run(fmt.Sprintf("spread=%v", spread), func(b *testing.B) {
			var cmds [][]byte
			var slots []int
			for i := range 16 {
				k := []byte(fmt.Sprintf("{tag}%d", i))
				if spread {
					k = []byte(fmt.Sprintf("key:%d", i))
				}
				cmds = append(cmds, resp.AppendCommand(nil, []byte("GET"), k))
				slots = append(slots, Slot(k))
			}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				batch := NewBatch()
				for pb.Next() {
					batch.Reset()
					for i, cmd := range cmds {
						batch.AddSlot(cmd, slots[i])
					}
					r.Do(batch)
				}
			})
		})
	}
}

// TestMapReadOlderThanAMovedKeepsIt: a slot map read that began before a
// MOVED (the slot moved again meanwhile) does not put the slot back where
// the read saw it; a read that began after the MOVED installs what it
// read. Before 2026-11-29 the older read won until the next one, and a
// stream-mode session's command of a slot that had moved twice got
// rproxy's "another master" error (TestClusterShardChannelsRandomSequences).
func TestMapReadOlderThanAMovedKeepsIt(t *testing.T) {
	fc := startFakeCluster(t)
	c, _ := testCluster(t, fc)
	slot := Slot([]byte("moving"))
	from := c.Owner(slot)
	addr := func(i int) string { return fc.nodes[i].ln.Addr().String() }
	var old []shard // the map as a read that began now sees it
	for i := range fc.nodes {
		sh := shard{master: addr(i)}
		for s := range Slots {
			if fc.owner(s) == i {
				sh.ranges = append(sh.ranges, [2]int{s, s})
			}
		}
		old = append(old, sh)
	}
	since := c.learnSeq.Load()
	to := (from + 1) % len(fc.nodes)
	c.NoteMoved([]byte(fmt.Sprintf("-MOVED %d %s\r\n", slot, addr(to))))
	if got := c.MasterAddr(slot); got != addr(to) {
		t.Fatalf("after the MOVED: slot %d on %s, want %s", slot, got, addr(to))
	}
	if err := c.install(old, addr(0), int32(len(fc.nodes)), since); err != nil {
		t.Fatal(err)
	}
	if got := c.MasterAddr(slot); got != addr(to) {
		t.Fatalf("after a map read older than the MOVED: slot %d on %s, want %s", slot, got, addr(to))
	}
	if err := c.install(old, addr(0), int32(len(fc.nodes)), c.learnSeq.Load()); err != nil {
		t.Fatal(err)
	}
	if got := c.MasterAddr(slot); got != addr(from) {
		t.Fatalf("after a map read newer than the MOVED: slot %d on %s, want %s", slot, got, addr(from))
	}
}

// The announced hostnames are those of the last map read: an address the
// map no longer names loses its hostname, so the map of them does not
// grow with every node a cluster ever had.
func TestAnnouncedHostnamesFollowTheMap(t *testing.T) {
	fc := startFakeCluster(t)
	c, _ := testCluster(t, fc)
	hostname := func(addr string) string {
		v, _ := c.hostnames.Load(addr)
		s, _ := v.(string)
		return s
	}
	c.noteHostnames([]shard{{master: "10.0.0.1:6379", hostnames: map[string]string{"10.0.0.1:6379": "a.example", "10.0.0.2:6379": "b.example"}}})
	if hostname("10.0.0.1:6379") != "a.example" || hostname("10.0.0.2:6379") != "b.example" {
		t.Fatalf("hostnames not kept: %q, %q", hostname("10.0.0.1:6379"), hostname("10.0.0.2:6379"))
	}
	c.noteHostnames([]shard{{master: "10.0.0.1:6379", hostnames: map[string]string{"10.0.0.1:6379": "a2.example"}}})
	if hostname("10.0.0.1:6379") != "a2.example" {
		t.Errorf("hostname of a node still named = %q, want the new one", hostname("10.0.0.1:6379"))
	}
	if _, ok := c.hostnames.Load("10.0.0.2:6379"); ok {
		t.Error("a node the map no longer names kept its hostname")
	}
}
