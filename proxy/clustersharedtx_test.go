package proxy_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
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
	to := otherMaster(t, cl, slot)
	cl.MigrateSlot(t, slot, to)
	return to
}

// migrationOf begins the migration of key's slot to another master, with
// its keys moved (moveKeys of them; all for 0): the source answers ASK for
// a moved key. It returns the migration and its target.
func migrationOf(t *testing.T, cl *redistest.Cluster, key string, moveKeys int) (*redistest.Migration, *redistest.ClusterNode) {
	t.Helper()
	slot := cl.Slot(key)
	to := otherMaster(t, cl, slot)
	m := cl.BeginMigration(t, slot, to)
	if n := m.MoveKeys(t, moveKeys); moveKeys > 0 && n != moveKeys {
		t.Fatalf("moved %d keys, want %d", n, moveKeys)
	}
	return m, to
}

// otherMaster returns a master of cl other than slot's.
func otherMaster(t *testing.T, cl *redistest.Cluster, slot int) *redistest.ClusterNode {
	t.Helper()
	from := cl.MasterForSlot(t, slot)
	for _, m := range cl.Masters() {
		if m.Addr != from.Addr {
			return m
		}
	}
	t.Fatal("no other master")
	return nil
}

// TestClusterSharedTransactionFollowsAMovedSlot: a shared transaction
// whose slot moved since rproxy read the map (Redis redirects each of its
// commands at queue time and discards it at EXEC, running nothing) is sent
// again whole where the redirect says, after ASKING for an ASK, and the
// client gets what one Redis answers; none of its commands is ever sent
// again alone, where it would run outside the transaction. One that Redis
// discarded for another reason as well (a command rproxy refused inside)
// is not sent again: the client gets TRYAGAIN for the redirected commands
// and EXECABORT, and nothing runs. Each case has an rproxy of its own,
// whose map is read before the slot moves and not again on a timer.
func TestClusterSharedTransactionFollowsAMovedSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	start := func() (*proxytest.Proxy, *rawClient) {
		p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.Refresh = time.Hour })
		return p, dialClient(t, p.Addr)
	}
	tx := func(key string) [][]string { return [][]string{{"MULTI"}, {"INCR", key}, {"GET", key}, {"EXEC"}} }
	ran := []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n:11\r\n$2\r\n11\r\n"}
	// The transaction ran once, on the slot's new master, after one
	// redirect of kind.
	ranOnce := func(t *testing.T, p *proxytest.Proxy, to *redistest.ClusterNode, key, kind string) {
		t.Helper()
		if r := string(to.Do(t, "GET", key)); r != "$2\r\n11\r\n" {
			t.Fatalf("the key is %q on its new master, want 11 (the transaction once)", r)
		}
		if n := redirects(t, p, kind); n != 1 {
			t.Errorf("%s redirects followed: %v, want 1 (the transaction, once)", kind, n)
		}
	}

	t.Run("moved", func(t *testing.T) {
		p, c := start()
		const key = "{moved}n"
		to := movedKey(t, cl, c, key)
		if got := sendAll(c, tx(key)...); !slices.Equal(got, ran) {
			t.Fatalf("the transaction on the moved slot: %q, want %q", got, ran)
		}
		ranOnce(t, p, to, key, "moved")
	})
	t.Run("ask", func(t *testing.T) {
		p, c := start()
		const key = "{asked}n"
		if r := c.do("SET", key, "10"); r != "+OK\r\n" {
			t.Fatalf("SET: %q", r)
		}
		m, to := migrationOf(t, cl, key, 0) // the key is on the target; the source answers ASK
		if got := sendAll(c, tx(key)...); !slices.Equal(got, ran) {
			t.Fatalf("the transaction on the migrating slot: %q, want %q", got, ran)
		}
		m.Finish(t)
		ranOnce(t, p, to, key, "ask")
	})
	t.Run("split by a migration", func(t *testing.T) {
		// Two keys of one slot, one moved to the target and one not:
		// Redis answers the EXEC TRYAGAIN on either node, having run
		// nothing. The transaction goes again whole after a pause (up to
		// max_redirects rounds) until the migration has moved both.
		p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.Refresh = time.Hour; c.Cluster.MaxRedirects = 16 })
		c := dialClient(t, p.Addr)
		const a, b = "{split}a", "{split}b"
		if got := sendAll(c, []string{"SET", a, "10"}, []string{"SET", b, "10"}); got[0] != "+OK\r\n" || got[1] != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		m, to := migrationOf(t, cl, a, 1)
		c.send(pipeline([]string{"MULTI"}, []string{"INCR", a}, []string{"INCR", b}, []string{"EXEC"}))
		waitFor(t, "rproxy to meet TRYAGAIN", func() bool { return redirects(t, p, "tryagain") > 0 })
		m.MoveKeys(t, 0)
		c.readPrefixes("+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n:11\r\n:11\r\n")
		m.Finish(t)
		if got := to.Do(t, "MGET", a, b); string(got) != "*2\r\n$2\r\n11\r\n$2\r\n11\r\n" {
			t.Fatalf("the keys are %q on their new master, want 11 and 11 (the transaction once)", got)
		}
	})
	t.Run("refused inside", func(t *testing.T) {
		_, c := start()
		const key = "{refused}n"
		to := movedKey(t, cl, c, key)
		slot := strconv.Itoa(cl.Slot(key))
		tryAgain := "-TRYAGAIN rproxy: slot " + slot + " is moving between the cluster's masters; try again\r\n"
		got := sendAll(c, []string{"MULTI"}, []string{"GET"}, []string{"INCR", key}, []string{"EXEC"})
		want := []string{"+OK\r\n", "-ERR wrong number of arguments for 'get' command\r\n", tryAgain,
			"-EXECABORT Transaction discarded because of previous errors.\r\n"}
		if !slices.Equal(got, want) {
			t.Fatalf("the transaction: %q, want %q", got, want)
		}
		if r := string(to.Do(t, "GET", key)); r != "$2\r\n10\r\n" {
			t.Fatalf("after the discarded transaction the key is %q on its new master, want 10: a command ran outside it", r)
		}
		// The MOVED corrected the map: the client's retry runs.
		if got := sendAll(c, tx(key)...); !slices.Equal(got, ran) {
			t.Fatalf("the retry: %q, want %q", got, ran)
		}
	})
}

// TestClusterPinnedSessionFollowsAMovedSlot: a pinned session's batch
// whose every command meets a MOVED (its slot moved since rproxy read the
// map), on a pin that held nothing from before, runs again on a
// connection to the master the MOVED names, as a cluster client retries
// it, and the MOVED corrects rproxy's map: a WATCH, a blocking command, a
// transaction's first command (with its MULTI). Or all after an ASK, on
// the importing node, where every command of the session runs after
// ASKING from then on. A pin that holds state (a WATCH, an open
// transaction) cannot move: a key that moved since is answered as one
// Redis would (pinmoved.go): a command outside the transaction runs on the
// shared connections, one queued in it is +QUEUED, and the EXEC fails as
// for a watched key that changed, or without a WATCH runs the transaction
// again whole where the key is. Before, each got TRYAGAIN, and after a
// MOVED the map stayed stale until its next timed read
// (upstream.cluster.refresh, 10 s by default), every retry getting
// TRYAGAIN until then; after an ASK, until the migration ended.
func TestClusterPinnedSessionFollowsAMovedSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	start := func() *rawClient {
		p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.Refresh = time.Hour })
		return dialClient(t, p.Addr)
	}
	// An optimistic update of key, whose slot moves just before it.
	watchUpdate := func(t *testing.T, c *rawClient, key string) {
		t.Helper()
		to := movedKey(t, cl, c, key)
		got := sendAll(c, []string{"WATCH", key}, []string{"GET", key})
		got = append(got, sendAll(c, []string{"MULTI"}, []string{"SET", key, "11"}, []string{"EXEC"})...)
		if want := []string{"+OK\r\n", "$2\r\n10\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"}; !slices.Equal(got, want) {
			t.Fatalf("WATCH, GET, then MULTI, SET, EXEC on the moved slot: %q, want %q", got, want)
		}
		if r := string(to.Do(t, "GET", key)); r != "$2\r\n11\r\n" {
			t.Fatalf("the key is %q on its new master, want 11", r)
		}
	}
	t.Run("watch", func(t *testing.T) { watchUpdate(t, start(), "{pinwatch}n") })
	t.Run("watch, passthrough", func(t *testing.T) {
		// As a Redis user, whose connections have a slot map of their own
		// (read through rproxy's): the map routing reads learns the MOVED
		// too, or the GET after the WATCH, on the pin's new master, is
		// taken for another master's key (CROSSSLOT).
		for _, m := range cl.Masters() {
			m.Do(t, "ACL", "SETUSER", "pinapp", "on", ">pinpw", "~*", "+@all")
		}
		p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Cluster.Refresh = time.Hour; c.AuthPassthrough = true })
		c := dialClient(t, p.Addr)
		if r := c.do("AUTH", "pinapp", "pinpw"); r != "+OK\r\n" {
			t.Fatalf("AUTH: %q", r)
		}
		watchUpdate(t, c, "{pinuser}n")
	})
	t.Run("blocking", func(t *testing.T) {
		c := start()
		const key = "{pinlist}l"
		if r := c.do("RPUSH", key, "job"); r != ":1\r\n" {
			t.Fatalf("RPUSH: %q", r)
		}
		slot := cl.Slot(key)
		cl.MigrateSlot(t, slot, otherMaster(t, cl, slot))
		if r := c.do("BLPOP", key, "5"); r != "*2\r\n$10\r\n{pinlist}l\r\n$3\r\njob\r\n" {
			t.Fatalf("BLPOP on the moved slot: %q", r)
		}
	})
	t.Run("asked", func(t *testing.T) {
		// During a migration, with the keys moved already: the source
		// answers ASK. A BLPOP runs after ASKING on the target; so do a
		// WATCH and what follows it, the watch holding there (another
		// client's write makes the EXEC fail), and a transaction typed
		// command by command.
		c := start()
		const key, n = "{pinask}l", "{pinask}n"
		if got := sendAll(c, []string{"RPUSH", key, "job"}, []string{"SET", n, "10"}); got[0] != ":1\r\n" || got[1] != "+OK\r\n" {
			t.Fatalf("RPUSH, SET: %q", got)
		}
		m, to := migrationOf(t, cl, key, 0)
		if r := c.do("BLPOP", key, "5"); r != "*2\r\n$9\r\n{pinask}l\r\n$3\r\njob\r\n" {
			t.Fatalf("BLPOP of a key moved in a migration: %q", r)
		}
		var got []string
		for _, cmd := range [][]string{{"WATCH", n}, {"GET", n}, {"MULTI"}, {"SET", n, "11"}, {"EXEC"}} {
			got = append(got, c.do(cmd...))
		}
		if want := []string{"+OK\r\n", "$2\r\n10\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"}; !slices.Equal(got, want) {
			t.Fatalf("WATCH, GET, MULTI, SET, EXEC of a key moved in a migration: %q, want %q", got, want)
		}
		other := dialClient(t, to.Addr)
		got = sendAll(c, []string{"WATCH", n}, []string{"GET", n})
		other.pipeline([]string{"ASKING"}, []string{"SET", n, "12"})
		got = append(got, sendAll(c, []string{"MULTI"}, []string{"SET", n, "13"}, []string{"EXEC"})...)
		if want := []string{"+OK\r\n", "$2\r\n11\r\n", "+OK\r\n", "+QUEUED\r\n", "*-1\r\n"}; !slices.Equal(got, want) {
			t.Fatalf("the same with another client's write after the WATCH: %q, want %q", got, want)
		}
		got = got[:0]
		for _, cmd := range [][]string{{"MULTI"}, {"INCR", n}, {"GET", n}, {"EXEC"}} {
			got = append(got, c.do(cmd...))
		}
		if want := []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n:13\r\n$2\r\n13\r\n"}; !slices.Equal(got, want) {
			t.Fatalf("MULTI, INCR, GET, EXEC, each alone: %q, want %q", got, want)
		}
		m.Finish(t)
		if r := string(to.Do(t, "GET", n)); r != "$2\r\n13\r\n" {
			t.Fatalf("the key is %q on its new master, want 13", r)
		}
	})
	t.Run("transaction", func(t *testing.T) {
		// Typed command by command: the MULTI goes with the first
		// command, and both follow the MOVED.
		c := start()
		const key = "{pintx}n"
		movedKey(t, cl, c, key)
		var got []string
		for _, cmd := range [][]string{{"MULTI"}, {"INCR", key}, {"EXEC"}} {
			got = append(got, c.do(cmd...))
		}
		if want := []string{"+OK\r\n", "+QUEUED\r\n", "*1\r\n:11\r\n"}; !slices.Equal(got, want) {
			t.Fatalf("MULTI, INCR, EXEC on the moved slot: %q, want %q", got, want)
		}
	})
	t.Run("blocking, client leaves", func(t *testing.T) {
		// One that waits on the new master: a client that leaves still
		// ends its wait there, as Redis unblocks a client that
		// disconnects.
		c := start()
		to := movedKey(t, cl, c, "{pinwait}x")
		c.send(resp.AppendCommandString(nil, "BLPOP", "{pinwait}empty", "0"))
		blocked := func() bool { // a client blocked (flag b) in a BLPOP
			for _, line := range strings.Split(string(to.Do(t, "CLIENT", "LIST")), "\n") {
				if strings.Contains(line, " flags=b ") && strings.Contains(line, " cmd=blpop ") {
					return true
				}
			}
			return false
		}
		waitFor(t, "the BLPOP to wait on the slot's new master", blocked)
		c.nc.Close()
		waitFor(t, "the BLPOP to end once its client left", func() bool { return !blocked() })
	})
	t.Run("held", func(t *testing.T) {
		// A WATCH on another key of the old master holds the pin: the GET
		// of the moved key runs on the shared connections, which follow
		// the MOVED.
		c := start()
		const key = "{pinheld}n"
		watched := "w0"
		for i := 1; cl.MasterForSlot(t, cl.Slot(watched)).Addr != cl.MasterForSlot(t, cl.Slot(key)).Addr || cl.Slot(watched) == cl.Slot(key); i++ {
			watched = "w" + strconv.Itoa(i)
		}
		if r := c.do("WATCH", watched); r != "+OK\r\n" {
			t.Fatalf("WATCH: %q", r)
		}
		movedKey(t, cl, dialClient(t, cl.MasterForSlot(t, cl.Slot(key)).Addr), key)
		if got := sendAll(c, []string{"GET", key}, []string{"UNWATCH"}, []string{"GET", key}); !slices.Equal(got, []string{"$2\r\n10\r\n", "+OK\r\n", "$2\r\n10\r\n"}) {
			t.Fatalf("GET on the moved slot while a WATCH holds the pin, UNWATCH, GET: %q", got)
		}
	})
	t.Run("watched, then moved", func(t *testing.T) {
		// The key moves after the WATCH: the GET follows it, and the EXEC
		// fails as for a watched key that changed (the move deleted it on
		// the node watching it). The client's retry runs on the new master.
		c := start()
		const key = "{pinwm}n"
		if got := sendAll(c, []string{"SET", key, "10"}, []string{"WATCH", key}); got[1] != "+OK\r\n" {
			t.Fatalf("SET, WATCH: %q", got)
		}
		slot := cl.Slot(key)
		to := otherMaster(t, cl, slot)
		cl.MigrateSlot(t, slot, to)
		got := []string{c.do("GET", key)}
		got = append(got, sendAll(c, []string{"MULTI"}, []string{"SET", key, "11"}, []string{"EXEC"})...)
		if want := []string{"$2\r\n10\r\n", "+OK\r\n", "+QUEUED\r\n", "*-1\r\n"}; !slices.Equal(got, want) {
			t.Fatalf("GET, then MULTI, SET, EXEC after the watched key moved: %q, want %q", got, want)
		}
		watchUpdate := [][]string{{"WATCH", key}, {"GET", key}, {"MULTI"}, {"SET", key, "11"}, {"EXEC"}}
		if got := sendAll(c, watchUpdate...); got[4] != "*1\r\n+OK\r\n" {
			t.Fatalf("the retry: %q", got)
		}
		if r := string(to.Do(t, "GET", key)); r != "$2\r\n11\r\n" {
			t.Fatalf("the key is %q on its new master, want 11", r)
		}
	})
	t.Run("queued, then moved", func(t *testing.T) {
		// The key moves while a transaction typed command by command is
		// open: the command after is answered +QUEUED, and at EXEC the
		// transaction runs again whole on the new master; or its EXEC
		// meets the redirect itself.
		c := start()
		for _, redirected := range []string{"GET", "EXEC"} {
			key := "{pinqm" + redirected + "}n"
			if r := c.do("SET", key, "10"); r != "+OK\r\n" {
				t.Fatalf("SET: %q", r)
			}
			got := []string{c.do("MULTI"), c.do("INCR", key)}
			slot := cl.Slot(key)
			to := otherMaster(t, cl, slot)
			cl.MigrateSlot(t, slot, to)
			want := []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n:11\r\n$2\r\n11\r\n"}
			if redirected == "GET" {
				got = append(got, c.do("GET", key))
			} else {
				want = []string{"+OK\r\n", "+QUEUED\r\n", "*1\r\n:11\r\n"}
			}
			got = append(got, c.do("EXEC"))
			if !slices.Equal(got, want) {
				t.Fatalf("MULTI, INCR, the move, then %s: %q, want %q", redirected, got, want)
			}
			if r := string(to.Do(t, "GET", key)); r != "$2\r\n11\r\n" {
				t.Fatalf("the key is %q on its new master, want 11 (the transaction once)", r)
			}
		}
	})
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

// TestClusterTransactionEdgesInOneWriteMatchRedis: on a cluster,
// transactions sent in one write with keys of one slot (shared), or with
// what keeps them pinned (a blocking command, a nested MULTI, a WATCH, a
// script, no key, an EXEC in a later write), or that Redis refuses in
// part, get what one Redis answers, and leave the session out of any
// transaction (keys of three hash tags).
func TestClusterTransactionEdgesInOneWriteMatchRedis(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	direct := redistest.Start(t)
	p := startClusterProxy(t, cl)
	var seqs [][][]string
	for i := range 3 {
		k := func(name string) string { return "{e" + strconv.Itoa(i) + "}" + name }
		seqs = append(seqs,
			[][]string{{"MULTI"}, {"SET", k("a"), "1"}, {"MGET", k("a"), k("b")}, {"EXEC"}, {"GET", k("a")}},
			[][]string{{"MULTI"}, {"SET", k("a"), "1"}, {"EXEC", "x"}, {"EXEC"}, {"GET", k("a")}},
			[][]string{{"MULTI"}, {"SET", k("a")}, {"INCR", k("n")}, {"EXEC"}, {"GET", k("n")}},
			[][]string{{"MULTI"}, {"SET", k("d"), "1"}, {"DISCARD"}, {"GET", k("d")}},
			[][]string{{"MULTI"}, {"LPUSH", k("l"), "x"}, {"BLPOP", k("l"), "1"}, {"EXEC"}},
			[][]string{{"MULTI"}, {"MULTI"}, {"INCR", k("m")}, {"EXEC"}, {"GET", k("m")}},
			[][]string{{"MULTI"}, {"WATCH", k("w")}, {"INCR", k("w")}, {"EXEC"}},
			[][]string{{"MULTI"}, {"EVAL", "return redis.call('INCR', KEYS[1])", "1", k("s")}, {"INCR", k("s")}, {"EXEC"}},
			[][]string{{"MULTI"}, {"PING"}, {"ECHO", "e"}, {"EXEC"}},
			[][]string{{"MULTI"}, {"INCR", k("later")}},
		)
	}
	transactionsMatch(t, direct.Addr, p.Addr, seqs)
}
