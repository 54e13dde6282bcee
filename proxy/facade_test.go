package proxy_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// render writes a reply as its kinds and values, without length headers,
// so that a reply can be compared with another after names are replaced.
func render(t *testing.T, raw string) string {
	t.Helper()
	v, err := resp.Parse([]byte(raw))
	if err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	var b strings.Builder
	var walk func(v resp.Value)
	walk = func(v resp.Value) {
		switch v.Kind {
		case '*', '%', '~', '>':
			fmt.Fprintf(&b, "%c[", v.Kind)
			for _, e := range v.Elems {
				walk(e)
				b.WriteByte(' ')
			}
			b.WriteByte(']')
		case ':':
			fmt.Fprintf(&b, ":(%d)", v.Int)
		default:
			fmt.Fprintf(&b, "%c(%s)", v.Kind, v.Str)
		}
	}
	walk(v)
	return b.String()
}

// TestClusterFacade: with a cluster upstream, CLUSTER SLOTS, SHARDS,
// NODES, INFO and MYID through rproxy are what a one-node Redis 7.0
// cluster owning every slot sends, in RESP2 and RESP3, with rproxy's
// address (the one the client connected to, or the announce address) and
// its own id; KEYSLOT is Redis's; COUNTKEYSINSLOT is the slot's master's.
func TestClusterFacade(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	ref := redistest.StartCluster(t, 1, 0, "--cluster-announce-ip", "127.0.0.1").Nodes[0]

	host, portStr, _ := net.SplitHostPort(p.Addr)
	for _, proto := range []string{"2", "3"} {
		c := dialClient(t, p.Addr)
		r := dialClient(t, ref.Addr)
		c.do("HELLO", proto)
		r.do("HELLO", proto)
		ourID := strings.TrimSpace(strings.SplitN(c.do("CLUSTER", "MYID"), "\r\n", 3)[1])
		if len(ourID) != 40 || ourID == ref.ID {
			t.Fatalf("CLUSTER MYID %q: want 40 hex digits of rproxy's own", ourID)
		}
		norm := strings.NewReplacer(
			ref.ID, ourID,
			fmt.Sprintf("127.0.0.1:%d@%d", ref.Port, ref.BusPort), host+":"+portStr+"@0",
			fmt.Sprintf(":(%d)", ref.Port), ":("+portStr+")",
			" 0 0 1 connected", " 0 0 0 connected", // the test cluster's config epoch
			"cluster_current_epoch:1", "cluster_current_epoch:0",
			"cluster_my_epoch:1", "cluster_my_epoch:0",
		)
		for _, sub := range []string{"SLOTS", "SHARDS", "NODES", "INFO", "MYID"} {
			want := norm.Replace(render(t, r.do("CLUSTER", sub)))
			if got := render(t, c.do("CLUSTER", sub)); got != want {
				t.Errorf("RESP%s CLUSTER %s:\n got %s\nwant %s", proto, sub, got, want)
			}
		}
		for _, args := range [][]string{
			{"CLUSTER", "KEYSLOT", "foo"}, {"CLUSTER", "KEYSLOT", "{user1000}.following"}, {"CLUSTER", "KEYSLOT"},
			{"CLUSTER", "COUNTKEYSINSLOT", "99999"}, {"CLUSTER", "COUNTKEYSINSLOT", "x"}, {"CLUSTER", "NOPE"},
		} {
			if got, want := c.do(args...), r.do(args...); got != want {
				t.Errorf("RESP%s %v: %q, want Redis's %q", proto, args, got, want)
			}
		}
		if got := c.do("CLUSTER", "HELP"); !strings.HasPrefix(got, "*") {
			t.Errorf("CLUSTER HELP: %q, want Redis's help", got)
		}
	}

	// COUNTKEYSINSLOT and GETKEYSINSLOT: the slot's master answers.
	c := dialClient(t, p.Addr)
	for i := range 5 {
		c.do("SET", "{tag}"+strconv.Itoa(i), "v")
	}
	slot := strconv.Itoa(upstream.Slot([]byte("tag")))
	if got := c.do("CLUSTER", "COUNTKEYSINSLOT", slot); got != ":5\r\n" {
		t.Errorf("CLUSTER COUNTKEYSINSLOT %s: %q, want :5", slot, got)
	}
	if got := c.do("CLUSTER", "GETKEYSINSLOT", slot, "10"); !strings.HasPrefix(got, "*5\r\n") {
		t.Errorf("CLUSTER GETKEYSINSLOT %s 10: %q, want 5 keys", slot, got)
	}

	// Inside MULTI rproxy's own answers are refused (Redis would run them at EXEC).
	c.send(resp.AppendCommandString(resp.AppendCommandString(resp.AppendCommandString(nil, "MULTI"), "CLUSTER", "SLOTS"), "EXEC"))
	if got := []string{string(c.read()), string(c.read()), string(c.read())}; got[0] != "+OK\r\n" ||
		!strings.HasPrefix(got[1], "-ERR rproxy: CLUSTER SLOTS inside MULTI") || !strings.HasPrefix(got[2], "-EXECABORT") {
		t.Errorf("MULTI, CLUSTER SLOTS, EXEC: %q", got)
	}

	// INFO's # Proxy section shows the topology; PROXY INFO NODES gives
	// every master's own INFO.
	info := c.do("INFO", "proxy")
	for _, want := range []string{"upstream_mode:cluster\r\n", "cluster_masters:3\r\n", "cluster_masters_up:3\r\n",
		"cluster_slots_assigned:16384\r\n", "cluster_slot_map_age_ms:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO proxy lacks %q:\n%s", want, info)
		}
	}
	for _, m := range cl.Masters() {
		if !strings.Contains(info, "addr="+m.Addr+",state=up\r\n") {
			t.Errorf("INFO proxy does not list master %s as up:\n%s", m.Addr, info)
		}
	}
	v, err := resp.Parse([]byte(c.do("PROXY", "INFO", "NODES", "server")))
	if err != nil || len(v.Elems) != 3 {
		t.Fatalf("PROXY INFO NODES server: %d elements, %v", len(v.Elems), err)
	}
	seen := map[string]bool{}
	for _, e := range v.Elems {
		addr := string(e.Elems[0].Str)
		_, port, _ := net.SplitHostPort(addr)
		if !strings.Contains(string(e.Elems[1].Str), "tcp_port:"+port+"\r\n") {
			t.Errorf("PROXY INFO NODES: the INFO given for %s is not that node's", addr)
		}
		seen[addr] = true
	}
	for _, m := range cl.Masters() {
		if !seen[m.Addr] {
			t.Errorf("PROXY INFO NODES lacks master %s: %v", m.Addr, seen)
		}
	}

	// A configured announce address is what clients are given.
	pa := startClusterProxy(t, cl, func(c *proxy.Config) { c.ClusterAnnounce = "10.1.2.3:7000" })
	ca := dialClient(t, pa.Addr)
	if got := ca.do("CLUSTER", "SLOTS"); !strings.Contains(got, "$8\r\n10.1.2.3\r\n:7000\r\n") {
		t.Errorf("CLUSTER SLOTS with announce 10.1.2.3:7000: %q", got)
	}
	if got := ca.do("CLUSTER", "NODES"); !strings.Contains(got, " 10.1.2.3:7000@0 myself,master - 0 0 0 connected 0-16383\n") {
		t.Errorf("CLUSTER NODES with announce 10.1.2.3:7000: %q", got)
	}
}

// TestClusterFacadeInStreamMode: a session in stream mode (client
// tracking in RESP2 or RESP3, pub/sub in RESP3) still gets the facade's
// topology from CLUSTER SLOTS, SHARDS, NODES, INFO, MYID and KEYSLOT, not
// the master's its commands go to. Before, these went to that master, and
// a cluster-mode client that turns tracking on as it connects (rueidis)
// was given the real nodes and connected to them past rproxy. Inside MULTI
// they are refused, as outside stream mode; in RESP2's subscribed mode
// Redis's own refusal comes, as from a node.
func TestClusterFacadeInStreamMode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	subs := []string{"SLOTS", "SHARDS", "NODES", "INFO", "MYID"}
	for _, mode := range []struct {
		name  string
		proto string
		enter []string
	}{
		{"RESP2 tracking", "2", []string{"CLIENT", "TRACKING", "ON"}},
		{"RESP3 tracking", "3", []string{"CLIENT", "TRACKING", "ON"}},
		{"RESP3 tracking optin", "3", []string{"CLIENT", "TRACKING", "ON", "OPTIN"}},
		{"RESP3 pub/sub", "3", []string{"SUBSCRIBE", "facade-ch"}},
	} {
		c := dialClient(t, p.Addr)
		c.do("HELLO", mode.proto)
		want := map[string]string{}
		for _, sub := range subs {
			want[sub] = c.do("CLUSTER", sub)
		}
		if !strings.Contains(want["SLOTS"], p.Addr[strings.LastIndex(p.Addr, ":")+1:]) {
			t.Fatalf("%s: CLUSTER SLOTS outside stream mode does not give rproxy's port: %q", mode.name, want["SLOTS"])
		}
		c.do(mode.enter...)
		if got := c.do("CLIENT", "TRACKINGINFO"); mode.enter[0] == "CLIENT" && !strings.Contains(got, "on") {
			t.Fatalf("%s: tracking is not on: %q", mode.name, got)
		}
		for _, sub := range subs {
			if got := c.do("CLUSTER", sub); got != want[sub] {
				t.Errorf("%s: CLUSTER %s in stream mode: %q, want the facade's %q", mode.name, sub, got, want[sub])
			}
		}
		for _, m := range cl.Masters() {
			_, port, _ := net.SplitHostPort(m.Addr)
			if got := c.do("CLUSTER", "SLOTS"); strings.Contains(got, ":"+port+"\r\n") {
				t.Errorf("%s: CLUSTER SLOTS names master %s: %q", mode.name, m.Addr, got)
			}
		}
		if got, want := c.do("CLUSTER", "KEYSLOT", "foo"), ":12182\r\n"; got != want {
			t.Errorf("%s: CLUSTER KEYSLOT foo: %q, want %q", mode.name, got, want)
		}
		// A command of the master's own still works on the connection.
		if got := c.do("GET", "{facade-ch}k"); !strings.HasPrefix(got, "$-1") && !strings.HasPrefix(got, "_") && !strings.HasPrefix(got, "-ERR rproxy: slot") {
			t.Errorf("%s: GET after the facade: %q", mode.name, got)
		}
		c.send(resp.AppendCommandString(resp.AppendCommandString(resp.AppendCommandString(nil, "MULTI"), "CLUSTER", "NODES"), "EXEC"))
		if got := []string{string(c.read()), string(c.read()), string(c.read())}; got[0] != "+OK\r\n" ||
			!strings.HasPrefix(got[1], "-ERR rproxy: CLUSTER NODES inside MULTI") || !strings.HasPrefix(got[2], "-EXECABORT") {
			t.Errorf("%s: MULTI, CLUSTER NODES, EXEC: %q", mode.name, got)
		}
	}

	// RESP2's subscribed mode: Redis refuses CLUSTER, as a node does.
	c := dialClient(t, p.Addr)
	r := dialClient(t, cl.Masters()[0].Addr)
	c.do("SUBSCRIBE", "facade-ch")
	r.do("SUBSCRIBE", "facade-ch")
	if got, want := c.do("CLUSTER", "SLOTS"), r.do("CLUSTER", "SLOTS"); got != want {
		t.Errorf("RESP2 subscribed CLUSTER SLOTS: %q, want Redis's %q", got, want)
	}
}

// TestClusterFacadeGoRedisClusterClient: go-redis's ClusterClient given
// only rproxy's address runs GET, SET, MGET across slots, pipelines and a
// transaction, and every connection it makes goes to rproxy: none of the
// Redis nodes lists a connection from it in CLIENT LIST.
func TestClusterFacadeGoRedisClusterClient(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	var mu sync.Mutex
	dialled := map[string]int{}
	var locals []string
	d := &net.Dialer{Timeout: 2 * time.Second}
	for _, proto := range []int{2, 3} {
		rc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:    []string{p.Addr},
			Protocol: proto,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := d.DialContext(ctx, network, addr)
				mu.Lock()
				dialled[addr]++
				if err == nil {
					locals = append(locals, nc.LocalAddr().String())
				}
				mu.Unlock()
				return nc, err
			},
		})
		ctx := context.Background()
		for i := range 50 {
			k := "gr" + strconv.Itoa(i)
			if err := rc.Set(ctx, k, "v"+strconv.Itoa(i), 0).Err(); err != nil {
				t.Fatalf("RESP%d SET %s: %v", proto, k, err)
			}
			if v, err := rc.Get(ctx, k).Result(); err != nil || v != "v"+strconv.Itoa(i) {
				t.Fatalf("RESP%d GET %s: %q, %v", proto, k, v, err)
			}
		}
		vals, err := rc.MGet(ctx, "gr1", "gr2", "gr3", "missing").Result()
		if err != nil || len(vals) != 4 || vals[0] != "v1" || vals[2] != "v3" || vals[3] != nil {
			t.Fatalf("RESP%d MGET across slots: %v, %v", proto, vals, err)
		}
		cmds, err := rc.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := range 30 {
				pipe.Incr(ctx, "grc"+strconv.Itoa(i))
				pipe.Get(ctx, "gr"+strconv.Itoa(i))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("RESP%d pipeline: %v", proto, err)
		}
		for i, cmd := range cmds {
			if cmd.Err() != nil {
				t.Fatalf("RESP%d pipeline command %d: %v", proto, i, cmd.Err())
			}
		}
		if _, err := rc.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, "{tx}a", "1", 0)
			pipe.Incr(ctx, "{tx}b")
			return nil
		}); err != nil {
			t.Fatalf("RESP%d transaction: %v", proto, err)
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for addr := range dialled {
		if addr != p.Addr {
			t.Errorf("the cluster client dialled %s, not rproxy (%s): %v", addr, p.Addr, dialled)
		}
	}
	mine := map[string]bool{}
	for _, l := range locals {
		mine[l] = true
	}
	for _, n := range cl.Nodes {
		for _, line := range strings.Split(string(n.Do(t, "CLIENT", "LIST")), "\n") {
			if strings.Contains(line, " cmd=client|list ") {
				continue // this CLIENT LIST's own connection, which may reuse a closed one's port
			}
			for _, f := range strings.Fields(line) {
				if a, ok := strings.CutPrefix(f, "addr="); ok && mine[a] {
					t.Errorf("node %s has a connection from the cluster client: %s", n.Addr, line)
				}
			}
		}
	}
	if len(locals) == 0 {
		t.Fatal("the cluster client made no connection")
	}
}

// TestClusterCrossSlotTransactions: a transaction whose commands are for
// different masters is answered as a one-node cluster answers one across
// slots: each command +QUEUED, EXEC -CROSSSLOT, nothing applied, and the
// connection usable after; a watched session's command for another
// master gets CROSSSLOT. No MOVED reaches the client.
func TestClusterCrossSlotTransactions(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	ref := redistest.StartCluster(t, 1, 0).Nodes[0]
	other := keyOnOtherSlot("k", "a")
	for upstream.Slot([]byte(other))*3/upstream.Slots == upstream.Slot([]byte("a"))*3/upstream.Slots {
		other = keyOnOtherSlot(other+"x", "a") // a key of another master (slots are in thirds)
	}
	tx := [][]string{{"MULTI"}, {"SET", "a", "1"}, {"SET", other, "2"}, {"EXEC"}}
	run := func(c *rawClient) []string {
		var pipe []byte
		for _, s := range tx {
			pipe = resp.AppendCommandString(pipe, s...)
		}
		c.send(pipe)
		var out []string
		for range tx {
			out = append(out, string(c.read()))
		}
		return out
	}
	c := dialClient(t, p.Addr)
	want := run(dialClient(t, ref.Addr))
	if want[3] != "-CROSSSLOT Keys in request don't hash to the same slot\r\n" {
		t.Fatalf("a one-node cluster answers the transaction with %q", want)
	}
	if got := run(c); strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("transaction across masters: %q, want a one-node cluster's %q", got, want)
	}
	if got := c.do("MGET", "a", other); got != "*2\r\n$-1\r\n$-1\r\n" {
		t.Errorf("after the refused transaction: MGET %q, want nothing applied", got)
	}
	// Typed by hand: MULTI alone, then the commands one by one.
	for i, s := range tx {
		if got := c.do(s...); got != want[i] {
			t.Errorf("typed transaction step %v: %q, want %q", s, got, want[i])
		}
	}
	// DISCARD after a command for another master ends it normally.
	c.do("MULTI")
	c.do("SET", other, "3")
	if got := c.do("DISCARD"); got != "+OK\r\n" {
		t.Errorf("DISCARD: %q", got)
	}
	if got := c.do("EXEC"); !strings.HasPrefix(got, "-ERR EXEC without MULTI") {
		t.Errorf("EXEC after DISCARD: %q", got)
	}
	// WATCH pins to a's master; a command for another master's key runs
	// on the shared connections, as on one node (before 2026-11-29 it got
	// CROSSSLOT); a blocking one gets CROSSSLOT.
	c.do("WATCH", "a")
	if got := c.do("SET", other, "4"); got != "+OK\r\n" {
		t.Errorf("SET of another master's key while watching: %q", got)
	}
	if got := sendAll(c, []string{"GET", other}, []string{"BLPOP", other + "l", "1"}); got[0] != "$1\r\n4\r\n" || got[1] != "-CROSSSLOT Keys in request don't hash to the same slot\r\n" {
		t.Errorf("GET, BLPOP of another master's keys while watching: %q", got)
	}
	c.do("UNWATCH")
	// In the client's order with what runs on every master: the FLUSHDB
	// (run on the pin, then on the other masters) comes before the SET
	// (found by TestClusterPipelinesAsStandaloneRandomSequences, seed 197).
	if got := sendAll(c, []string{"WATCH", "a"}, []string{"FLUSHDB"}, []string{"SETNX", other, "5"}); got[2] != ":1\r\n" {
		t.Errorf("WATCH, FLUSHDB, SETNX of another master's key: %q, want the key set (flushed before)", got)
	}
	c.do("UNWATCH")
	// A protocol switch while watching keeps the same master's commands going.
	c.do("WATCH", "a")
	c.do("HELLO", "3")
	if got := c.do("SET", "a", "5"); got != "+OK\r\n" {
		t.Errorf("SET of the watched master's key after HELLO 3: %q", got)
	}
	c.do("UNWATCH")
	// CLUSTER COUNTKEYSINSLOT inside a transaction is queued in it.
	c.send(resp.AppendCommandString(resp.AppendCommandString(resp.AppendCommandString(nil, "MULTI"), "CLUSTER", "COUNTKEYSINSLOT", "0"), "EXEC"))
	if got := []string{string(c.read()), string(c.read()), string(c.read())}; got[0] != "+OK\r\n" || got[1] != "+QUEUED\r\n" || !strings.HasPrefix(got[2], "*1\r\n:") {
		t.Errorf("MULTI, CLUSTER COUNTKEYSINSLOT, EXEC: %q", got)
	}
}

// TestProxyInfoNodesStandalone: on one server INFO's # Proxy section says
// standalone and PROXY INFO NODES gives that server's INFO.
func TestProxyInfoNodesStandalone(t *testing.T) {
	srv := redistest.Start(t)
	p := proxytest.Start(t, srv.Addr)
	c := dialClient(t, p.Addr)
	if info := c.do("INFO", "proxy"); !strings.Contains(info, "upstream_mode:standalone\r\n") || strings.Contains(info, "cluster_") {
		t.Errorf("INFO proxy on one server:\n%s", info)
	}
	got := c.do("PROXY", "INFO", "NODES", "server")
	if !strings.HasPrefix(got, "*1\r\n*2\r\n$"+strconv.Itoa(len(srv.Addr))+"\r\n"+srv.Addr+"\r\n$") ||
		!strings.Contains(got, "tcp_port:"+strconv.Itoa(srv.Port)+"\r\n") {
		t.Errorf("PROXY INFO NODES server: %q", got)
	}
}
