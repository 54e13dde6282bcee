package proxy_test

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
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
		if r := pub.do("PUBSUB", "NUMSUB", ch); r != fmt.Sprintf("*2\r\n$%d\r\n%s\r\n:2\r\n", len(ch), ch) {
			t.Errorf("PUBSUB NUMSUB %s = %q, want 2 subscribers", ch, r)
		}
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
}

// TestClusterClientUnblockOnAnyMaster: CLIENT UNBLOCK ends a BLPOP whichever
// master the blocked client's key is on. Before, it went to any master,
// which knew no such client (:0), and the BLPOP waited on.
func TestClusterClientUnblockOnAnyMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "queue")
	c := dialClient(t, p.Addr)
	for round := range 2 {
		// Not in the masters' order: keyless commands go to the masters
		// in turn, and could meet the blocked one by chance.
		for _, i := range []int{0, 2, 1} {
			k := keys[i]
			blocked := dialClient(t, p.Addr)
			id := strings.TrimSuffix(strings.TrimPrefix(blocked.do("CLIENT", "ID"), ":"), "\r\n")
			blocked.send(resp.AppendCommandString(nil, "BLPOP", k, "0"))
			waitFor(t, "the BLPOP blocked", func() bool {
				return strings.Contains(c.do("CLIENT", "LIST", "ID", id), "flags=b")
			})
			if r := c.do("CLIENT", "UNBLOCK", id); r != ":1\r\n" {
				t.Fatalf("round %d: CLIENT UNBLOCK of a BLPOP on %s = %q, want :1", round, k, r)
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
}
