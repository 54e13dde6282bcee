// Package commanddiff_test sends every command of Redis's own command table,
// with a fixed set of argument lists, to Redis directly and through rproxy,
// and compares the bytes: plain in RESP2 and RESP3, and inside MULTI. Each
// case starts from the same data and ends with a PING, so a reply out of
// step shows too. It is the systematic half of the transparency checks
// (docs/suites.md): Redis's Tcl suite and the client suites run what their
// authors thought of; this runs what nobody did, wrong arguments included.
package commanddiff_test

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// seed is the data every case starts from: one key of each type, no
// scripts, functions or users.
var seed = [][]string{
	{"FLUSHALL"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"},
	{"SET", "k", "v"}, {"RPUSH", "l", "a", "b", "c"}, {"HSET", "h", "f", "1", "g", "2"},
	{"ZADD", "z", "1", "a", "2", "b"}, {"SADD", "s", "a", "b"}, {"XADD", "x", "1-1", "f", "v"},
	{"SET", "n", "10"}, {"PFADD", "hl", "a"}, {"GEOADD", "g", "13.36", "38.11", "p"},
	// The users an ACL SETUSER of an earlier case may have made.
	{"ACL", "DELUSER", "k", "l", "h", "z", "x", "1", "+1", "abc", "s", "n", "g", "hl"},
}

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
	"object|freq": "the clock", "script|debug": "Redis refuses it when more commands are in its buffer, which depends on how they arrive",
}

// allowed reports whether rproxy's replies may differ from Redis's by
// design: the policy's refusals (docs/policy.md), and inside MULTI the
// commands rproxy answers itself (AUTH, CLIENT's, the SUBSCRIBE family),
// which it refuses there, aborting the transaction (docs/commands.md).
func allowed(through string) bool {
	return strings.Contains(through, "-DENIED ") || strings.Contains(through, " inside MULTI is not supported through rproxy ")
}

func TestEveryCommandAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	// The shipped policy, whose refusals are allowed; the tier off: the cases write to Redis directly before reading
	// through rproxy, and the tier is coherent with such writes only after
	// the invalidation arrives (docs/hotkeys.md).
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.HotKey.Tier = false
		shipped := policy.DefaultConfig()
		c.Policy = &shipped
	})
	admin := dial(t, rs.Addr)
	reset := func() {
		if _, err := admin.run(seed); err != nil {
			t.Fatalf("seeding: %v", err)
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
	list, err := admin.run([][]string{{"COMMAND", "LIST"}})
	if err != nil {
		t.Fatal(err)
	}
	names, err := resp.Parse(list[0])
	if err != nil || len(names.Elems) < 200 {
		t.Fatalf("COMMAND LIST: %d names (%v)", len(names.Elems), err)
	}
	compared, failures, byDesign := 0, 0, 0
	for _, n := range names.Elems {
		name := string(n.Str)
		if _, skip := notCompared[name]; skip {
			continue
		}
		if _, skip := notCompared[strings.Split(name, "|")[0]]; skip {
			continue
		}
		for i, args := range argLists {
			cmd := append(strings.Split(name, "|"), args...)
			// In RESP2 and in RESP3; inside MULTI and from a script in
			// each in turn; in stream mode (tracking on); in RESP2's
			// subscribed mode.
			multi := [][]string{{"MULTI"}, cmd, {"EXEC"}, {"PING", "next"}}
			script := [][]string{append([]string{"EVAL", "return redis.pcall(unpack(ARGV))", "0"}, cmd...), {"PING", "next"}}
			variants := []struct {
				resp3  bool
				script [][]string
			}{
				{false, [][]string{cmd, {"PING", "next"}}}, {true, [][]string{cmd, {"PING", "next"}}},
				{i%2 == 1, multi}, {i%2 == 0, script},
				{true, [][]string{{"CLIENT", "TRACKING", "on"}, cmd, {"PING", "next"}}},
				{false, [][]string{{"SUBSCRIBE", "ch"}, cmd, {"PING", "next"}}},
			}
			for _, v := range variants {
				script := v.script
				if v.resp3 {
					script = append([][]string{{"HELLO", "3"}}, script...)
				}
				reset()
				direct := replies(t, rs.Addr, script, v.resp3)
				reset()
				through := replies(t, p.Addr, script, v.resp3)
				compared++
				if direct == through {
					continue
				}
				if allowed(through) {
					byDesign++
					continue
				}
				failures++
				if failures <= 20 {
					t.Errorf("%q:\n  direct: %.300q\n  rproxy: %.300q", script, direct, through)
				}
			}
		}
	}
	t.Logf("%d command lines compared: %d differ by design (refused), %d otherwise", compared, byDesign, failures)
	if compared < 10000 {
		t.Fatalf("only %d command lines compared", compared)
	}
}

// replies sends script on a new connection to addr, pipelined, and returns
// its replies, or where they stopped and why; without the first, HELLO's
// (its connection id differs), where hello is set.
func replies(t *testing.T, addr string, script [][]string, hello bool) string {
	t.Helper()
	c := dial(t, addr)
	defer c.conn.Close()
	out, err := c.run(script)
	if hello && len(out) > 0 {
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
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return got, errTimeout
			}
			return got, err
		}
		got = append(got, r)
	}
	return got, nil
}

var errTimeout = &timeoutError{}

type timeoutError struct{}

func (*timeoutError) Error() string { return "no reply within a second" }
