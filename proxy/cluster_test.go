package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/upstream"
)

// startClusterProxy runs rproxy in cluster mode in front of cl (the local
// tier off: cluster mode does not support it yet).
func startClusterProxy(t *testing.T, cl *redistest.Cluster, opts ...func(*proxy.Config)) *proxytest.Proxy {
	t.Helper()
	seeds := cl.Seeds()
	return proxytest.Start(t, seeds[0], append([]func(*proxy.Config){func(c *proxy.Config) {
		c.Cluster = &upstream.ClusterConfig{Seeds: seeds, Refresh: 2 * time.Second, MinRefreshGap: 20 * time.Millisecond}
		c.HotKey.Tier = false
	}}, opts...)...)
}

// redirects is how many cluster replies of kind rproxy followed.
func redirects(t *testing.T, p *proxytest.Proxy, kind string) float64 {
	t.Helper()
	v, _ := metricSum(t, p.Registry, "rproxy_upstream_cluster_redirects_total", map[string]string{"kind": kind})
	return v
}

// keyOnOtherSlot returns a key of the form prefix+n whose slot differs
// from every slot in avoid.
func keyOnOtherSlot(prefix string, avoid ...string) string {
	for n := 0; ; n++ {
		k := prefix + strconv.Itoa(n)
		ok := true
		for _, a := range avoid {
			if upstream.Slot([]byte(k)) == upstream.Slot([]byte(a)) {
				ok = false
			}
		}
		if ok {
			return k
		}
	}
}

// TestClusterSlotMatchesRedis checks the slot function against CLUSTER
// KEYSLOT, hash tags included.
func TestClusterSlotMatchesRedis(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	n := cl.Masters()[0]
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"", "{}", "{a", "a{b}c", "{b}{c}", "}{x}", "{{x}}", "foo{}{bar}", "{user1000}.following"}
	for range 300 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = "ab{}xyz:0123"[rng.IntN(12)]
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		want := strings.TrimSpace(strings.TrimPrefix(string(n.Do(t, "CLUSTER", "KEYSLOT", k)), ":"))
		if got := strconv.Itoa(upstream.Slot([]byte(k))); got != want {
			t.Errorf("Slot(%q) = %s, CLUSTER KEYSLOT says %s", k, got, want)
		}
	}
}

// TestClusterRoutesBySlot: keys written through rproxy are on their slot's
// master, and reads and writes of many keys from one pipeline come back in
// order.
func TestClusterRoutesBySlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	c := dialClient(t, p.Addr)
	var pipe []byte
	const n = 300
	for i := range n {
		pipe = resp.AppendCommandString(pipe, "SET", "key:"+strconv.Itoa(i), "v"+strconv.Itoa(i))
		pipe = resp.AppendCommandString(pipe, "GET", "key:"+strconv.Itoa(i))
	}
	c.send(pipe)
	for i := range n {
		if r := string(c.read()); r != "+OK\r\n" {
			t.Fatalf("SET key:%d: %q", i, r)
		}
		want := fmt.Sprintf("$%d\r\nv%d\r\n", len("v"+strconv.Itoa(i)), i)
		if r := string(c.read()); r != want {
			t.Fatalf("GET key:%d: %q, want %q", i, r, want)
		}
	}
	perMaster := map[string]int{}
	for i := range n {
		k := "key:" + strconv.Itoa(i)
		m := cl.MasterForSlot(t, upstream.Slot([]byte(k)))
		if r := string(m.Do(t, "GET", k)); r != fmt.Sprintf("$%d\r\nv%d\r\n", len("v"+strconv.Itoa(i)), i) {
			t.Fatalf("%s on its master %s: %q", k, m.Addr, r)
		}
		perMaster[m.Addr]++
	}
	if len(perMaster) != 3 {
		t.Errorf("keys landed on %d masters, want 3: %v", len(perMaster), perMaster)
	}
	if got := redirects(t, p, "moved"); got != 0 {
		t.Errorf("%v MOVED replies with a fresh slot map, want 0", got)
	}
}

// TestClusterMultiKeyMatchesStandalone: MGET, MSET, DEL, UNLINK, EXISTS,
// TOUCH across slots, and DBSIZE, through rproxy on a cluster give the
// bytes one standalone Redis gives, in RESP2 and RESP3.
func TestClusterMultiKeyMatchesStandalone(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	direct := redistest.Start(t)
	steps := [][]string{
		{"MSET", "a", "1", "b", "2", "c", "3", "{a}x", "4", "d", "5"},
		{"MGET", "a", "b", "missing", "c", "{a}x", "d", "a"},
		{"MGET", "a"},
		{"MGET", "nope1", "nope2"},
		{"EXISTS", "a", "b", "missing", "a", "{a}x"},
		{"TOUCH", "a", "missing", "d"},
		{"DBSIZE"},
		{"DEL", "a", "missing", "b", "b"},
		{"MGET", "a", "b", "c"},
		{"UNLINK", "c", "d", "{a}x"},
		{"DBSIZE"},
		{"MSET", "a"}, // arity error from Redis
		{"MGET"},
		{"SET", "s", "x"},
		{"MGET", "s", "a", "c"},
		{"LPUSH", "list", "x"},
		{"MGET", "s", "list", "b"},
	}
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			d := dialClient(t, direct.Addr)
			c := dialClient(t, p.Addr)
			d.do("FLUSHALL")
			for _, m := range cl.Masters() {
				m.Do(t, "FLUSHALL")
			}
			d.do("HELLO", proto)
			c.do("HELLO", proto)
			for _, s := range steps {
				want, got := d.do(s...), c.do(s...)
				if got != want {
					t.Errorf("%v: rproxy %q, Redis %q", s, got, want)
				}
			}
			// The same steps in one pipeline.
			d.do("FLUSHALL")
			for _, m := range cl.Masters() {
				m.Do(t, "FLUSHALL")
			}
			var pipe []byte
			for _, s := range steps {
				pipe = resp.AppendCommandString(pipe, s...)
			}
			d.send(pipe)
			c.send(pipe)
			for _, s := range steps {
				if want, got := string(d.read()), string(c.read()); got != want {
					t.Errorf("pipelined %v: rproxy %q, Redis %q", s, got, want)
				}
			}
		})
	}
}

// TestClusterCrossSlotAndRefusals: commands that cannot be split get
// Redis's own CROSSSLOT error, and SELECT the cluster's own refusal.
func TestClusterCrossSlotAndRefusals(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Policy = nil })
	c := dialClient(t, p.Addr)
	other := keyOnOtherSlot("k", "a")
	node := dialClient(t, cl.Masters()[0].Addr)
	want := node.do("SUNION", "a", other)
	if !strings.HasPrefix(want, "-CROSSSLOT") {
		t.Fatalf("a cluster node answers SUNION across slots with %q", want)
	}
	for _, s := range [][]string{
		{"SUNION", "a", other},
		{"RENAME", "a", other},
		{"EVAL", "return 1", "2", "a", other},
		{"MSETNX", "a", "1", other, "2"},
	} {
		if got := c.do(s...); got != want {
			t.Errorf("%v: %q, want Redis's %q", s, got, want)
		}
	}
	// A transaction across masters fails as on a one-node cluster (the
	// facade): CROSSSLOT at EXEC (TestClusterCrossSlotTransactions).
	var pipe []byte
	for _, s := range [][]string{{"MULTI"}, {"SET", "a", "1"}, {"SET", other, "2"}, {"EXEC"}} {
		pipe = resp.AppendCommandString(pipe, s...)
	}
	c.send(pipe)
	var replies []string
	for range 4 {
		replies = append(replies, string(c.read()))
	}
	if replies[0] != "+OK\r\n" || replies[1] != "+QUEUED\r\n" || replies[2] != "+QUEUED\r\n" || !strings.HasPrefix(replies[3], "-CROSSSLOT") {
		t.Errorf("MULTI across slots: %q", replies)
	}
	if got := c.do("SELECT", "1"); got != node.do("SELECT", "1") {
		t.Errorf("SELECT 1: %q, want the cluster's own error", got)
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Errorf("the connection is not usable after the refusals: PING %q", got)
	}
}

// TestClusterTransactionsAndScripts: MULTI/EXEC pins to the master of the
// transaction's key, WATCH to its key's, blocking pops to theirs; scripts
// and functions loaded through rproxy are on every master.
func TestClusterTransactionsAndScripts(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	c := dialClient(t, p.Addr)
	for i := range 20 { // keys on every master
		k := "tx" + strconv.Itoa(i)
		var pipe []byte
		for _, s := range [][]string{{"MULTI"}, {"SET", k, "1"}, {"INCR", k}, {"EXEC"}} {
			pipe = resp.AppendCommandString(pipe, s...)
		}
		c.send(pipe)
		got := []string{string(c.read()), string(c.read()), string(c.read()), string(c.read())}
		want := []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n+OK\r\n:2\r\n"}
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Fatalf("MULTI SET INCR EXEC on %s: %q", k, got)
		}
		if r := c.do("WATCH", k); r != "+OK\r\n" {
			t.Fatalf("WATCH %s: %q", k, r)
		}
		c.do("MULTI")
		c.do("INCR", k)
		if r := c.do("EXEC"); r != "*1\r\n:3\r\n" {
			t.Fatalf("WATCH/MULTI/INCR/EXEC on %s: %q", k, r)
		}
	}
	// A blocking pop on each master's key, served by a push through rproxy.
	for i := range 6 {
		k := "bl" + strconv.Itoa(i)
		b := dialClient(t, p.Addr)
		b.send(resp.AppendCommandString(nil, "BLPOP", k, "5"))
		time.Sleep(20 * time.Millisecond)
		c.do("RPUSH", k, "x")
		if r := string(b.read()); r != fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$1\r\nx\r\n", len(k), k) {
			t.Fatalf("BLPOP %s: %q", k, r)
		}
	}
	sha := strings.TrimSpace(strings.SplitN(c.do("SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"), "\r\n", 2)[1])
	if r := c.do("FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('g', function(keys) return redis.call('GET', keys[1]) end)"); r != "$3\r\nlib\r\n" {
		t.Fatalf("FUNCTION LOAD: %q", r)
	}
	for i := range 20 {
		k := "tx" + strconv.Itoa(i)
		if r := c.do("EVALSHA", sha, "1", k); r != "$1\r\n3\r\n" {
			t.Errorf("EVALSHA on %s: %q", k, r)
		}
		if r := c.do("FCALL", "g", "1", k); r != "$1\r\n3\r\n" {
			t.Errorf("FCALL on %s: %q", k, r)
		}
	}
	if r := c.do("SCRIPT", "FLUSH"); r != "+OK\r\n" {
		t.Errorf("SCRIPT FLUSH: %q", r)
	}
	for _, m := range cl.Masters() {
		if r := string(m.Do(t, "SCRIPT", "EXISTS", sha)); r != "*1\r\n:0\r\n" {
			t.Errorf("the script is still on %s after SCRIPT FLUSH: %q", m.Addr, r)
		}
	}
}

// TestClusterPubSub: a subscriber through rproxy receives what is published
// through rproxy, whichever masters the two land on.
func TestClusterPubSub(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	sub := dialClient(t, p.Addr)
	sub.send(resp.AppendCommandString(nil, "SUBSCRIBE", "news"))
	if r := string(sub.read()); r != "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n" {
		t.Fatalf("SUBSCRIBE: %q", r)
	}
	pub := dialClient(t, p.Addr)
	for i := range 6 { // several publishes: keyless commands rotate over the masters
		pub.do("PUBLISH", "news", "m"+strconv.Itoa(i))
		want := fmt.Sprintf("*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nm%d\r\n", i)
		if r := string(sub.read()); r != want {
			t.Fatalf("message %d: %q, want %q", i, r, want)
		}
	}
}

// TestClusterFollowsMovedAndAsk: after a slot moves behind rproxy's back,
// the first command gets MOVED, which rproxy follows and remembers; during
// a migration, keys already moved are served through ASK.
func TestClusterFollowsMovedAndAsk(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Cluster.Refresh = time.Hour // only MOVED may teach it
	})
	c := dialClient(t, p.Addr)
	const key = "moving"
	slot := upstream.Slot([]byte(key))
	c.do("SET", key, "1")
	from := cl.MasterForSlot(t, slot)
	var to *redistest.ClusterNode
	for _, m := range cl.Masters() {
		if m != from {
			to = m
			break
		}
	}
	cl.MigrateSlot(t, slot, to)
	if r := c.do("GET", key); r != "$1\r\n1\r\n" {
		t.Fatalf("GET after the slot moved: %q", r)
	}
	moved := redirects(t, p, "moved")
	if moved < 1 {
		t.Errorf("MOVED followed %v times, want >= 1", moved)
	}
	for range 10 {
		if r := c.do("INCR", key); strings.HasPrefix(r, "-") {
			t.Fatalf("INCR: %q", r)
		}
	}
	if again := redirects(t, p, "moved"); again != moved {
		t.Errorf("MOVED followed again (%v -> %v): the slot map was not corrected", moved, again)
	}

	// ASK: begin moving the slot back; move its one key; both the moved
	// key and a new key of the slot are served.
	m := cl.BeginMigration(t, slot, from)
	if n := m.MoveKeys(t, 100); n != 1 {
		t.Fatalf("moved %d keys, want 1", n)
	}
	if r := c.do("GET", key); r != "$2\r\n11\r\n" {
		t.Errorf("GET of a key moved mid-migration: %q", r)
	}
	newKey := ""
	for i := 0; newKey == ""; i++ {
		if k := "n" + strconv.Itoa(i); upstream.Slot([]byte(k)) == slot {
			newKey = k
		}
		if i > 1_000_000 {
			t.Fatal("no key found for the slot")
		}
	}
	if r := c.do("SET", newKey, "x"); r != "+OK\r\n" {
		t.Errorf("SET of a new key of a migrating slot: %q", r)
	}
	if ask := redirects(t, p, "ask"); ask < 2 {
		t.Errorf("ASK followed %v times, want >= 2", ask)
	}
	m.Finish(t)
	if r := c.do("MGET", key, newKey); r != "*2\r\n$2\r\n11\r\n$1\r\nx\r\n" {
		t.Errorf("MGET after the migration: %q", r)
	}
	if r := string(from.Do(t, "GET", newKey)); r != "$1\r\nx\r\n" {
		t.Errorf("the new key is not on the slot's new master: %q", r)
	}
}

// TestClusterReshardUnderLoad moves slots between masters while clients
// increment counters through rproxy: no client sees an error and every
// acknowledged increment is in the final counts.
func TestClusterReshardUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	const clients, keys = 8, 64
	var acked [keys]atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		c := dialClient(t, p.Addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(keys)
				// A pipeline of two keys, often on different masters.
				k2 := (k + 1 + rng.IntN(keys-1)) % keys
				var pipe []byte
				pipe = resp.AppendCommandString(pipe, "INCR", "ctr:"+strconv.Itoa(k))
				pipe = resp.AppendCommandString(pipe, "INCR", "ctr:"+strconv.Itoa(k2))
				if _, err := c.nc.Write(pipe); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				for _, kk := range []int{k, k2} {
					c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
					r, err := resp.ReadReply(c.rd, nil)
					if err != nil || r[0] != ':' {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("INCR ctr:%d: %q %v", kk, r, err))
						if err != nil {
							return
						}
						continue
					}
					acked[kk].Add(1)
				}
			}
		}()
	}
	// Move the slots of the first 16 keys, each to the next master.
	masters := cl.Masters()
	start := time.Now()
	moved := map[int]bool{}
	for k := range 16 {
		slot := upstream.Slot([]byte("ctr:" + strconv.Itoa(k)))
		if moved[slot] {
			continue
		}
		moved[slot] = true
		from := cl.MasterForSlot(t, slot)
		var to *redistest.ClusterNode
		for i, m := range masters {
			if m == from {
				to = masters[(i+1)%len(masters)]
			}
		}
		cl.MigrateSlot(t, slot, to)
	}
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	var total int64
	for k := range keys {
		key := "ctr:" + strconv.Itoa(k)
		m := cl.MasterForSlot(t, upstream.Slot([]byte(key)))
		r := strings.TrimSpace(strings.TrimPrefix(string(m.Do(t, "GET", key)), "$"))
		parts := strings.Split(r, "\r\n")
		got, _ := strconv.ParseInt(parts[len(parts)-1], 10, 64)
		if got != acked[k].Load() {
			t.Errorf("%s = %d on its master, but %d increments were acknowledged", key, got, acked[k].Load())
		}
		total += got
	}
	if n := errs.Load(); n != 0 {
		t.Errorf("%d client errors during resharding; first: %v", n, firstErr.Load())
	}
	if total == 0 {
		t.Fatal("no increments were made")
	}
	t.Logf("moved %d slots in %v under load: %d increments acknowledged and counted, 0 errors; redirects followed: moved %v, ask %v, tryagain %v",
		len(moved), took.Round(time.Millisecond), total,
		redirects(t, p, "moved"),
		redirects(t, p, "ask"),
		redirects(t, p, "tryagain"))
}

// TestClusterFailoverUnderLoad kills a master of a 3+3 cluster while
// clients write through rproxy: errors are confined to the failover window
// and rproxy recovers by itself.
func TestClusterFailoverUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	p := startClusterProxy(t, cl)
	const clients = 6
	type failure struct {
		at  time.Time
		msg string
	}
	var mu sync.Mutex
	var failures []failure
	var oks atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		c := dialClient(t, p.Addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := "f:" + strconv.Itoa(w) + ":" + strconv.Itoa(i%50)
				r := c.doErr("SET", k, "v")
				if r != "+OK\r\n" {
					mu.Lock()
					failures = append(failures, failure{time.Now(), r})
					mu.Unlock()
					if strings.HasPrefix(r, "read:") || strings.HasPrefix(r, "write:") {
						return
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				oks.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	victim := cl.Masters()[0]
	killedAt := time.Now()
	promoted, took := cl.Failover(t, victim)
	// Recovery: every client's next writes succeed.
	deadline := time.Now().Add(15 * time.Second)
	before := oks.Load()
	for oks.Load() < before+500 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	n0 := len(failures)
	mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if oks.Load() < before+500 {
		t.Fatalf("rproxy did not recover within 15s after the failover: %d writes since", oks.Load()-before)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != n0 {
		t.Errorf("%d errors after recovery, e.g. %q", len(failures)-n0, failures[n0].msg)
	}
	var window time.Duration
	if len(failures) > 0 {
		window = failures[len(failures)-1].at.Sub(killedAt)
		for _, f := range failures {
			if f.at.Before(killedAt) {
				t.Errorf("error before the kill: %q", f.msg)
			}
			if strings.HasPrefix(f.msg, "read:") || strings.HasPrefix(f.msg, "write:") {
				t.Errorf("a client connection failed: %q", f.msg)
			}
		}
	}
	if window > took+3*time.Second {
		t.Errorf("errors until %v after the kill, but the cluster was whole again after %v", window, took)
	}
	kinds := map[string]int{}
	for _, f := range failures {
		kinds[strings.SplitN(f.msg, " ", 3)[0]+" "+strings.SplitN(f.msg, " ", 3)[1]]++
	}
	t.Logf("master %s killed; %s promoted after %v; clients saw %d errors over %v from the kill (%v), %d writes ok",
		victim.Addr, promoted.Addr, took.Round(time.Millisecond), len(failures), window.Round(time.Millisecond), kinds, oks.Load())
}

// TestClusterRedisBenchmark runs redis-benchmark's default list through
// rproxy on a cluster: every test completes and no reply is an error.
func TestClusterRedisBenchmark(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	bin := redistest.RequireBinary(t, "redis-benchmark")
	host, port := splitAddr(t, p.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// redis-benchmark 7 exits at the first error reply, printing it.
	out, err := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-c", "50", "-n", "2000", "-q", "-r", "10000").CombinedOutput()
	text := strings.ReplaceAll(string(out), "\r", "\n")
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, text)
	}
	results := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ": "); ok && strings.Contains(rest, "requests per second") {
			results[name] = true
		}
	}
	for _, name := range benchmarkTests {
		if !results[name] {
			t.Errorf("no result line for %q", name)
		}
	}
	for _, bad := range []string{"ERR", "Error", "error", "MOVED", "CROSSSLOT"} {
		if strings.Contains(text, bad) {
			t.Errorf("redis-benchmark output contains %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

// TestClusterCompat runs the compatibility corpus through rproxy on a
// cluster against one standalone Redis: every command whose keys share a
// slot, the split multi-key commands, and the keyless commands that mean
// the same on a cluster.
func TestClusterCompat(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Upstream.Timeout = 30 * time.Second })
	direct := redistest.Start(t)
	table := command.Builtin()
	var corpus []compatCase
	skipped := 0
	for _, c := range compatCorpus(false) {
		if clusterComparable(table, c.args) {
			corpus = append(corpus, c)
		} else {
			skipped++
		}
	}
	if len(corpus) < 200 {
		t.Fatalf("only %d corpus commands are comparable on a cluster (%d skipped)", len(corpus), skipped)
	}
	e := &compatEnv{a: direct, proxy: p}
	reset := func(t *testing.T) {
		t.Helper()
		servers := []*redistest.Server{direct}
		for _, m := range cl.Masters() {
			servers = append(servers, m.Server)
		}
		for _, s := range servers {
			for _, c := range [][]string{{"FLUSHALL"}, {"FUNCTION", "FLUSH"}, {"SCRIPT", "FLUSH"}} {
				if r := s.Do(t, c...); string(r) != "+OK\r\n" {
					t.Fatalf("%s %v: got %q", s.Addr, c, r)
				}
			}
		}
	}
	for _, proto := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			reset(t)
			runCompatSequentialNoReset(t, e, proto, corpus)
		})
		t.Run("PipelinedRESP"+strconv.Itoa(proto), func(t *testing.T) {
			reset(t)
			runCompatPipelinedNoReset(t, e, proto, corpus)
		})
	}
	t.Logf("%d corpus commands compared on a cluster, %d left out (keys on several slots, or keyspace-wide)", len(corpus), skipped)
}

// clusterComparable reports whether a corpus command means the same on a
// cluster as on one server.
func clusterComparable(table *command.Table, args []string) bool {
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	info := table.Lookup(bargs[0])
	if info == nil {
		return true // unknown: both say so
	}
	switch info.Name {
	case "select", "move", "swapdb", "keys", "scan", "randomkey", "cluster", "readonly", "readwrite",
		"wait", "info", "debug", "object", "memory", "latency", "slowlog", "config", "client", "role",
		"lastsave", "save", "bgsave", "monitor", "sync", "psync", "replicaof", "slaveof", "failover", "migrate":
		return false
	case "mget", "mset", "del", "unlink", "exists", "touch", "dbsize", "flushall", "flushdb":
		return true
	case "sort", "sort_ro":
		for _, a := range args[2:] {
			if strings.EqualFold(a, "by") || strings.EqualFold(a, "get") {
				return false // patterns name other keys: denied by a cluster
			}
		}
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "script", "function":
		// Scripts that reach keys they do not declare behave differently.
		body := strings.ToLower(strings.Join(args, " "))
		if strings.Contains(body, "redis.call") && len(args) > 2 && args[2] == "0" {
			return false
		}
	}
	if sub := table.LookupArgs(bargs); sub != nil {
		info = sub
	}
	keys, ok := command.Keys(info, bargs, nil)
	if !ok {
		return false
	}
	for _, k := range keys[min(1, len(keys)):] {
		if upstream.Slot(k) != upstream.Slot(keys[0]) {
			return false
		}
	}
	return true
}

// roundRobin is a salt.Config.IntN that cycles through the copies.
func roundRobin() func(n int) int {
	var c atomic.Uint64
	return func(n int) int { return int(c.Add(1) % uint64(n)) }
}

// getCalls is how many GETs each master ran.
func getCalls(t *testing.T, cl *redistest.Cluster) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range cl.Masters() {
		out[m.Addr] = getCallsOn(t, m)
	}
	return out
}

// getCallsOn is how many GETs a node ran (INFO commandstats).
func getCallsOn(t *testing.T, n *redistest.ClusterNode) int {
	t.Helper()
	for _, line := range strings.Split(string(n.Do(t, "INFO", "commandstats")), "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			v, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return v
		}
	}
	return 0
}

// dbsizes is each master's key count.
func dbsizes(t *testing.T, cl *redistest.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range cl.Masters() {
		out[m.Addr] = strings.TrimSpace(string(m.Do(t, "DBSIZE")))
	}
	return out
}

// TestClusterSaltedFanOut: a salted key's reads spread over copies on
// every master; a write through rproxy removes the copies before it is
// acknowledged; copies expire with their TTL and never outlive the origin.
func TestClusterSaltedFanOut(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 1500 * time.Millisecond, Prefixes: []string{"hot:"}, IntN: roundRobin()}
	})
	c := dialClient(t, p.Addr)
	if r := c.do("SET", "hot:k", "v1"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	for _, m := range cl.Masters() {
		m.Do(t, "CONFIG", "RESETSTAT")
	}
	const reads = 300
	for i := range reads {
		if r := c.do("GET", "hot:k"); r != "$2\r\nv1\r\n" {
			t.Fatalf("GET %d: %q", i, r)
		}
	}
	calls := getCalls(t, cl)
	total := 0
	for _, n := range calls {
		total += n
	}
	for addr, n := range calls {
		if share := float64(n) / float64(total); share > 0.40 || share < 0.25 {
			t.Errorf("master %s served %d of %d GETs (%.0f%%), want 25..40%%: %v", addr, n, total, 100*share, calls)
		}
	}
	waitSaltFills(t, p, 2) // the two copies' fills, acknowledged in the background
	sizes := dbsizes(t, cl)
	for addr, n := range sizes {
		if n != ":1" {
			t.Errorf("master %s holds %s keys, want 1 (the key or one copy): %v", addr, n, sizes)
		}
	}
	hits, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_hit"})
	misses, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_miss"})
	if misses != 2 || hits != 2*reads/3-2 {
		t.Errorf("copy hits %v misses %v, want %d and 2", hits, misses, 2*reads/3-2)
	}

	// A write through rproxy: the copies are gone when it is acknowledged.
	if r := c.do("SET", "hot:k", "v2"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	origin := cl.MasterForSlot(t, upstream.Slot([]byte("hot:k")))
	for addr, n := range dbsizes(t, cl) {
		if want := map[bool]string{true: ":1", false: ":0"}[addr == origin.Addr]; n != want {
			t.Errorf("after the write, master %s holds %s keys, want %s", addr, n, want)
		}
	}
	other := dialClient(t, p.Addr)
	for i := range 30 {
		for _, cc := range []*rawClient{c, other} {
			if r := cc.do("GET", "hot:k"); r != "$2\r\nv2\r\n" {
				t.Fatalf("GET %d after the write: %q", i, r)
			}
		}
	}
	// DEL, then a missing key: no copy is made of nothing.
	c.do("DEL", "hot:k")
	for i := range 9 {
		if r := c.do("GET", "hot:k"); r != "$-1\r\n" {
			t.Fatalf("GET %d after DEL: %q", i, r)
		}
	}
	if s := dbsizes(t, cl); s[origin.Addr] != ":0" || len(strings.Join(mapValues(s), "")) != 6 || strings.Count(strings.Join(mapValues(s), ""), ":0") != 3 {
		t.Errorf("after DEL every master should be empty: %v", s)
	}

	// Copies never outlive the origin's TTL, and expire on their own.
	c.do("SET", "hot:short", "x", "PX", "400")
	for range 6 {
		c.do("GET", "hot:short")
	}
	for _, m := range cl.Masters() {
		if m == cl.MasterForSlot(t, upstream.Slot([]byte("hot:short"))) {
			continue
		}
		waitFor(t, "a copy of hot:short on "+m.Addr, func() bool { // filled in the background
			return strings.Contains(string(m.Do(t, "KEYS", "*")), "hot:short#rproxy-copy-")
		})
	}
	time.Sleep(600 * time.Millisecond)
	for addr, n := range dbsizes(t, cl) {
		if n != ":0" {
			t.Errorf("600ms after a 400ms key was set, master %s still holds %s keys", addr, n)
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestClusterSaltedHotKeyDetected: a key the detector finds hot gets
// copies without being listed.
func TestClusterSaltedHotKeyDetected(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.HotKey.Detector.Threshold = 100
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second}
	})
	c := dialClient(t, p.Addr)
	c.do("SET", "plain", "v")
	c.do("SET", "cold", "v")
	var pipe []byte
	for range 400 {
		pipe = resp.AppendCommandString(pipe, "GET", "plain")
	}
	c.send(pipe)
	for range 400 {
		if r := string(c.read()); r != "$1\r\nv\r\n" {
			t.Fatalf("GET plain: %q", r)
		}
	}
	c.do("GET", "cold")
	hits, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_hit"})
	joined, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_joined"})
	if hits+joined < 50 {
		t.Errorf("%v reads of a hot key served by copies (%v of them joined), want many", hits+joined, joined)
	}
	copies := 0
	waitFor(t, "two copies of the hot key", func() bool { // filled in the background
		copies = 0
		for _, m := range cl.Masters() {
			keys := string(m.Do(t, "KEYS", "*"))
			copies += strings.Count(keys, "plain#rproxy-copy-")
			if strings.Contains(keys, "cold#") {
				t.Errorf("a cold key got a copy on %s", m.Addr)
			}
		}
		return copies >= 2
	})
	if copies != 2 {
		t.Errorf("%d copies of the hot key, want 2 (on the two other masters)", copies)
	}
}

// TestClusterSaltedReadYourWrites: while readers hammer a salted key
// through rproxy, a writer sets it to increasing values; a read that began
// after a write was acknowledged never returns an older value.
func TestClusterSaltedReadYourWrites(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second, Prefixes: []string{"hot:"}}
	})
	w := dialClient(t, p.Addr)
	w.do("SET", "hot:n", "0")
	var acked atomic.Int64
	var bad atomic.Value
	var reads atomic.Int64
	var readers []func() bool
	for range 4 {
		r := dialClient(t, p.Addr)
		readers = append(readers, func() bool {
			floor := acked.Load()
			rep := r.doErr("GET", "hot:n")
			v, ok := bulkInt(rep)
			if !ok {
				bad.CompareAndSwap(nil, "GET: "+rep)
				return false
			}
			reads.Add(1)
			if v < floor {
				bad.CompareAndSwap(nil, fmt.Sprintf("read %d after %d was acknowledged", v, floor))
			}
			return true
		})
	}
	stop := loopUntilStopped(readers...)
	for i := int64(1); i <= 500; i++ {
		if r := w.do("SET", "hot:n", strconv.FormatInt(i, 10)); r != "+OK\r\n" {
			t.Fatalf("SET: %q", r)
		}
		acked.Store(i)
		if r, _ := bulkInt(w.do("GET", "hot:n")); r != i {
			t.Fatalf("the writer read %d after writing %d", r, i)
		}
	}
	stop()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	hits, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_hit"})
	if hits == 0 {
		t.Fatal("no read was served by a copy: the test proves nothing")
	}
	t.Logf("%d reads, %v from copies, 500 writes; no stale read", reads.Load(), hits)
}

func bulkInt(r string) (int64, bool) {
	parts := strings.Split(r, "\r\n")
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "$") {
		return 0, false
	}
	v, err := strconv.ParseInt(parts[1], 10, 64)
	return v, err == nil
}

// TestClusterReplicaReads: reads of keys under a replica-read prefix are
// served by replicas; other reads and every write by masters.
func TestClusterReplicaReads(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Cluster.ReplicaReads = true
		c.ReplicaReadPrefixes = []string{"ro:"}
		c.Coalesce = nil // every read reaches Redis, so the counts are exact
	})
	c := dialClient(t, p.Addr)
	var keys []string
	for i := range 12 {
		k := "ro:" + strconv.Itoa(i)
		keys = append(keys, k)
		c.do("SET", k, "v"+strconv.Itoa(i))
		c.do("SET", "rw:"+strconv.Itoa(i), "w")
	}
	for _, m := range cl.Masters() {
		if r := string(m.Do(t, "WAIT", "1", "5000")); r != ":1\r\n" {
			t.Fatalf("WAIT on %s: %q", m.Addr, r)
		}
	}
	for _, n := range cl.Nodes {
		n.Do(t, "CONFIG", "RESETSTAT")
	}
	for range 5 {
		for i, k := range keys {
			if r := c.do("GET", k); r != fmt.Sprintf("$%d\r\nv%d\r\n", len("v"+strconv.Itoa(i)), i) {
				t.Fatalf("GET %s: %q", k, r)
			}
			if r := c.do("GET", "rw:"+strconv.Itoa(i)); r != "$1\r\nw\r\n" {
				t.Fatalf("GET rw:%d: %q", i, r)
			}
		}
	}
	onMasters, onReplicas := 0, 0
	for _, m := range cl.Masters() {
		onMasters += getCallsOn(t, m)
	}
	for _, r := range cl.Replicas() {
		onReplicas += getCallsOn(t, r)
	}
	if onReplicas != 60 || onMasters != 60 {
		t.Errorf("GETs on replicas %d (want the 60 of ro: keys), on masters %d (want the 60 of rw: keys)", onReplicas, onMasters)
	}
	for i, k := range keys {
		expectScriptsCachedAsOnOneServer(t, c, k, fmt.Sprintf("$%d\r\nv%d\r\n", len("v"+strconv.Itoa(i)), i))
	}
}

// TestClusterTier: the local tier on a cluster, with a tracking connection
// per master: cached keys on every master are served without reaching
// Redis; writes through rproxy and straight to a master invalidate; losing
// one master's tracking connection empties and stops the tier until it is
// back.
func TestClusterTier(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		cacheAll(c)
		c.HotKey.Tier = true
	})
	waitServing(t, p)
	c := dialClient(t, p.Addr)
	var keys []string
	masters := map[string]bool{}
	for i := range 9 {
		k := "c:" + strconv.Itoa(i)
		keys = append(keys, k)
		c.do("SET", k, "v"+strconv.Itoa(i))
		masters[cl.MasterForSlot(t, upstream.Slot([]byte(k))).Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("keys on %d masters, want 3", len(masters))
	}
	for _, k := range keys {
		cached(t, p, c, k)
	}
	for _, m := range cl.Masters() {
		m.Do(t, "CONFIG", "RESETSTAT")
	}
	for range 10 {
		for i, k := range keys {
			if r := c.do("GET", k); r != "$2\r\nv"+strconv.Itoa(i)+"\r\n" {
				t.Fatalf("GET %s: %q", k, r)
			}
		}
	}
	for addr, n := range getCalls(t, cl) {
		if n != 0 {
			t.Errorf("master %s ran %d GETs of cached keys, want 0", addr, n)
		}
	}
	// A write through rproxy: read back at once.
	if r := c.do("SET", keys[0], "new"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	if r := c.do("GET", keys[0]); r != "$3\r\nnew\r\n" {
		t.Fatalf("GET after SET through rproxy: %q", r)
	}
	// Straight to each key's master: seen through tracking.
	for _, k := range keys[1:] {
		cl.MasterForSlot(t, upstream.Slot([]byte(k))).Do(t, "SET", k, "direct")
	}
	for _, k := range keys[1:] {
		waitFor(t, "the direct write to "+k, func() bool { return c.do("GET", k) == "$6\r\ndirect\r\n" })
	}
	// One master's tracking connection dropped: the tier stops, empties,
	// and serves again once it is back.
	stops := counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil)
	victim := cl.MasterForSlot(t, upstream.Slot([]byte(keys[1])))
	victim.Do(t, "CLIENT", "KILL", "ID", trackingClientID(t, victim.Server))
	waitFor(t, "tier stop", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_stops_total", nil) > stops
	})
	waitServing(t, p)
	if r := cached(t, p, c, keys[1]); r != "$6\r\ndirect\r\n" {
		t.Fatalf("GET after tracking came back: %q", r)
	}
}

// TestClusterInteractiveMulti: a MULTI typed alone (redis-cli) is answered
// at once and sent to the master of the transaction's first command.
func TestClusterInteractiveMulti(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, withPolicy(nil))
	c := dialClient(t, p.Addr)
	for i := range 6 { // keys on every master
		k := "im" + strconv.Itoa(i)
		for _, step := range [][2]string{
			{"MULTI", "+OK\r\n"}, {"SET " + k + " 1", "+QUEUED\r\n"}, {"INCR " + k, "+QUEUED\r\n"}, {"EXEC", "*2\r\n+OK\r\n:2\r\n"},
		} {
			if r := c.do(strings.Fields(step[0])...); r != step[1] {
				t.Fatalf("%s: %q, want %q", step[0], r, step[1])
			}
		}
	}
	// Nothing the client did not send reaches Redis (a DISCARD would show
	// in its statistics and MONITOR; one went after each read that
	// ended with the deferred MULTI open, at e91eaf7).
	for _, m := range cl.Masters() {
		if r := string(m.Do(t, "INFO", "commandstats")); strings.Contains(r, "cmdstat_discard") {
			t.Fatalf("a DISCARD the client never sent reached %s", m.Addr)
		}
	}
	for _, seq := range [][][2]string{
		{{"MULTI", "+OK\r\n"}, {"EXEC", "*0\r\n"}},
		{{"MULTI", "+OK\r\n"}, {"DISCARD", "+OK\r\n"}},
		{{"MULTI", "+OK\r\n"}, {"PING", "+QUEUED\r\n"}, {"EXEC", "*1\r\n+PONG\r\n"}},
	} {
		for _, step := range seq {
			if r := c.do(strings.Fields(step[0])...); r != step[1] {
				t.Fatalf("%s: %q, want %q", step[0], r, step[1])
			}
		}
	}
	if r := c.do("GET", "im0"); r != "$1\r\n2\r\n" {
		t.Fatalf("GET after the transactions: %q", r)
	}
	// The deferred MULTI reaches Redis as the client spelled it (MONITOR,
	// SLOWLOG), wherever the transaction moves.
	for _, first := range []string{"SET sp 1", "PING"} {
		mon := monitorOn(t, cl.MasterForSlot(t, upstream.Slot([]byte("sp"))).Addr)
		for _, cmd := range []string{"multi", first, "SET sp 2", "exec"} {
			c.do(strings.Fields(cmd)...)
		}
		expectMultiAsSent(t, mon)
	}
	// Keyless commands first: the transaction runs on the first key's
	// master, whichever master took the keyless ones (on one node it
	// runs; it got CROSSSLOT at EXEC for two masters' keys in three).
	// Redis's queue-time errors and rproxy's refusals among them still
	// abort it, where it moves too.
	exact := func(want string) func(string) bool { return func(r string) bool { return r == want } }
	prefix := func(want string) func(string) bool { return func(r string) bool { return strings.HasPrefix(r, want) } }
	for i := range 6 {
		k := "kl" + strconv.Itoa(i)
		for _, seq := range [][]struct {
			cmd  string
			want func(string) bool
		}{
			{{"MULTI", exact("+OK\r\n")}, {"PING", exact("+QUEUED\r\n")}, {"ECHO e", exact("+QUEUED\r\n")}, {"SET " + k + " 1", exact("+QUEUED\r\n")},
				{"INCR " + k, exact("+QUEUED\r\n")}, {"EXEC", exact("*4\r\n+PONG\r\n$1\r\ne\r\n+OK\r\n:2\r\n")}},
			{{"MULTI", exact("+OK\r\n")}, {"NOSUCHCOMMAND", prefix("-ERR unknown command")}, {"INCR " + k, exact("+QUEUED\r\n")},
				{"EXEC", prefix("-EXECABORT")}},
			{{"MULTI", exact("+OK\r\n")}, {"PING", exact("+QUEUED\r\n")}, {"FLUSHALL", prefix("-DENIED ")}, {"INCR " + k, exact("+QUEUED\r\n")},
				{"EXEC", prefix("-EXECABORT")}},
			{{"MULTI", exact("+OK\r\n")}, {"PING", exact("+QUEUED\r\n")}, {"DISCARD", exact("+OK\r\n")}, {"INCR " + k, exact(":3\r\n")}},
		} {
			for _, step := range seq {
				if r := c.do(strings.Fields(step.cmd)...); !step.want(r) {
					t.Fatalf("%s (key %s): %q", step.cmd, k, r)
				}
			}
		}
	}
}

// TestClusterSaltRetiredCopiesDeleted: when the slot map changes, a key's
// copies are chosen again; a copy the new map no longer names is still
// deleted by the next write, so no copy with an old value is left where a
// later map could read it.
func TestClusterSaltRetiredCopiesDeleted(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 30 * time.Second, Prefixes: []string{"hot:"}, IntN: roundRobin()}
	})
	c := dialClient(t, p.Addr)
	const key = "hot:m"
	c.do("SET", key, "v1")
	for range 9 {
		c.do("GET", key)
	}
	origin := cl.MasterForSlot(t, upstream.Slot([]byte(key)))
	var copyName string
	for _, m := range cl.Masters() {
		if m == origin {
			continue
		}
		var r []byte
		waitFor(t, "a copy on "+m.Addr, func() bool { // filled in the background
			r = m.Do(t, "KEYS", key+"#rproxy-copy-*")
			return !strings.HasPrefix(string(r), "*0\r\n")
		})
		v, err := resp.Parse(r)
		if err != nil || len(v.Elems) != 1 {
			t.Fatalf("copies on %s: %q", m.Addr, r)
		}
		copyName = string(v.Elems[0].Str)
	}
	// Move that copy's slot to the origin's master: the new map cannot
	// keep it as a copy.
	cl.MigrateSlot(t, upstream.Slot([]byte(copyName)), origin)
	c.do("GET", copyName) // a MOVED teaches rproxy the new map
	for range 9 {
		if r := c.do("GET", key); r != "$2\r\nv1\r\n" {
			t.Fatalf("GET after the map changed: %q", r)
		}
	}
	if r := c.do("SET", key, "v2"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	if owner := cl.MasterForSlot(t, upstream.Slot([]byte(copyName))); string(owner.Do(t, "EXISTS", copyName)) != ":0\r\n" {
		t.Errorf("the retired copy %s is still on %s after a write", copyName, owner.Addr)
	}
	for range 9 {
		if r := c.do("GET", key); r != "$2\r\nv2\r\n" {
			t.Fatalf("GET after the write: %q", r)
		}
	}
}

// TestClusterPassthroughUserWithoutClusterCommands: in auth.mode
// passthrough, a client logged in as a user who may not run CLUSTER
// commands (most application users) is served: the slot map of its user's
// connections is read on rproxy's own. Before, every command of such a
// session got "upstream unavailable: cluster slot map not loaded", the
// map being read with the user's credentials (NOPERM).
func TestClusterPassthroughUserWithoutClusterCommands(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	for _, m := range cl.Masters() {
		m.Do(t, "ACL", "SETUSER", "app", "on", ">apppw", "~*", "+@read", "+@write", "+@connection")
	}
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.AuthPassthrough = true })
	c := dialClient(t, p.Addr)
	if r := c.do("AUTH", "app", "apppw"); r != "+OK\r\n" {
		t.Fatalf("AUTH: %q", r)
	}
	for i := range 6 { // keys on every master
		k := "app" + strconv.Itoa(i)
		if r := c.do("SET", k, "v"); r != "+OK\r\n" {
			t.Fatalf("SET %s as app: %q", k, r)
		}
		if r := c.do("GET", k); r != "$1\r\nv\r\n" {
			t.Fatalf("GET %s as app: %q", k, r)
		}
	}
	if r := c.do("CLUSTER", "SHARDS"); !strings.HasPrefix(r, "*1\r\n") {
		t.Errorf("CLUSTER SHARDS through rproxy (the facade's): %q", r[:min(len(r), 60)])
	}
}

// TestClusterPassthroughSplitRefusedWhole: Redis checks a user's ACL for
// all of a command's keys before it runs any of it, so a DEL or MSET
// naming a key the user may not use is refused whole, and nothing is
// deleted or set. rproxy splits such a command across masters; each part
// was checked alone, so the parts with keys the user may use ran (the
// keys were deleted, the values set) and the client got the NOPERM of the
// other part. Compared with one standalone Redis and the same user.
func TestClusterPassthroughSplitRefusedWhole(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	single := redistest.Start(t)
	rule := []string{"ACL", "SETUSER", "app", "on", ">apppw", "~app*", "+@all"}
	for _, m := range cl.Masters() {
		m.Do(t, rule...)
	}
	single.Do(t, rule...)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.AuthPassthrough = true })
	keys := []string{"app0", "app1", "app2", "app3", "app4", "app5"} // on every master
	for _, cmd := range [][]string{
		append([]string{"DEL"}, append(slices.Clone(keys), "other")...),
		append([]string{"UNLINK", "other"}, keys...),
		{"MSET", "app0", "x", "app1", "x", "app2", "x", "app3", "x", "other", "x"},
		append([]string{"EXISTS"}, append(slices.Clone(keys), "other")...),
		append([]string{"MGET"}, append(slices.Clone(keys), "other")...),
	} {
		var got [2]string
		for i, addr := range []string{single.Addr, p.Addr} {
			c := dialClient(t, addr)
			if r := c.do("AUTH", "app", "apppw"); r != "+OK\r\n" {
				t.Fatalf("AUTH: %q", r)
			}
			for _, k := range keys {
				c.do("SET", k, "v")
			}
			got[i] = c.do(cmd...) + c.do(append([]string{"MGET"}, keys...)...)
			c.do(append([]string{"DEL"}, keys...)...)
		}
		if !strings.HasPrefix(got[0], "-NOPERM") {
			t.Fatalf("%v on one Redis: %q, want NOPERM", cmd, got[0])
		}
		if got[1] != got[0] {
			t.Errorf("%v through rproxy, then MGET: %q, want %q as on one Redis", cmd, got[1], got[0])
		}
	}
}

// TestClusterAskingStaysHere: ASKING lets a connection's next command
// reach a slot being imported; sent on a shared connection it flagged
// another client's command. rproxy follows ASK itself, so it answers
// ASKING as a one-node cluster does, and Redis never sees it; but in a
// transaction, where Redis queues it and answers it in EXEC's array.
func TestClusterAskingStaysHere(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	c := dialClient(t, p.Addr)
	if r := c.pipeline([]string{"ASKING"}, []string{"ASKING"}, []string{"GET", "k"}); r != "+OK\r\n+OK\r\n$-1\r\n" {
		t.Fatalf("ASKING, ASKING, GET: %q", r)
	}
	for _, m := range cl.Masters() {
		if stats := string(m.Do(t, "INFO", "commandstats")); strings.Contains(stats, "cmdstat_asking") {
			t.Errorf("ASKING reached %v", m)
		}
	}
	// In a transaction it is queued, as on Redis, and answered in EXEC.
	if r := c.pipeline([]string{"MULTI"}, []string{"ASKING"}, []string{"GET", "k"}, []string{"EXEC"}); r != "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n$-1\r\n" {
		t.Fatalf("MULTI, ASKING, GET, EXEC: %q", r)
	}
	c.do("MULTI") // typed alone: the transaction's master is chosen later
	if r := c.do("ASKING"); r != "+QUEUED\r\n" {
		t.Fatalf("ASKING in a MULTI typed alone: %q", r)
	}
	if r := c.do("EXEC"); r != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC after it: %q", r)
	}
}

// heldGate relays TCP connections to addr, but holds each one (reading
// nothing, dialling nothing) until open is called: a seed whose answers
// the test releases.
type heldGate struct {
	addr   string
	opened chan struct{}
	once   sync.Once
}

func startHeldGate(t *testing.T, to string) *heldGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &heldGate{addr: ln.Addr().String(), opened: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); g.open() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				<-g.opened
				u, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.Close() }()
				io.Copy(c, u)
			}()
		}
	}()
	return g
}

func (g *heldGate) open() { g.once.Do(func() { close(g.opened) }) }

// TestClusterCommandsAtStartWaitForTheSlotMap: commands that come before
// rproxy has read the cluster's slot map (the moments after it starts)
// wait for it, as a standalone pool's commands wait for its first dial.
// Before, a GET got "upstream unavailable: cluster slot map not loaded"
// and a transaction sent whole was pinned to the seed, its commands for
// another master's key answered +QUEUED and its EXEC CROSSSLOT (what
// bench's txload saw in its first round against a cluster). The seed is
// held until rproxy has read the commands, so no map can be loaded
// before they are served.
func TestClusterCommandsAtStartWaitForTheSlotMap(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	seed := cl.Masters()[0]
	// Keys of the other masters: the seed answers MOVED for them.
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := "start" + strconv.Itoa(i)
		if r := string(seed.Do(t, "GET", k)); strings.HasPrefix(r, "-MOVED") {
			keys = append(keys, k)
		}
	}
	gate := startHeldGate(t, seed.Addr)
	p := proxytest.Start(t, gate.addr, func(c *proxy.Config) {
		c.Cluster = &upstream.ClusterConfig{Seeds: []string{gate.addr}, Refresh: 2 * time.Second, MinRefreshGap: 20 * time.Millisecond}
		c.HotKey.Tier = false
		c.Upstream.Timeout = 10 * time.Second
	}, proxytest.NoWait)
	c := dialClient(t, p.Addr)
	var batch []byte
	for _, cmd := range [][]string{{"GET", keys[0]}, {"MULTI"}, {"INCR", keys[1]}, {"EXPIRE", keys[1], "100"}, {"EXEC"}} {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	c.send(batch)
	waitFor(t, "rproxy to read the GET", func() bool {
		v, _ := metricSum(t, p.Registry, "rproxy_proxy_command_calls_total", map[string]string{"command": "get"})
		return v >= 1
	})
	gate.open()
	var got strings.Builder
	for range 5 {
		got.Write(c.read())
	}
	if want := "$-1\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:1\r\n"; got.String() != want {
		t.Fatalf("replies = %q, want %q (Redis's)", got.String(), want)
	}
}

// TestClusterSaltedReadsDuringWritePause: a GET of a salted key is served
// during CLIENT PAUSE WRITE, as on Redis, which serves reads while it
// holds writes. A read that misses a copy fills it (a SET), and the GET's
// reply waited for that SET: for the whole pause (Redis's unit/pause
// "Test that client pause starts at the end of a transaction", with every
// key salted, lost its connection after 60 s), and every command behind
// it on the copy's shared connection too. While a pause sent through
// rproxy is in force, no copy is filled; after it, reads fill them again.
func TestClusterSaltedReadsDuringWritePause(t *testing.T) {
	_, p, c := startSaltedWithKey(t, "hot:p")
	if r := c.do("CLIENT", "PAUSE", "20000", "WRITE"); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE: %q", r)
	}
	t.Cleanup(func() { c.do("CLIENT", "UNPAUSE") })
	for i := range 6 { // every copy read twice: each misses
		getDuringPause(t, c, "hot:p", i)
	}
	misses, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_miss"})
	if misses < 4 {
		t.Fatalf("%v copy reads missed, want 4 (no copy filled)", misses)
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_salt_copy_fills_total", nil); n != 0 {
		t.Fatalf("%v copies filled during the pause", n)
	}
	if r := c.do("CLIENT", "UNPAUSE"); r != "+OK\r\n" {
		t.Fatalf("CLIENT UNPAUSE: %q", r)
	}
	for range 3 {
		if r := c.do("GET", "hot:p"); r != "$1\r\nv\r\n" {
			t.Fatalf("GET after the pause: %q", r)
		}
	}
	waitSaltFills(t, p, 2) // both copies, filled once the pause is over
}

// TestClusterSaltedReadsDuringAPauseSentToRedis: a write pause rproxy does
// not know of (sent to the masters directly, as another rproxy node or a
// failover pauses them) holds a copy's fill; the GET that missed the copy
// has its value from the origin and is answered at once, as Redis answers
// reads during the pause, and the fill lands when the pause ends. Before,
// the GET's reply waited for its fill: for the whole pause.
func TestClusterSaltedReadsDuringAPauseSentToRedis(t *testing.T) {
	cl, p, c := startSaltedWithKey(t, "hot:q")
	for _, m := range cl.Masters() {
		m.Do(t, "CLIENT", "PAUSE", "20000", "WRITE")
	}
	unpause := func() {
		for _, m := range cl.Masters() {
			m.Do(t, "CLIENT", "UNPAUSE")
		}
	}
	t.Cleanup(unpause)
	for i := range 3 { // each copy once (both miss), and the origin
		getDuringPause(t, c, "hot:q", i)
	}
	if misses, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_miss"}); misses != 2 {
		t.Fatalf("%v copy reads missed, want 2", misses)
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_salt_copy_fills_total", nil); n != 0 {
		t.Fatalf("%v fills acknowledged during the pause", n)
	}
	unpause()
	waitSaltFills(t, p, 2)
}

// TestClusterSaltedWriteBeforeTheKeyIsSalted: a write sent before its key
// had salted state (here held by a write pause sent to the origin's master
// directly) is not acknowledged with a copy left holding the value it
// replaced. The first read salts the key and reads the origin's old value
// while the write waits; before, it filled the copies with it, and the
// writer read its old value back after its +OK from two copies of three.
func TestClusterSaltedWriteBeforeTheKeyIsSalted(t *testing.T) {
	cl, p, r := startSaltedWithKey(t, "hot:e")
	origin := cl.MasterForSlot(t, cl.Slot("hot:e"))
	origin.Do(t, "CLIENT", "PAUSE", "20000", "WRITE")
	t.Cleanup(func() { origin.Do(t, "CLIENT", "UNPAUSE") })
	w := dialClient(t, p.Addr)
	w.send([]byte("*3\r\n$3\r\nSET\r\n$5\r\nhot:e\r\n$2\r\nv2\r\n"))
	waitFor(t, "the SET held by the pause", func() bool {
		v, _ := metricSum(t, p.Registry, "rproxy_upstream_stalled_connections", nil)
		return v > 0
	})
	for i := range 3 { // the key salted; each copy read once, the origin once
		getDuringPause(t, r, "hot:e", i)
	}
	if misses, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_miss"}); misses != 2 {
		t.Fatalf("%v copy reads missed, want 2", misses)
	}
	origin.Do(t, "CLIENT", "UNPAUSE")
	if rep := string(w.read()); rep != "+OK\r\n" {
		t.Fatalf("SET: %q", rep)
	}
	for i := range 6 {
		if rep := w.do("GET", "hot:e"); rep != "$2\r\nv2\r\n" {
			t.Fatalf("GET %d after the SET was acknowledged: %q", i, rep)
		}
	}
}

// TestClusterSaltedScriptAndTransactionWrites: a client reads its own
// writes to a salted key made by a script (its declared key) or by a
// transaction whose EXEC comes in a later read than the write it queued.
// Before, neither deleted the copies (a script is not flagged write; a
// queued write deleted them when queued, and reads refilled them with the
// value the EXEC then replaced), and with the local tier off nothing else
// would until the copies expired.
func TestClusterSaltedScriptAndTransactionWrites(t *testing.T) {
	_, p, c := startSaltedWithKey(t, "hot:s")
	r := dialClient(t, p.Addr)
	readAll := func(want, what string) {
		t.Helper()
		for i := range 3 { // the origin and each copy
			if rep := c.do("GET", "hot:s"); rep != want {
				t.Fatalf("GET %d after %s: %q, want %q", i, what, rep, want)
			}
		}
	}
	readAll("$1\r\nv\r\n", "SET")
	waitSaltFills(t, p, 2)
	if rep := c.do("EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "hot:s", "v2"); rep != "+OK\r\n" {
		t.Fatalf("EVAL: %q", rep)
	}
	readAll("$2\r\nv2\r\n", "EVAL")
	waitSaltFills(t, p, 4)
	lib := "#!lua name=saltlib\nredis.register_function('setkey', function(keys, args) return redis.call('SET', keys[1], args[1]) end)"
	if rep := c.do("FUNCTION", "LOAD", lib); rep != "$7\r\nsaltlib\r\n" {
		t.Fatalf("FUNCTION LOAD: %q", rep)
	}
	if rep := c.do("FCALL", "setkey", "1", "hot:s", "v3"); rep != "+OK\r\n" {
		t.Fatalf("FCALL: %q", rep)
	}
	readAll("$2\r\nv3\r\n", "FCALL")
	waitSaltFills(t, p, 6)
	c.do("MULTI")
	if rep := c.do("SET", "hot:s", "v4"); rep != "+QUEUED\r\n" {
		t.Fatalf("SET in MULTI: %q", rep)
	}
	for i := range 3 { // another client, before the EXEC: the old value
		if rep := r.do("GET", "hot:s"); rep != "$2\r\nv3\r\n" {
			t.Fatalf("GET %d before the EXEC: %q", i, rep)
		}
	}
	if rep := c.do("EXEC"); rep != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC: %q", rep)
	}
	readAll("$2\r\nv4\r\n", "EXEC")
}

// TestClusterSaltedTransactionLeftOpen: the writes a transaction queued
// hold their key's fills only while it is open: a RESET or the client
// leaving ends it, and the copies fill again.
func TestClusterSaltedTransactionLeftOpen(t *testing.T) {
	for _, end := range []string{"reset", "close"} {
		t.Run(end, func(t *testing.T) {
			_, p, c := startSaltedWithKey(t, "hot:t")
			tx := dialClient(t, p.Addr)
			tx.do("MULTI")
			if rep := tx.do("SET", "hot:t", "v2"); rep != "+QUEUED\r\n" {
				t.Fatalf("SET in MULTI: %q", rep)
			}
			for i := range 3 {
				if rep := c.do("GET", "hot:t"); rep != "$1\r\nv\r\n" {
					t.Fatalf("GET %d: %q", i, rep)
				}
			}
			if n := counterValue(t, p.Registry, "rproxy_hotkey_salt_copy_fills_total", nil); n != 0 {
				t.Fatalf("%v copies filled while a transaction held a write of the key", n)
			}
			if end == "reset" {
				if rep := tx.do("RESET"); rep != "+RESET\r\n" {
					t.Fatalf("RESET: %q", rep)
				}
			} else {
				tx.nc.Close()
			}
			waitFor(t, "the copies filled after the transaction ended", func() bool {
				if rep := c.do("GET", "hot:t"); rep != "$1\r\nv\r\n" {
					t.Fatalf("GET after the transaction ended: %q", rep)
				}
				return counterValue(t, p.Registry, "rproxy_hotkey_salt_copy_fills_total", nil) >= 2
			})
		})
	}
}

// TestClusterSaltedFlushLeavesNoCopy: after a FLUSHDB is acknowledged no
// salted key reads its old value back. Copies are filled on RESP2
// connections and a RESP3 client's FLUSHDB goes on RESP3 ones, so a fill
// sent before the flush could land after it: before, 24 and 50 of these
// 3,600 reads did (RESP2 clients, on the fills' connections, saw none).
func TestClusterSaltedFlushLeavesNoCopy(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second, Prefixes: []string{"k"}}
	})
	a, b := dialClient(t, p.Addr), dialClient(t, p.Addr)
	a.do("HELLO", "3")
	b.do("HELLO", "3")
	var sets, gets [][]string
	for k := range 20 {
		key := "k" + strconv.Itoa(k)
		sets = append(sets, []string{"SET", key, "v"})
		gets = append(gets, []string{"GET", key}, []string{"GET", key}, []string{"GET", key})
	}
	for round := range 60 {
		a.pipeline(sets...)
		a.pipeline(gets...) // fills sent, some still unanswered
		if r := b.do("FLUSHDB"); r != "+OK\r\n" {
			t.Fatalf("FLUSHDB: %q", r)
		}
		for k := range 20 {
			for range 3 {
				if r := a.do("GET", "k"+strconv.Itoa(k)); r != "_\r\n" {
					t.Fatalf("round %d: GET k%d after FLUSHDB: %q", round, k, r)
				}
			}
		}
	}
	if n := counterValue(t, p.Registry, "rproxy_hotkey_salt_copy_fills_total", nil); n == 0 {
		t.Fatal("no copy was filled: the test proves nothing")
	}
}

// TestClusterSaltedReadNotAnsweredByALaterWrite: a salted GET pipelined
// before a SET of its key reads the value from before the SET. A copy that
// missed is answered from the origin, read after the batch's replies are
// in: before, that read saw the batch's own SET (462 of 1,000 GETs read the
// value written after them; go-redis's "pipeline: basic exec" found it).
func TestClusterSaltedReadNotAnsweredByALaterWrite(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second, Prefixes: []string{"k"}}
	})
	dialClient(t, p.Addr).do("SET", "k", "0")
	late := readThenWriteRounds(t, p, "k", 300, func(_ *rawClient, i int) string {
		prev := strconv.Itoa(i - 1)
		return fmt.Sprintf("$%d\r\n%s\r\n", len(prev), prev)
	})
	if late > 0 {
		t.Fatalf("%d of 300 salted GETs read the value their pipeline's SET wrote after them", late)
	}
	if m, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_miss"}); m == 0 {
		t.Fatal("no copy read missed: the test proves nothing")
	}
}

// startSaltedWithKey starts a 3-master cluster and rproxy salting keys
// under "hot:" over three copies read in turn (roundRobin), and sets key
// to "v" through a client it returns.
func startSaltedWithKey(t *testing.T, key string) (*redistest.Cluster, *proxytest.Proxy, *rawClient) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second, Prefixes: []string{"hot:"}, IntN: roundRobin()}
	})
	c := dialClient(t, p.Addr)
	c.do("SET", key, "v")
	return cl, p, c
}

// getDuringPause fails unless GET key (the i-th) answers "v" within 5 s
// of the tests' 20 s write pauses, as Redis answers reads during one.
func getDuringPause(t *testing.T, c *rawClient, key string, i int) {
	t.Helper()
	replied := make(chan string, 1)
	go func() { replied <- c.doErr("GET", key) }()
	select {
	case r := <-replied:
		if r != "$1\r\nv\r\n" {
			t.Fatalf("GET %d during the pause: %q", i, r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("GET %d of a salted key: no reply within 5s of a 20s CLIENT PAUSE WRITE", i)
	}
}

// waitSaltFills waits until n salted copies' fills have been acknowledged
// (in the background: salt.Engine.Settle).
func waitSaltFills(t *testing.T, p *proxytest.Proxy, n float64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%v salted copies filled", n), func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_salt_copy_fills_total", nil) >= n
	})
}
