package proxy_test

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// The tests here are what the client-scenario suite's cluster mode found
// (make test-client-suite): a client of rproxy in front of a cluster sees
// one server, so what one Redis answers must not depend on which master
// rproxy picked.

// TestClusterPublishCountsSubscribers: PUBLISH answers how many clients
// received the message, and PUBSUB NUMSUB how many are subscribed, as one
// Redis does, for subscribers through rproxy. A cluster node counts only
// its own subscribers, so before, PUBLISH went to the masters in turn and
// answered 0 on two of three.
func TestClusterPublishCountsSubscribers(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	channels, _ := keyPerMaster(t, cl, "news") // one channel per master's slots
	pub := dialClient(t, p.Addr)
	for _, ch := range channels {
		subs := []*rawClient{dialClient(t, p.Addr), dialClient(t, p.Addr)}
		subs[0].send(resp.AppendCommandString(nil, "SUBSCRIBE", ch))
		subs[0].readPrefixes("*3\r\n$9\r\nsubscribe\r\n")
		// A channel then a pattern that matches it: two receptions.
		subs[1].send(resp.AppendCommandString(nil, "SUBSCRIBE", ch))
		subs[1].readPrefixes("*3\r\n$9\r\nsubscribe\r\n")
		subs[1].send(resp.AppendCommandString(nil, "PSUBSCRIBE", ch+"*"))
		subs[1].readPrefixes("*3\r\n$10\r\npsubscribe\r\n")
		for i := range 6 { // keyless commands went to the masters in turn
			if r := pub.do("PUBLISH", ch, "m"+strconv.Itoa(i)); r != ":3\r\n" {
				t.Errorf("PUBLISH %s #%d = %q, want :3 (two channel subscriptions and a pattern)", ch, i, r)
			}
			for _, s := range subs {
				s.readPrefixes("*3\r\n$7\r\nmessage\r\n")
			}
			subs[1].readPrefixes("*4\r\n$8\r\npmessage\r\n")
		}
	}
	// Every master's subscribers together: PUBSUB NUMSUB and CHANNELS.
	want := fmt.Sprintf("*%d\r\n", 2*len(channels))
	for _, ch := range channels {
		want += fmt.Sprintf("$%d\r\n%s\r\n:2\r\n", len(ch), ch)
	}
	if r := pub.do(append([]string{"PUBSUB", "NUMSUB"}, channels...)...); r != want {
		t.Errorf("PUBSUB NUMSUB %q = %q, want 2 subscribers each", channels, r)
	}
	if r := pub.do("PUBSUB", "NUMPAT"); r != fmt.Sprintf(":%d\r\n", len(channels)) {
		t.Errorf("PUBSUB NUMPAT = %q, want %d (one pattern per channel)", r, len(channels))
	}
	for _, proto := range []string{"2", "3"} {
		c := dialClient(t, p.Addr)
		c.do("HELLO", proto)
		v, err := resp.Parse([]byte(c.do("PUBSUB", "CHANNELS", "news*")))
		var got []string
		for _, e := range v.Elems {
			got = append(got, string(e.Str))
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, slices.Sorted(slices.Values(channels))) {
			t.Errorf("RESP%s: PUBSUB CHANNELS news* = %q (%v), want %q", proto, got, err, channels)
		}
	}
}

// TestClusterPublishCountsSubscribersInStreamMode: the same counts for
// clients in stream mode (RESP3 with client tracking on, rueidis's default,
// whose connection rproxy pins to one master): their SUBSCRIBEs and
// PUBLISHes go to the pub/sub master too. Before 2026-12-01 a session's
// connection went to the master of the last key it had used, and
// rueidiscompat's "PubSub should pub/sub" got PUBLISH 0.
func TestClusterPublishCountsSubscribersInStreamMode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "k")
	n := 0
	tracking := func() *rawClient {
		c := dialClient(t, p.Addr)
		c.do("HELLO", "3")
		// A key read first, of each master in turn: rueidis's connections
		// have read keys before they subscribe.
		c.do("GET", keys[n%len(keys)])
		n++
		if r := c.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
			t.Fatalf("CLIENT TRACKING ON = %q", r)
		}
		return c
	}
	var subs []*rawClient
	for range 3 {
		s := tracking()
		s.send(resp.AppendCommandString(nil, "SUBSCRIBE", "ch"))
		s.readPrefixes(">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")
		subs = append(subs, s)
	}
	pubs := []*rawClient{dialClient(t, p.Addr), tracking(), tracking(), tracking()}
	for i, pub := range pubs {
		if r := pub.do("PUBLISH", "ch", "m"); r != ":3\r\n" {
			t.Errorf("PUBLISH from publisher %d (0: plain, others tracking) = %q, want :3", i, r)
		}
		for _, s := range subs {
			s.readPrefixes(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n")
		}
		if r := pub.do("PUBSUB", "NUMSUB", "ch"); !strings.HasSuffix(r, "$2\r\nch\r\n:3\r\n") {
			t.Errorf("PUBSUB NUMSUB ch from publisher %d = %q, want ch 3", i, r)
		}
	}
	// A subscriber publishing (rueidis's one connection to a node does
	// both), to its own channel and a pattern's.
	for range 3 {
		s := tracking()
		s.send(resp.AppendCommandString(nil, "SUBSCRIBE", "own"))
		s.readPrefixes(">3\r\n$9\r\nsubscribe\r\n$3\r\nown\r\n:1\r\n")
		s.send(resp.AppendCommandString(nil, "PSUBSCRIBE", "pat*"))
		s.readPrefixes(">3\r\n$10\r\npsubscribe\r\n$4\r\npat*\r\n:2\r\n")
		s.send(resp.AppendCommandString(nil, "PUBLISH", "own", "m"))
		s.readPrefixes(">3\r\n$7\r\nmessage\r\n$3\r\nown\r\n$1\r\nm\r\n", ":1\r\n")
		s.send(resp.AppendCommandString(nil, "PUBLISH", "pat1", "m"))
		s.readPrefixes(">4\r\n$8\r\npmessage\r\n$4\r\npat*\r\n$4\r\npat1\r\n$1\r\nm\r\n", ":1\r\n")
		s.do("RESET")
	}
}

// TestClusterClientUnblockOnAnyMaster: CLIENT UNBLOCK ends a BLPOP whichever
// master the blocked client's key is on, outside MULTI (round 0) and inside
// (round 1, answered in EXEC's array). Before, it went to any master,
// which knew no such client (:0), and the BLPOP waited on. Rounds 2 and
// 3: the blocked client is in stream mode (RESP3, tracking on, as rueidis
// connects), its BLPOP on its pin's master or on a branch to another, and
// CLIENT LIST shows it blocked there too (before 2026-12-01, never);
// in round 3 the client that unblocks it is in stream mode too (before,
// its CLIENT UNBLOCK went to its own connection's master: :0 elsewhere).
func TestClusterClientUnblockOnAnyMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "queue")
	c := dialClient(t, p.Addr)
	for round := range 4 {
		if round == 3 {
			c.do("HELLO", "3")
			c.do("CLIENT", "TRACKING", "ON")
		}
		// Not in the masters' order: keyless commands go to the masters
		// in turn, and could meet the blocked one by chance.
		for _, i := range []int{0, 2, 1} {
			k := keys[i]
			blocked := dialClient(t, p.Addr)
			if round >= 2 {
				blocked.do("HELLO", "3")
				blocked.do("CLIENT", "TRACKING", "ON")
			}
			id := strings.TrimSuffix(strings.TrimPrefix(blocked.do("CLIENT", "ID"), ":"), "\r\n")
			blocked.send(resp.AppendCommandString(nil, "BLPOP", k, "0"))
			waitFor(t, "the BLPOP blocked", func() bool {
				return strings.Contains(c.do("CLIENT", "LIST", "ID", id), "flags=b")
			})
			if round >= 2 {
				if r := c.do("CLIENT", "UNBLOCK", id); r != ":1\r\n" {
					t.Fatalf("round %d: CLIENT UNBLOCK of a stream-mode BLPOP on %s = %q, want :1", round, k, r)
				}
				if r := string(blocked.read()); r != "_\r\n" {
					t.Fatalf("round %d: the unblocked stream-mode BLPOP on %s got %q, want RESP3's null", round, k, r)
				}
				waitFor(t, "the b flag gone", func() bool {
					return !strings.Contains(c.do("CLIENT", "LIST", "ID", id), "flags=b")
				})
				continue
			}
			if round == 0 {
				if r := c.do("CLIENT", "UNBLOCK", id); r != ":1\r\n" {
					t.Fatalf("round %d: CLIENT UNBLOCK of a BLPOP on %s = %q, want :1", round, k, r)
				}
			} else if r := c.pipeline([]string{"MULTI"}, []string{"CLIENT", "UNBLOCK", id}, []string{"EXEC"}); r != "+OK\r\n+QUEUED\r\n*1\r\n:1\r\n" {
				// Inside MULTI: answered in EXEC's array, by the blocked
				// connection's master.
				t.Fatalf("round %d: MULTI, CLIENT UNBLOCK of a BLPOP on %s, EXEC = %q, want :1 in EXEC's array", round, k, r)
			}
			if r := string(blocked.read()); r != "*-1\r\n" {
				t.Fatalf("round %d: the unblocked BLPOP on %s got %q, want the timeout's null", round, k, r)
			}
		}
	}
}

// TestClusterScriptCacheAsOneServer: after an EVAL, EVALSHA of its script
// runs on every master's keys and SCRIPT EXISTS says 1, as on one Redis,
// where EVAL leaves the script in the server's cache; SCRIPT EXISTS says 1
// only for a script every master has (one EVALSHA could otherwise get
// NOSCRIPT), and SCRIPT FLUSH empties every cache.
func TestClusterScriptCacheAsOneServer(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "counter")
	c := dialClient(t, p.Addr)
	const body = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
	sum := sha1.Sum([]byte(body))
	sha := hex.EncodeToString(sum[:])
	exists := func(want string) {
		t.Helper()
		if r := c.do("SCRIPT", "EXISTS", sha, "0000000000000000000000000000000000000000"); r != "*2\r\n"+want+":0\r\n" {
			t.Errorf("SCRIPT EXISTS = %q, want %q then :0", r, want)
		}
	}
	for round := range 2 {
		exists(":0\r\n")
		if r := c.do("EVAL", body, "1", keys[0], "1"); r != ":"+strconv.Itoa(round+1)+"\r\n" {
			t.Fatalf("EVAL = %q", r)
		}
		exists(":1\r\n")
		for _, k := range keys[1:] {
			if r := c.do("EVALSHA", sha, "1", k, "1"); r != ":"+strconv.Itoa(round+1)+"\r\n" {
				t.Errorf("round %d: EVALSHA on %s after an EVAL on %s = %q", round, k, keys[0], r)
			}
		}
		if r := c.do("SCRIPT", "FLUSH"); r != "+OK\r\n" {
			t.Fatalf("SCRIPT FLUSH = %q", r)
		}
	}
	// A script one master has and the others not.
	m := cl.Masters()[1]
	if r := string(m.Do(t, "SCRIPT", "LOAD", body)); r != fmt.Sprintf("$40\r\n%s\r\n", sha) {
		t.Fatalf("SCRIPT LOAD on %s = %q", m.Addr, r)
	}
	for range 3 { // from whichever master a keyless command would go to
		exists(":0\r\n")
	}
	// SCRIPT FLUSH through rproxy forgot what EVAL had loaded: the next
	// EVAL loads it everywhere again.
	if r := c.do("EVAL", body, "1", keys[0], "0"); r != ":2\r\n" {
		t.Fatalf("EVAL after SCRIPT FLUSH = %q", r)
	}
	exists(":1\r\n")
	// A SCRIPT FLUSH inside MULTI runs on the transaction's master only,
	// and still makes the next EVAL load the script everywhere: flushed
	// on every master that way, EVALSHA after EVAL runs on every key.
	for try := 0; ; try++ {
		if r := c.pipeline([]string{"MULTI"}, []string{"SCRIPT", "FLUSH"}, []string{"EXEC"}); r != "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n" {
			t.Fatalf("MULTI SCRIPT FLUSH EXEC = %q", r)
		}
		flushed := 0
		for _, m := range cl.Masters() {
			if string(m.Do(t, "SCRIPT", "EXISTS", sha)) == "*1\r\n:0\r\n" {
				flushed++
			}
		}
		if flushed == len(cl.Masters()) {
			break
		}
		if try == 20 {
			t.Fatalf("20 transactions' SCRIPT FLUSH left the script on %d masters", len(cl.Masters())-flushed)
		}
	}
	if r := c.do("EVAL", body, "1", keys[0], "0"); r != ":2\r\n" {
		t.Fatalf("EVAL after SCRIPT FLUSH in transactions = %q", r)
	}
	for _, k := range keys[1:] {
		if r := c.do("EVALSHA", sha, "1", k, "0"); !strings.HasPrefix(r, ":") {
			t.Errorf("EVALSHA on %s after SCRIPT FLUSH in a transaction and an EVAL = %q", k, r)
		}
	}
}

// TestClusterServerSettingsOnEveryMaster: CONFIG SET, ACL SETUSER and
// DELUSER, SAVE, BGSAVE, CLIENT PAUSE and UNPAUSE through rproxy change
// every master, as
// they change the one Redis a client thinks it talks to, and DEBUG OBJECT
// goes to its key's master. Before, each went to one master in turn: the
// go-redis suite through rproxy on a cluster then had one master left
// requiring the password its tests had set (CONFIG SET requirepass), and 35
// later tests failed there.
func TestClusterServerSettingsOnEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0, "--enable-debug-command", "yes")
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "setting")
	c := dialClient(t, p.Addr)
	masters := cl.Masters()
	onEvery := func(what string, args []string, want string) {
		t.Helper()
		for _, m := range masters {
			if r := string(m.Do(t, args...)); r != want {
				t.Errorf("%s: %q on %s = %q, want %q", what, args, m.Addr, r, want)
			}
		}
	}

	if r := c.do("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"); r != "+OK\r\n" {
		t.Fatalf("CONFIG SET = %q", r)
	}
	onEvery("after CONFIG SET", []string{"CONFIG", "GET", "maxmemory-policy"}, "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lfu\r\n")
	for _, k := range keys {
		c.do("SET", k, "v")
		if r := c.do("OBJECT", "FREQ", k); !strings.HasPrefix(r, ":") {
			t.Errorf("OBJECT FREQ %s after CONFIG SET maxmemory-policy allkeys-lfu = %q", k, r)
		}
		if r := c.do("DEBUG", "OBJECT", k); !strings.HasPrefix(r, "+Value at:") {
			t.Errorf("DEBUG OBJECT %s = %q", k, r)
		}
	}
	if r := c.do("CONFIG", "SET", "maxmemory-policy", "noeviction"); r != "+OK\r\n" {
		t.Fatalf("CONFIG SET back = %q", r)
	}
	onEvery("after CONFIG SET back", []string{"CONFIG", "GET", "maxmemory-policy"}, "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n")

	// A node's own settings (its address, its files) are refused: the same
	// value on every master would break the cluster. Nothing changes.
	for _, args := range [][]string{
		{"CONFIG", "SET", "cluster-announce-ip", "10.0.0.1"},
		{"CONFIG", "SET", "maxmemory-policy", "allkeys-lru", "PORT", "7000"},
	} {
		if r := c.do(args...); !strings.HasPrefix(r, "-ERR rproxy: CONFIG SET ") || !strings.Contains(r, "each cluster node's own setting") {
			t.Errorf("%q = %q, want rproxy's refusal", args, r)
		}
	}
	onEvery("after a refused CONFIG SET", []string{"CONFIG", "GET", "maxmemory-policy"}, "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n")
	onEvery("after a refused CONFIG SET", []string{"CONFIG", "GET", "cluster-announce-ip"}, "*2\r\n$19\r\ncluster-announce-ip\r\n$0\r\n\r\n")

	if r := c.do("ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all"); r != "+OK\r\n" {
		t.Fatalf("ACL SETUSER = %q", r)
	}
	onEvery("after ACL SETUSER", []string{"AUTH", "alice", "pw"}, "+OK\r\n")
	if r := c.do("ACL", "DELUSER", "alice"); r != ":1\r\n" {
		t.Errorf("ACL DELUSER = %q, want :1 (one user deleted, as on one Redis)", r)
	}
	onEvery("after ACL DELUSER", []string{"ACL", "GETUSER", "alice"}, "$-1\r\n")

	// SAVE and BGSAVE persist every master's part of the data; LASTSAVE is
	// when all of it was last saved.
	saves := func(m *redistest.ClusterNode) string {
		for _, line := range strings.Split(string(m.Do(t, "INFO", "persistence")), "\r\n") {
			if v, ok := strings.CutPrefix(line, "rdb_saves:"); ok {
				return v
			}
		}
		return ""
	}
	if r := c.do("SAVE"); r != "+OK\r\n" {
		t.Fatalf("SAVE = %q", r)
	}
	least := ""
	for _, m := range masters {
		if n := saves(m); n != "1" {
			t.Errorf("%s: rdb_saves:%s after SAVE, want 1", m.Addr, n)
		}
		if ls := string(m.Do(t, "LASTSAVE")); least == "" || ls < least {
			least = ls // same length: Unix times
		}
	}
	if r := c.do("LASTSAVE"); r != least {
		t.Errorf("LASTSAVE = %q, want the earliest master's, %q", r, least)
	}
	if r := c.do("BGSAVE"); r != "+Background saving started\r\n" {
		t.Fatalf("BGSAVE = %q", r)
	}
	for _, m := range masters {
		waitFor(t, m.Addr+"'s BGSAVE", func() bool { return saves(m) == "2" })
	}

	// LATENCY LATEST: an event once, with the highest spike any master saw.
	if r := c.do("CONFIG", "SET", "latency-monitor-threshold", "1"); r != "+OK\r\n" {
		t.Fatalf("CONFIG SET latency-monitor-threshold = %q", r)
	}
	for i, m := range masters {
		m.Do(t, "DEBUG", "SLEEP", []string{"0.005", "0.06", "0.01"}[i%3])
	}
	for range 3 { // whichever master a keyless command would go to
		v, err := resp.Parse([]byte(c.do("LATENCY", "LATEST")))
		if err != nil || len(v.Elems) != 1 || len(v.Elems[0].Elems) != 4 || string(v.Elems[0].Elems[0].Str) != "command" {
			t.Fatalf("LATENCY LATEST = %+v (%v), want one command event", v, err)
		}
		if most := v.Elems[0].Elems[3].Int; most < 60 {
			t.Errorf("LATENCY LATEST's all-time maximum = %d ms, want the 60 ms sleep's", most)
		}
	}

	// CLIENT PAUSE: a write straight to any master waits until the
	// UNPAUSE through rproxy.
	if r := c.do("CLIENT", "PAUSE", "30000", "WRITE"); r != "+OK\r\n" {
		t.Fatalf("CLIENT PAUSE = %q", r)
	}
	writers := make([]net.Conn, len(masters))
	for i, m := range masters {
		conn, err := net.Dial("tcp", m.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		writers[i] = conn
		if _, err := conn.Write(resp.AppendCommandString(nil, "SET", keys[i], "paused")); err != nil { // the master's own key
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	for i, conn := range writers {
		conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := conn.Read(buf); err == nil {
			t.Errorf("%s answered a write during CLIENT PAUSE: %q", masters[i].Addr, buf[:n])
		}
	}
	if r := c.do("CLIENT", "UNPAUSE"); r != "+OK\r\n" {
		t.Fatalf("CLIENT UNPAUSE = %q", r)
	}
	for i, conn := range writers {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(buf); err != nil {
			t.Errorf("%s after CLIENT UNPAUSE: %v", masters[i].Addr, err)
		} else if string(buf[:n]) != "+OK\r\n" {
			t.Errorf("%s after CLIENT UNPAUSE: %q", masters[i].Addr, buf[:n])
		}
	}
}

// TestClusterInfoIsTheWholeData: INFO through rproxy on a cluster counts
// every master's keys, commands and errors, as one Redis holding all the
// data would; the rest is one master's, and rproxy's own figures (clients,
// the # Proxy section) are added as on one server. Before, INFO came from
// one master in turn: go-redis's suite read a command's count from a master
// it had not run on.
func TestClusterInfoIsTheWholeData(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "info")
	c := dialClient(t, p.Addr)
	if r := c.do("CONFIG", "RESETSTAT"); r != "+OK\r\n" {
		t.Fatalf("CONFIG RESETSTAT = %q", r)
	}
	for _, k := range keys {
		c.do("SET", k, "v", "EX", "1000")
		c.do("INCR", k) // an error on every master
	}
	field := func(text, name string) string {
		for _, line := range strings.Split(text, "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return v
			}
		}
		return "<none>"
	}
	for _, proto := range []string{"2", "3"} {
		c.do("HELLO", proto)
		for range 3 { // whichever master a keyless command would go to
			info := c.do("INFO", "everything")
			n := strconv.Itoa(len(keys))
			if v := field(info, "db0"); !strings.HasPrefix(v, "keys="+n+",expires="+n+",") {
				t.Errorf("RESP%s: db0:%s, want keys=%s,expires=%s", proto, v, n, n)
			}
			if v := field(info, "cmdstat_set"); !strings.HasPrefix(v, "calls="+n+",") {
				t.Errorf("RESP%s: cmdstat_set:%s, want calls=%s", proto, v, n)
			}
			if v := field(info, "errorstat_ERR"); v != "count="+n {
				t.Errorf("RESP%s: errorstat_ERR:%s, want count=%s", proto, v, n)
			}
			if v := field(info, "connected_clients"); v != "1" {
				t.Errorf("RESP%s: connected_clients:%s, want rproxy's one client", proto, v)
			}
			if !strings.Contains(info, "# Proxy\r\n") {
				t.Errorf("RESP%s: no # Proxy section", proto)
			}
		}
	}
	// A client blocked on any master's key is one of INFO's blocked_clients:
	// the client suites wait on it before they push.
	for _, k := range keys {
		dialClient(t, p.Addr).send(resp.AppendCommandString(nil, "BLPOP", k+"-list", "0"))
	}
	want := strconv.Itoa(len(keys))
	waitFor(t, "INFO's blocked_clients:"+want, func() bool {
		return field(c.do("INFO", "clients"), "blocked_clients") == want
	})
}

// TestClusterScriptKillWhereItRuns: SCRIPT KILL stops a script whichever
// master runs it, as on one Redis (killOutOfBand asks every master). No
// cluster test covered it when Redis's Tcl suite first ran in cluster
// mode, whose unit/multi kills a script that way. The same from a client
// in stream mode (RESP3, tracking on: rueidis's default), which before
// 2026-12-01 sent it to its own connection's master alone (a FUNCTION KILL
// of rueidiscompat's suite left a function running on another for good).
func TestClusterScriptKillWhereItRuns(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0, "--busy-reply-threshold", "10")
	p := startClusterProxy(t, cl)
	keys, addrs := keyPerMaster(t, cl, "busy")
	plain, stream := dialClient(t, p.Addr), dialClient(t, p.Addr)
	stream.do("HELLO", "3")
	stream.do("CLIENT", "TRACKING", "ON")
	for _, c := range []*rawClient{plain, stream} {
		if r := c.do("SCRIPT", "KILL"); !strings.HasPrefix(r, "-NOTBUSY") {
			t.Errorf("SCRIPT KILL with no script running = %q, want NOTBUSY", r)
		}
		for i := range keys {
			running := dialClient(t, p.Addr)
			running.send(resp.AppendCommandString(nil, "EVAL", "while true do end", "1", keys[i]))
			direct := dialClient(t, addrs[i])
			for deadline := time.Now().Add(5 * time.Second); !strings.HasPrefix(direct.do("PING"), "-BUSY"); {
				if time.Now().After(deadline) {
					t.Fatalf("the script on %s never made its master busy", addrs[i])
				}
			}
			// Pipelined after a command: the replies in order.
			if c == plain {
				if r := c.do("SCRIPT", "KILL"); r != "+OK\r\n" {
					t.Fatalf("SCRIPT KILL with a script running on %s = %q, want +OK", addrs[i], r)
				}
			} else {
				// In stream mode pipelined after an ECHO, which goes to the
				// session's own connection (-BUSY if its master runs the
				// script): the replies in order.
				r := c.pipeline([]string{"ECHO", "e"}, []string{"SCRIPT", "KILL"})
				if echo, kill, _ := strings.Cut(r, "\r\n+"); echo != "$1\r\ne" && !strings.HasPrefix(echo, "-BUSY") || kill != "OK\r\n" {
					t.Fatalf("stream mode: ECHO, SCRIPT KILL with a script running on %s = %q, want ECHO's reply, then +OK", addrs[i], r)
				}
			}
			if r := string(running.read()); !strings.Contains(r, "killed by user") {
				t.Errorf("the killed EVAL got %q", r)
			}
			if r := direct.do("PING"); r != "+PONG\r\n" {
				t.Fatalf("after SCRIPT KILL, PING on %s = %q", addrs[i], r)
			}
		}
	}
}

// TestClusterDebugAsOneServer: DEBUG through rproxy on a cluster acts on,
// and reports, the whole data, as on the one server a client sees. Redis's
// Tcl suite in cluster mode found it: DEBUG DIGEST-VALUE of a key went to
// any master (all zeros where the key was not), DEBUG SET-ACTIVE-EXPIRE 0
// reached one master of three, and DEBUG DIGEST and RELOAD were one
// master's. Now keyed subcommands go to their key's master, server-wide
// ones to every master, and DIGEST equals one server's over the same data.
func TestClusterDebugAsOneServer(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0, "--enable-debug-command", "yes")
	one := redistest.Start(t, "--enable-debug-command", "yes")
	p := startClusterProxy(t, cl)
	c := dialClient(t, p.Addr)
	keys, _ := keyPerMaster(t, cl, "dbg")
	digest := func(what string) {
		t.Helper()
		if got, want := c.do("DEBUG", "DIGEST"), string(one.Do(t, "DEBUG", "DIGEST")); got != want {
			t.Errorf("%s: DEBUG DIGEST = %q, one server with the same data: %q", what, got, want)
		}
	}
	digest("no keys")
	for i, k := range keys {
		for n := 0; n <= i; n++ { // one, two and three masters holding keys
			kn := k + "{" + k + "}" + strconv.Itoa(n)
			c.do("SET", kn, "v"+kn)
			one.Do(t, "SET", kn, "v"+kn)
		}
		digest(fmt.Sprintf("keys on %d masters", i+1))
		if got, want := c.do("DEBUG", "DIGEST-VALUE", k+"{"+k+"}0"), string(one.Do(t, "DEBUG", "DIGEST-VALUE", k+"{"+k+"}0")); got != want {
			t.Errorf("DEBUG DIGEST-VALUE of a key on master %d = %q, want %q", i, got, want)
		}
	}
	if r := c.do("DEBUG", "RELOAD"); r != "+OK\r\n" {
		t.Fatalf("DEBUG RELOAD = %q", r)
	}
	digest("after DEBUG RELOAD")

	// With active expiry off on every master, keys past their TTL stay
	// until read.
	if r := c.do("DEBUG", "SET-ACTIVE-EXPIRE", "0"); r != "+OK\r\n" {
		t.Fatalf("DEBUG SET-ACTIVE-EXPIRE 0 = %q", r)
	}
	c.do("FLUSHALL")
	for _, k := range keys {
		c.do("SET", k, "v", "PX", "1")
	}
	time.Sleep(300 * time.Millisecond) // three active expiry cycles (hz 10) on a master that still ran them
	if r := c.do("DBSIZE"); r != ":3\r\n" {
		t.Errorf("DBSIZE with active expiry off, every key past its TTL = %q, want :3", r)
	}
	for _, k := range keys {
		c.do("GET", k)
	}
	if r := c.do("DBSIZE"); r != ":0\r\n" {
		t.Errorf("DBSIZE after reading every expired key = %q, want :0", r)
	}
	c.do("DEBUG", "SET-ACTIVE-EXPIRE", "1")

	// Scripts may run DEBUG once it is allowed: on every master, as a
	// script of any key runs on its key's master.
	if r := c.do("DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1"); r != "+OK\r\n" {
		t.Fatalf("DEBUG SET-DISABLE-DENY-SCRIPTS 1 = %q", r)
	}
	for _, k := range keys {
		c.do("SET", k, "v")
		if r := c.do("EVAL", "return redis.call('DEBUG', 'DIGEST-VALUE', KEYS[1])", "1", k); !strings.HasPrefix(r, "*1\r\n+") {
			t.Errorf("a script's DEBUG on %s's master after SET-DISABLE-DENY-SCRIPTS 1: %q", k, r)
		}
	}
	c.do("DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0")
}

// TestClusterSlowlogIsEveryMasters: SLOWLOG GET through rproxy on a
// cluster lists every master's entries, newest first, as many as asked,
// as one server's log. Before, it was one master's, in turn, so two calls
// in a row showed two different logs (Redis's Tcl suite in cluster mode,
// unit/slowlog).
func TestClusterSlowlogIsEveryMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "slow")
	c := dialClient(t, p.Addr)
	c.do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	c.do("SLOWLOG", "RESET")
	for _, k := range keys {
		c.do("SET", k, "v")
	}
	v, err := resp.Parse([]byte(c.do("SLOWLOG", "GET", "-1")))
	if err != nil {
		t.Fatal(err)
	}
	var sets []string
	last := int64(1 << 62)
	for i, e := range v.Elems {
		// The RESET, sent to every master, is logged by each: one entry,
		// the oldest.
		if args := e.Elems[3].Elems; strings.EqualFold(string(args[0].Str), "slowlog") && strings.EqualFold(string(args[1].Str), "reset") && i != len(v.Elems)-1 {
			t.Errorf("SLOWLOG GET -1: SLOWLOG RESET at %d of %d entries, want it once, the oldest", i, len(v.Elems))
		}
		if at := e.Elems[1].Int; at > last {
			t.Errorf("SLOWLOG GET -1: an entry at %d after one at %d, want newest first", at, last)
		} else {
			last = at
		}
		if args := e.Elems[3].Elems; len(args) == 3 && strings.EqualFold(string(args[0].Str), "set") {
			sets = append(sets, string(args[1].Str))
		}
	}
	slices.Sort(sets)
	if want := slices.Sorted(slices.Values(keys)); !slices.Equal(sets, want) {
		t.Errorf("SLOWLOG GET -1 logged SET of %q, want every master's %q", sets, want)
	}
	for _, n := range []string{"0", "2"} {
		v, err := resp.Parse([]byte(c.do("SLOWLOG", "GET", n)))
		if want, _ := strconv.Atoi(n); err != nil || len(v.Elems) != want {
			t.Errorf("SLOWLOG GET %s: %d entries (%v), want %d", n, len(v.Elems), err, want)
		}
	}
	// LEN counts the joined log, as GET -1 lists it (which also shows
	// the LEN, logged by every master, once).
	n, ok := resp.Int([]byte(c.do("SLOWLOG", "LEN")))
	if v, err := resp.Parse([]byte(c.do("SLOWLOG", "GET", "-1"))); !ok || err != nil || int64(len(v.Elems)) != n+1 {
		t.Errorf("SLOWLOG LEN %d, then SLOWLOG GET -1 %d entries (%v), want one more (the LEN)", n, len(v.Elems), err)
	}
	c.do("CONFIG", "SET", "slowlog-log-slower-than", "10000")
}

// TestClusterACLLogIsEveryMasters: ACL LOG through rproxy on a cluster
// lists what one Redis would for the same commands: every master's
// denials, repeats of one kind as one entry with their count, newest
// first; and ACL LOG RESET empties every master's log. Before, both went
// to one master in turn: go-redis's "should ACL LOG RESET" found a denial
// still listed after the reset (through rproxy on a cluster only).
func TestClusterACLLogIsEveryMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	single := redistest.Start(t)
	keys, _ := keyPerMaster(t, cl, "acllog")
	rule := []string{"ACL", "SETUSER", "u", "on", ">upw", "~ok*", "+get", "+@connection"}
	for _, m := range cl.Masters() {
		m.Do(t, rule...)
	}
	single.Do(t, rule...)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.AuthPassthrough = true })
	type entry struct {
		reason, object, user string
		count                int64
	}
	scenario := func(addr string) (entries []entry, ages []float64) {
		admin, c := dialClient(t, addr), dialClient(t, addr)
		if r := admin.do("ACL", "LOG", "RESET"); r != "+OK\r\n" {
			t.Fatalf("%s: ACL LOG RESET: %q", addr, r)
		}
		if r := c.do("AUTH", "u", "upw"); r != "+OK\r\n" {
			t.Fatalf("%s: AUTH: %q", addr, r)
		}
		for _, k := range keys {
			if r := c.do("GET", k); !strings.HasPrefix(r, "-NOPERM") {
				t.Fatalf("%s: GET %s as u: %q", addr, k, r)
			}
		}
		c.do("SET", "ok1", "v") // the command, not the key, is denied
		c.do("SET", keys[0], "v")
		c.do("SET", keys[1], "v")
		if r := c.do("CONFIG", "SET", "maxmemory", "0"); !strings.HasPrefix(r, "-NOPERM") {
			t.Fatalf("%s: CONFIG SET as u: %q", addr, r)
		}
		if r := dialClient(t, addr).do("AUTH", "u", "wrong"); !strings.HasPrefix(r, "-WRONGPASS") {
			t.Fatalf("%s: AUTH with a wrong password: %q", addr, r)
		}
		v, err := resp.Parse([]byte(admin.do("ACL", "LOG")))
		if err != nil || v.Kind != '*' {
			t.Fatalf("%s: ACL LOG: %v %q", addr, err, v.Kind)
		}
		for _, e := range v.Elems {
			var got entry
			for i := 0; i+1 < len(e.Elems); i += 2 {
				val := e.Elems[i+1]
				switch string(e.Elems[i].Str) {
				case "count":
					got.count = val.Int
				case "reason":
					got.reason = string(val.Str)
				case "object":
					got.object = string(val.Str)
				case "username":
					got.user = string(val.Str)
				case "age-seconds":
					age, err := strconv.ParseFloat(string(val.Str), 64)
					if err != nil {
						t.Fatalf("%s: age-seconds %q", addr, val.Str)
					}
					ages = append(ages, age)
				}
			}
			entries = append(entries, got)
		}
		if r := admin.do("ACL", "LOG", "1"); !strings.HasPrefix(r, "*1\r\n") {
			t.Errorf("%s: ACL LOG 1: %q, want one entry", addr, r)
		}
		if r := admin.do("ACL", "LOG", "RESET"); r != "+OK\r\n" {
			t.Errorf("%s: ACL LOG RESET: %q", addr, r)
		}
		if r := admin.do("ACL", "LOG"); r != "*0\r\n" {
			t.Errorf("%s: ACL LOG after ACL LOG RESET: %q, want no entry", addr, r)
		}
		return entries, ages
	}
	want, _ := scenario(single.Addr)
	got, ages := scenario(p.Addr)
	// Newest first; the masters' clocks are read a moment apart, so the
	// order of entries updated within that moment is not compared.
	if !slices.IsSorted(ages) {
		t.Errorf("ACL LOG through rproxy: ages %v, want newest first", ages)
	}
	byKind := func(a, b entry) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }
	slices.SortFunc(got, byKind)
	slices.SortFunc(want, byKind)
	if !slices.Equal(got, want) {
		t.Errorf("ACL LOG through rproxy on a cluster:\n%v\none Redis:\n%v", got, want)
	}
}

// TestClusterFunctionStatsShowsTheRunningScript: FUNCTION STATS through
// rproxy on a cluster reports the function running on any master, as one
// Redis reports the one it runs. Before, it was one master's in turn, and
// two of three said running_script null while a function ran on the third.
func TestClusterFunctionStatsShowsTheRunningScript(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	c := dialClient(t, p.Addr)
	lib := "#!lua name=spin\nredis.register_function('spin', function(keys) local a = 1 while true do a = a + 1 end end)"
	if r := c.do("FUNCTION", "LOAD", lib); r != "$4\r\nspin\r\n" {
		t.Fatalf("FUNCTION LOAD: %q", r)
	}
	if r := c.do("FUNCTION", "STATS"); !strings.HasPrefix(r, "*4\r\n$14\r\nrunning_script\r\n$-1\r\n") {
		t.Fatalf("FUNCTION STATS with nothing running: %q", r)
	}
	c.do("CONFIG", "SET", "busy-reply-threshold", "10")
	keys, _ := keyPerMaster(t, cl, "spin")
	master := cl.MasterForSlot(t, upstream.Slot([]byte(keys[1])))
	spinner := dialClient(t, p.Addr)
	spinner.send(resp.AppendCommandString(nil, "FCALL", "spin", "1", keys[1]))
	waitFor(t, "the function running on its key's master", func() bool {
		return !strings.Contains(string(master.Do(t, "FUNCTION", "STATS")), "running_script\r\n$-1")
	})
	// Commands sent behind the FCALL on its shared connection before
	// upstream.stall_divert wait for it, as the suites' PING does (docs):
	// the next ones go around.
	waitFor(t, "the spinner's connection seen stalled", func() bool {
		v, _ := metricSum(t, p.Registry, "rproxy_upstream_stalled_connections", nil)
		return v > 0
	})
	for i := range 3 {
		if r := c.do("FUNCTION", "STATS"); !strings.Contains(r, "running_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n") {
			t.Errorf("FUNCTION STATS %d while spin runs: %q", i, r)
		}
	}
	if r := c.do("FUNCTION", "KILL"); r != "+OK\r\n" {
		t.Fatalf("FUNCTION KILL: %q", r)
	}
	if r := string(spinner.read()); !strings.HasPrefix(r, "-") {
		t.Fatalf("FCALL after FUNCTION KILL: %q", r)
	}
}

// TestClusterMigrateFromEveryMaster: MIGRATE moves a key, or keys after its
// KEYS option, from the master that holds them to another server, from a
// session in stream mode too (rueidis's default). Before, rproxy did not
// read MIGRATE's keys: outside stream mode it went to any master and
// followed the MOVED, and in stream mode it went to the pin's master,
// where a key of another master got rproxy's slot error (rueidiscompat
// "should Migrate").
func TestClusterMigrateFromEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	target := redistest.Start(t)
	port := strconv.Itoa(target.Port)
	keys, _ := keyPerMaster(t, cl, "mig")
	plain := dialClient(t, p.Addr)
	stream := dialClient(t, p.Addr)
	stream.do("HELLO", "3")
	if r := stream.do("CLIENT", "TRACKING", "ON", "OPTIN"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON OPTIN = %q", r)
	}
	for _, s := range []struct {
		name string
		c    *rawClient
	}{{"plain", plain}, {"stream", stream}} {
		for i, k := range keys {
			one, tagged := s.name+"-"+k, "{"+k+"}"+s.name
			for _, w := range []string{one, tagged + "a", tagged + "b"} {
				if r := plain.do("SET", w, "v"); r != "+OK\r\n" {
					t.Fatalf("SET %s = %q", w, r)
				}
			}
			if r := s.c.do("MIGRATE", "127.0.0.1", port, one, "0", "5000"); r != "+OK\r\n" {
				t.Errorf("%s session, master %d: MIGRATE %s = %q, want +OK", s.name, i, one, r)
			}
			if r := s.c.do("MIGRATE", "127.0.0.1", port, "", "0", "5000", "REPLACE", "KEYS", tagged+"a", tagged+"b"); r != "+OK\r\n" {
				t.Errorf("%s session, master %d: MIGRATE KEYS = %q, want +OK", s.name, i, r)
			}
			if r := s.c.do("MIGRATE", "127.0.0.1", port, "nokey"+k, "0", "5000"); r != "+NOKEY\r\n" {
				t.Errorf("%s session, master %d: MIGRATE of a missing key = %q, want +NOKEY", s.name, i, r)
			}
			for _, w := range []string{one, tagged + "a", tagged + "b"} {
				if r := plain.do("EXISTS", w); r != ":0\r\n" {
					t.Errorf("%s session: %s still on the cluster after MIGRATE (EXISTS %q)", s.name, w, r)
				}
				if r := string(target.Do(t, "GET", w)); r != "$1\r\nv\r\n" {
					t.Errorf("%s session: %s on the target = %q", s.name, w, r)
				}
			}
		}
	}
}
