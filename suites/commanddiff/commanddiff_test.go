// Package commanddiff_test sends every command of Redis's own command table,
// with a fixed set of argument lists, to Redis directly and through rproxy,
// and compares the bytes: in RESP2 and RESP3, inside MULTI, from a script,
// in stream mode and in RESP2's subscribed mode; on one Redis, on a cluster
// and in auth.mode passthrough. Each case starts from the same data and
// ends with a PING, so a reply out of step shows too. It is the systematic half of the transparency checks
// (docs/suites.md): Redis's Tcl suite and the client suites run what their
// authors thought of; this runs what nobody did, wrong arguments included.
package commanddiff_test

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// Every case starts from the same state: no keys, scripts or functions
// (flush, on each server), one key of each type (data, which on a cluster
// goes through rproxy to its master), and no user an ACL SETUSER of an
// earlier case made (users, on each server). The set holds integers: an
// intset, whose order is its values', where a set of strings is walked in
// the order of each server's own hash seed (on a cluster, another server's).
var (
	flush = [][]string{{"FLUSHALL"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}}
	data  = [][]string{
		{"SET", "k", "v"}, {"RPUSH", "l", "a", "b", "c"}, {"HSET", "h", "f", "1", "g", "2"},
		{"ZADD", "z", "1", "a", "2", "b"}, {"SADD", "s", "1", "2"}, {"XADD", "x", "1-1", "f", "v"},
		{"SET", "n", "10"}, {"PFADD", "hl", "a"}, {"GEOADD", "g", "13.36", "38.11", "p"},
		{"XGROUP", "CREATE", "x", "gr", "0"}, // docLists' group
	}
	users = [][]string{{"ACL", "DELUSER", "k", "l", "h", "z", "x", "1", "+1", "abc", "s", "n", "g", "hl", "v"}}
)

// argLists are the arguments each command is tried with: none, keys of
// each type, integers Redis reads strictly, too many.
var argLists = [][]string{
	{}, {"k"}, {"k", "v"}, {"k", "1", "2"}, {"l", "0", "-1"}, {"h", "f"}, {"z", "0", "-1", "WITHSCORES"},
	{"x", "-", "+"}, {"k", "k2"}, {"1"}, {"+1"}, {"abc", "def", "ghi", "jkl"}, {"s", "a"}, {"n", "5"},
	{"g", "p"}, {"hl"},
}

// notCompared are the commands and subcommands left out, and why.
var notCompared = map[string]string{
	"shutdown": "stops Redis", "debug": "crashes or stalls Redis", "monitor": "streams every command",
	"sync": "turns the connection into a replication stream", "psync": "as sync",
	"replicaof": "REPLICAOF n 5 would make Redis a replica", "slaveof": "as replicaof", "failover": "as replicaof",
	"save": "writes the dataset", "bgsave": "forks", "bgrewriteaof": "forks", "migrate": "connects elsewhere",
	"pfselftest": "takes half a second", "pfdebug": "debugging",
	"randomkey": "random", "spop": "random", "srandmember": "random", "hrandfield": "random", "zrandmember": "random",
	"time": "the clock", "lastsave": "the clock", "info": "counters", "lolwut": "random art",
	"client|id": "ids", "client|info": "ids and connection fields, rproxy's own", "client|list": "as client|info",
	"hello":       "ids",
	"acl|genpass": "random", "acl|log": "entries from other cases", "config|set": "changes Redis",
	"memory": "allocator figures", "latency": "timings", "slowlog": "timings", "object|idletime": "the clock",
	"object|freq":  "the clock",
	"scan":         "its order past the first keys follows how far Redis's incremental rehash has gone, which its cron advances with time",
	"keys":         "as scan (the policy refuses it but from a script, where its order differed once in make test)",
	"script|debug": "Redis refuses it when more commands are in its buffer, which depends on how they arrive",
}

// allowed reports whether rproxy's replies may differ from Redis's by
// design: the policy's refusals (docs/policy.md), and inside MULTI the
// commands rproxy acts on itself and does not answer in EXEC's array
// (HELLO, AUTH in passthrough mode, CLIENT TRACKING, the SUBSCRIBE family),
// which it refuses there, aborting the transaction (docs/commands.md).
func allowed(_ [][]string, through string) bool {
	return strings.Contains(through, "-DENIED ") || strings.Contains(through, " inside MULTI is not supported through rproxy ")
}

// startProxy starts rproxy in front of upstream with the shipped policy,
// whose refusals are allowed, and the tier off: the cases write to Redis
// directly before reading through rproxy, and the tier is coherent with
// such writes only once the invalidation arrives (docs/hotkeys.md).
func startProxy(t *testing.T, upstream string, opts ...func(*proxy.Config)) *proxytest.Proxy {
	return proxytest.Start(t, upstream, append([]func(*proxy.Config){func(c *proxy.Config) {
		c.HotKey.Tier = false
		shipped := policy.DefaultConfig()
		c.Policy = &shipped
	}}, opts...)...)
}

func TestEveryCommandAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := startProxy(t, rs.Addr)
	reset := resetter(t, []string{rs.Addr}, rs.Addr)
	compareEveryCommand(t, rs.Addr, p.Addr, reset, reset, allNames(t, rs.Addr), docLists(t, rs.Addr), allowed, allVariants)
}

// resetter returns what puts the servers at addrs back to the seed data
// (written through via) before a case.
func resetter(t *testing.T, addrs []string, via string) func() {
	admins := make([]*conn, len(addrs))
	for i, a := range addrs {
		admins[i] = dial(t, a)
	}
	writer := dial(t, via)
	return func() {
		for _, admin := range admins {
			if _, err := admin.run(flush); err != nil {
				t.Fatalf("flushing: %v", err)
			}
		}
		if _, err := writer.run(data); err != nil {
			t.Fatalf("seeding: %v", err)
		}
		for _, admin := range admins {
			if _, err := admin.run(users); err != nil {
				t.Fatalf("deleting users: %v", err)
			}
			// A subscriber of an earlier case may not have left yet: Redis
			// drops a connection's subscriptions once it reads its close.
			for deadline := time.Now().Add(2 * time.Second); ; {
				r, err := admin.run([][]string{{"PUBSUB", "CHANNELS"}, {"PUBSUB", "NUMPAT"}, {"PUBSUB", "SHARDCHANNELS"}})
				if err != nil {
					t.Fatalf("PUBSUB: %v", err)
				}
				if string(bytes.Join(r, nil)) == "*0\r\n:0\r\n*0\r\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("subscriptions of an earlier case still held: %q", r)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// allNames returns the names in Redis's command table, subcommands as
// "container|sub", but those notCompared.
func allNames(t *testing.T, addr string) []string {
	list, err := dial(t, addr).run([][]string{{"COMMAND", "LIST"}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := resp.Parse(list[0])
	if err != nil || len(v.Elems) < 200 {
		t.Fatalf("COMMAND LIST: %d names (%v)", len(v.Elems), err)
	}
	var names []string
	for _, n := range v.Elems {
		name := string(n.Str)
		_, skip := notCompared[name]
		_, skipAll := notCompared[strings.Split(name, "|")[0]]
		if !skip && !skipAll {
			names = append(names, name)
		}
	}
	return names
}

// variant is one way to send a command: in RESP3 (after HELLO 3) or not,
// and the command lines around it.
type variant struct {
	resp3  bool
	script [][]string
}

// allVariants sends cmd, the i-th of its argument lists, in RESP2 and in
// RESP3; inside MULTI and from a script in each in turn; in stream mode
// (tracking on); in RESP2's subscribed mode.
func allVariants(cmd []string, i int) []variant {
	return []variant{
		{false, [][]string{cmd, {"PING", "next"}}}, {true, [][]string{cmd, {"PING", "next"}}},
		{i%2 == 1, [][]string{{"MULTI"}, cmd, {"EXEC"}, {"PING", "next"}}},
		{i%2 == 0, [][]string{append([]string{"EVAL", "return redis.pcall(unpack(ARGV))", "0"}, cmd...), {"PING", "next"}}},
		{true, [][]string{{"CLIENT", "TRACKING", "on"}, cmd, {"PING", "next"}}},
		{false, [][]string{{"SUBSCRIBE", "ch"}, cmd, {"PING", "next"}}},
	}
}

// compareEveryCommand sends each command of names with each argument
// list, in each of variants' ways, to direct and to through, each after
// its reset, and fails on replies that differ but where allowed says so.
func compareEveryCommand(t *testing.T, direct, through string, resetDirect, resetThrough func(), names []string, fromDocs map[string][][]string,
	allowed func(script [][]string, through string) bool, variants func([]string, int) []variant) {
	compared, failures, byDesign := 0, 0, 0
	for _, name := range names {
		for i, args := range slices.Concat(argLists, fromDocs[name]) {
			cmd := append(strings.Split(name, "|"), args...)
			for _, v := range variants(cmd, i) {
				script := v.script
				if v.resp3 {
					script = append([][]string{{"HELLO", "3"}}, script...)
				}
				resetDirect()
				want := replies(t, direct, script)
				resetThrough()
				got := replies(t, through, script)
				compared++
				if want == got {
					continue
				}
				if allowed(script, got) {
					byDesign++
					continue
				}
				failures++
				if failures <= 20 {
					t.Errorf("%q:\n  direct: %.300q\n  rproxy: %.300q", script, want, got)
				}
			}
		}
	}
	t.Logf("%d command lines compared: %d differ by design, %d otherwise", compared, byDesign, failures)
	if compared < 10000 {
		t.Fatalf("only %d command lines compared", compared)
	}
}

// replies sends script on a new connection to addr, pipelined, and returns
// its replies, or where they stopped and why; without a first HELLO's,
// whose connection id differs.
func replies(t *testing.T, addr string, script [][]string) string {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close() // not on t.Cleanup: tens of thousands would pile up until the end
	out, err := (&conn{conn: nc, r: bufio.NewReader(nc)}).run(script)
	if script[0][0] == "HELLO" && len(out) > 0 {
		out = out[1:]
	}
	s := string(bytes.Join(out, nil))
	if err != nil {
		s += "<" + err.Error() + ">"
	}
	return s
}

type conn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{conn: c, r: bufio.NewReader(c)}
}

// run sends cmds in one write and reads a reply to each; a command that
// gets no reply within a second ends it (a timeout, the same either way).
func (c *conn) run(cmds [][]string) ([][]byte, error) {
	var out []byte
	for _, cmd := range cmds {
		out = resp.AppendCommandString(out, cmd...)
	}
	if _, err := c.conn.Write(out); err != nil {
		return nil, err
	}
	var got [][]byte
	for range cmds {
		c.conn.SetReadDeadline(time.Now().Add(time.Second))
		r, err := resp.ReadReply(c.r, nil)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return got, errors.New("no reply within a second")
		}
		if err != nil {
			return got, err
		}
		got = append(got, r)
	}
	return got, nil
}

// notComparedOnCluster are the commands left out on a cluster upstream, and
// why, besides notCompared.
var notComparedOnCluster = map[string]string{
	"cluster":  "rproxy's one-node facade (docs/cluster.md)",
	"readonly": "a cluster command: one Redis refuses it", "readwrite": "as readonly", "asking": "as readonly",
	"command": "the table of other servers than the one direct, in another order",
}

// allowedOnCluster: what allowed says, and a cluster's own answers
// (docs/cluster.md): keys in several slots, and commands or options a
// cluster refuses (SORT's BY and GET patterns).
func allowedOnCluster(script [][]string, through string) bool {
	return allowed(script, through) || strings.Contains(through, "-CROSSSLOT Keys in request don't hash to the same slot") ||
		strings.Contains(through, " is not allowed in cluster mode") || strings.Contains(through, " option of SORT denied in Cluster mode")
}

// clusterVariants is allVariants but scripts, which on a cluster reach only
// their master's keys (a keyless one runs on any master), and plain RESP3,
// the same path as plain RESP2 there (the time goes to the other cases).
func clusterVariants(cmd []string, i int) []variant {
	var out []variant
	for _, v := range allVariants(cmd, i) {
		if v.script[0][0] != "EVAL" && (!v.resp3 || len(v.script) > 2) {
			out = append(out, v)
		}
	}
	return out
}

// On a 3-master cluster rproxy shows one node: every command gets the
// bytes one Redis sends, but where a cluster answers otherwise.
func TestEveryCommandOnClusterAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	cl := redistest.StartCluster(t, 3, 0)
	seeds := cl.Seeds()
	p := startProxy(t, seeds[0], func(c *proxy.Config) {
		c.Cluster = &upstream.ClusterConfig{Seeds: seeds, Refresh: 2 * time.Second, MinRefreshGap: 20 * time.Millisecond}
	})
	var masters []string
	for _, m := range cl.Masters() {
		masters = append(masters, m.Addr)
	}
	var names []string
	for _, name := range allNames(t, rs.Addr) {
		if _, skip := notComparedOnCluster[strings.Split(name, "|")[0]]; !skip {
			names = append(names, name)
		}
	}
	compareEveryCommand(t, rs.Addr, p.Addr, resetter(t, []string{rs.Addr}, rs.Addr), resetter(t, masters, p.Addr),
		names, docLists(t, rs.Addr), allowedOnCluster, clusterVariants)
}
