package proxy_test

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// pipeline encodes commands as one write, as client libraries send a
// transaction.
func pipeline(cmds ...[]string) []byte {
	var b []byte
	for _, c := range cmds {
		b = resp.AppendCommandString(b, c...)
	}
	return b
}

// sendAll sends cmds in one write and reads one reply each.
func sendAll(c *rawClient, cmds ...[]string) []string {
	c.t.Helper()
	c.send(pipeline(cmds...))
	out := make([]string, len(cmds))
	for i := range cmds {
		out[i] = string(c.read())
	}
	return out
}

// A transaction sent in one write gets Redis's exact replies through the
// default config (policy with big-key probes and TTL jitter on): nothing
// rproxy adds (the DEL's size probe) lands inside it, and a TTL set in it
// is not spread.
func TestTransactionInOneWriteMatchesRedis(t *testing.T) {
	direct := redistest.Start(t)
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	seqs := [][][]string{
		{{"MULTI"}, {"DEL", "a"}, {"GET", "b"}, {"INCR", "n"}, {"EXEC"}},
		{{"SET", "a", "1"}, {"MULTI"}, {"DEL", "a", "b"}, {"SET", "k", "v", "EX", "3600"}, {"TTL", "k"}, {"EXEC"}},
		{{"MULTI"}, {"SETEX", "p:1", "100", "x"}, {"SADD", "tag", "p:1"}, {"EXPIRE", "tag", "100"}, {"TTL", "p:1"}, {"EXEC"}},
	}
	for _, seq := range seqs {
		want := sendAll(dialClient(t, direct.Addr), seq...)
		got := sendAll(dialClient(t, p.Addr), seq...)
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Errorf("%v:\n through rproxy %q\n direct         %q", seq, got, want)
		}
	}
	// Outside a transaction the same SET is still spread, below the TTL
	// asked for (jitter_test.go).
	c := dialClient(t, p.Addr)
	if r := c.do("SET", "k2", "v", "EX", "3600"); r != "+OK\r\n" {
		t.Fatalf("SET = %q", r)
	}
}

// A command the policy refuses inside MULTI aborts the transaction as a
// queue-time error does on Redis: EXEC gets EXECABORT, nothing is applied.
func TestRefusedCommandAbortsTransaction(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	seq := [][]string{{"MULTI"}, {"SET", "s1", "x"}, {"FLUSHALL"}, {"SET", "s2", "y"}, {"EXEC"}}
	check := func(t *testing.T, got []string) {
		t.Helper()
		if got[0] != "+OK\r\n" || got[1] != "+QUEUED\r\n" || got[3] != "+QUEUED\r\n" {
			t.Errorf("replies %q", got)
		}
		if !strings.HasPrefix(got[2], "-DENIED ") {
			t.Errorf("FLUSHALL = %q, want -DENIED", got[2])
		}
		if got[4] != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
			t.Errorf("EXEC = %q, want Redis's EXECABORT", got[4])
		}
		if n := string(rs.Do(t, "EXISTS", "s1", "s2")); n != ":0\r\n" {
			t.Errorf("EXISTS s1 s2 = %q: the aborted transaction was applied", n)
		}
	}
	t.Run("OneWrite", func(t *testing.T) {
		check(t, sendAll(dialClient(t, p.Addr), seq...))
	})
	t.Run("RoundTrips", func(t *testing.T) {
		c := dialClient(t, p.Addr)
		var got []string
		for _, cmd := range seq {
			got = append(got, c.do(cmd...))
		}
		check(t, got)
		// The session goes on, out of the transaction, in a clean state.
		if r := c.do("SET", "after", "1"); r != "+OK\r\n" {
			t.Errorf("SET after the aborted transaction = %q", r)
		}
	})
	t.Run("BigKeyDelInside", func(t *testing.T) {
		// A DEL inside MULTI is not probed: Redis queues it as sent.
		c := dialClient(t, p.Addr)
		got := sendAll(c, []string{"MULTI"}, []string{"DEL", "nokey"}, []string{"EXEC"})
		if got[1] != "+QUEUED\r\n" || got[2] != "*1\r\n:0\r\n" {
			t.Errorf("MULTI DEL EXEC = %q", got)
		}
	})
}

// Commands rproxy acts on itself when it sees them (HELLO, CLIENT
// TRACKING, AUTH in passthrough mode, ...) cannot run inside Redis's
// transaction: they are refused there, and the transaction is aborted as
// Redis aborts on a queue-time error, instead of being answered out of
// order. (CLIENT ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL and
// UNBLOCK are answered in EXEC's array: TestClientCommandsAnsweredInsideExec,
// TestClientKillAndUnblockAnsweredInsideExec.)
func TestProxyAnsweredCommandInsideMultiAborts(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	got := sendAll(c, []string{"MULTI"}, []string{"SET", "m", "1"}, []string{"HELLO", "3"}, []string{"EXEC"})
	if !strings.HasPrefix(got[2], "-ERR rproxy: HELLO inside MULTI") {
		t.Errorf("HELLO in MULTI = %q", got[2])
	}
	if !strings.HasPrefix(got[3], "-EXECABORT") {
		t.Errorf("EXEC = %q, want EXECABORT", got[3])
	}
	if r := c.do("CLIENT", "INFO"); !strings.Contains(r, " resp=2") {
		t.Errorf("the refused HELLO 3 was applied: %q", r)
	}
	if n := string(rs.Do(t, "EXISTS", "m")); n != ":0\r\n" {
		t.Errorf("EXISTS m = %q", n)
	}
}

// clientIDWhere returns the id of the first Redis client whose CLIENT LIST
// line has all the fields given (e.g. "db=9").
func clientIDWhere(t *testing.T, rs *redistest.Server, fields ...string) string {
	t.Helper()
	for _, line := range strings.Split(string(rs.Do(t, "CLIENT", "LIST")), "\n") {
		ok := true
		for _, f := range fields {
			ok = ok && strings.Contains(" "+line+" ", " "+f+" ")
		}
		if ok && strings.HasPrefix(line, "id=") {
			return strings.TrimPrefix(strings.Fields(line)[0], "id=")
		}
	}
	return ""
}

// A session in db 9 whose pinned connection dies is closed, as a direct
// client's connection would drop; its next write never lands in db 0.
func TestPinnedConnectionLostClosesStatefulSession(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	if r := c.do("SELECT", "9"); r != "+OK\r\n" {
		t.Fatalf("SELECT 9 = %q", r)
	}
	if r := c.do("SET", "a", "1"); r != "+OK\r\n" {
		t.Fatalf("SET = %q", r)
	}
	id := clientIDWhere(t, rs, "db=9")
	if id == "" {
		t.Fatal("no Redis connection in db 9")
	}
	if r := string(rs.Do(t, "CLIENT", "KILL", "ID", id)); r != ":1\r\n" {
		t.Fatalf("CLIENT KILL = %q", r)
	}
	c.send(pipeline([]string{"SET", "b", "2"}, []string{"SET", "c", "3"}))
	c.expectClosed()
	for _, db := range []string{"0", "9"} {
		cl := dialClient(t, rs.Addr)
		cl.do("SELECT", db)
		if r := cl.do("EXISTS", "b", "c"); r != ":0\r\n" {
			t.Errorf("db %s: EXISTS b c = %q after the pinned connection was lost", db, r)
		}
	}
	// A session without state goes on after losing a blocking command's
	// connection: nothing it set is lost.
	c2 := dialClient(t, p.Addr)
	c2.send(resp.AppendCommandString(nil, "BLPOP", "nothing", "0"))
	waitFor(t, "BLPOP blocked on Redis", func() bool { return clientIDWhere(t, rs, "cmd=blpop") != "" })
	rs.Do(t, "CLIENT", "KILL", "ID", clientIDWhere(t, rs, "cmd=blpop"))
	if r := string(c2.read()); !strings.HasPrefix(r, "-ERR upstream unavailable") {
		t.Errorf("BLPOP after its connection was killed = %q", r)
	}
	if r := c2.do("PING"); r != "+PONG\r\n" {
		t.Errorf("PING after = %q", r)
	}
}

// An idle pinned connection that Redis closed (its timeout, a kill) is not
// lent again: the next transaction runs on a live connection. Each
// transaction opens with a MULTI of its own write, so it pins (one sent
// whole goes on the shared connections: sharedtx.go).
func TestIdlePinnedConnectionCheckedBeforeLent(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	transaction := func(cmd ...string) []string {
		t.Helper()
		return append([]string{c.do("MULTI")}, sendAll(c, cmd, []string{"EXEC"})...)
	}
	got := transaction("SET", "x", "1")
	if got[2] != "*1\r\n+OK\r\n" {
		t.Fatalf("first transaction: %q", got)
	}
	// The released connection went back as it was (a transaction leaves
	// no state): its last command was EXEC.
	assertNoPins(t, p)
	var id string
	waitFor(t, "the pinned connection released", func() bool {
		id = clientIDWhere(t, rs, "cmd=exec")
		return id != ""
	})
	rs.Do(t, "CLIENT", "KILL", "ID", id)
	for i := 0; i < 3; i++ {
		got := transaction("INCR", "n")
		if got[0] != "+OK\r\n" || !bytes.HasPrefix([]byte(got[2]), []byte("*1\r\n:")) {
			t.Fatalf("transaction %d after the idle connection was killed: %q", i, got)
		}
	}
}

// busyScript is a script that runs for about ms milliseconds of Redis's
// clock, or for ever with ms 0.
const busyScript = `local t = redis.call('TIME')
local ms = tonumber(ARGV[1])
while true do
  local n = redis.call('TIME')
  if ms > 0 and (n[1]-t[1])*1000 + (n[2]-t[2])/1000 > ms then return 'done' end
end`

// waitBusy waits until Redis answers BUSY: a script is past its threshold.
func waitBusy(t *testing.T, rs *redistest.Server) {
	t.Helper()
	waitFor(t, "Redis busy with the script", func() bool {
		r, err := rs.Exec("PING")
		return err == nil && strings.HasPrefix(string(r), "-BUSY")
	})
}

// A script that runs longer than upstream.timeout completes for its caller
// (and for clients queued behind it on the shared connection), instead of
// a "no reply" error and a reset connection; SCRIPT KILL through rproxy
// reaches Redis while the script runs.
func TestLongScriptAndScriptKill(t *testing.T) {
	rs := redistest.Start(t, "--busy-reply-threshold", "100")
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Upstream.Timeout = 300 * time.Millisecond
		// Without stall_divert, so that the other client's command waits
		// on the stalled shared connection (with it, it goes around, and
		// Redis answers -BUSY: TestStallDivertLongScriptBusyAsRedis).
		c.Upstream.StallDivert = 0
	})

	t.Run("CompletesPastTimeout", func(t *testing.T) {
		caller, other := dialClient(t, p.Addr), dialClient(t, p.Addr)
		caller.send(resp.AppendCommandString(nil, "EVAL", busyScript, "0", "1200"))
		waitBusy(t, rs)
		otherReply := make(chan string, 1)
		go func() { otherReply <- other.doErr("ECHO", "behind") }()
		if r := string(caller.read()); r != "$4\r\ndone\r\n" {
			t.Errorf("long EVAL = %q, want its result", r)
		}
		if r := <-otherReply; r != "$6\r\nbehind\r\n" {
			t.Errorf("command queued behind the script = %q", r)
		}
	})

	t.Run("ScriptKill", func(t *testing.T) {
		caller, killer := dialClient(t, p.Addr), dialClient(t, p.Addr)
		caller.send(resp.AppendCommandString(nil, "EVAL", busyScript, "0", "0"))
		waitBusy(t, rs)
		if r := killer.do("SCRIPT", "KILL"); r != "+OK\r\n" {
			t.Fatalf("SCRIPT KILL = %q", r)
		}
		if r := string(caller.read()); !strings.Contains(r, "killed by user") {
			t.Errorf("killed EVAL = %q", r)
		}
		if r := killer.do("SCRIPT", "KILL"); !strings.HasPrefix(r, "-NOTBUSY") {
			t.Errorf("SCRIPT KILL with no script = %q", r)
		}
	})
}

// clientID returns a client's rproxy id (CLIENT ID).
func clientID(c *rawClient) string {
	c.t.Helper()
	return strings.TrimSuffix(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"), "\r\n")
}

// CLIENT LIST, INFO, KILL, UNBLOCK and TRACKING REDIRECT speak in the ids
// rproxy hands out, and LIST/INFO use Redis's line format.
func TestClientIDsWork(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	other := dialClient(t, p.Addr)
	if r := other.do("CLIENT", "SETNAME", "worker"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	other.do("SELECT", "9")
	id, otherID := clientID(c), clientID(other)

	t.Run("ListAndInfo", func(t *testing.T) {
		list := c.do("CLIENT", "LIST")
		// The glob Redis's own suite matches CLIENT LIST against.
		line := regexp.MustCompile(`id=` + id + ` addr=\S+:\d+ laddr=\S+:\d+ fd=\S+ name= age=\d+ idle=\d+ flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=26 qbuf-free=\d+ argv-mem=\d+ multi-mem=0 rbs=\d+ rbp=\d+ obl=0 oll=0 omem=0 tot-mem=\d+ events=r cmd=client\|list user=default redir=-1 resp=2\n`)
		if !line.MatchString(list) {
			t.Errorf("CLIENT LIST lacks the caller's line in Redis's format:\n%s", list)
		}
		if !strings.Contains(list, "id="+otherID+" ") || !strings.Contains(list, " name=worker ") || !strings.Contains(list, " db=9 ") {
			t.Errorf("CLIENT LIST lacks the other session (name worker, db 9):\n%s", list)
		}
		if r := c.do("CLIENT", "LIST", "ID", otherID); strings.Count(r, "id=") != 1 || !strings.Contains(r, "name=worker") || !strings.Contains(r, "cmd=client|id") {
			t.Errorf("CLIENT LIST ID %s = %q", otherID, r)
		}
		if r := c.do("CLIENT", "LIST", "TYPE", "foo"); r != "-ERR Unknown client type 'foo'\r\n" {
			t.Errorf("CLIENT LIST TYPE foo = %q", r)
		}
		if r := c.do("CLIENT", "INFO"); !strings.Contains(r, "id="+id+" ") || !strings.Contains(r, "cmd=client|info") {
			t.Errorf("CLIENT INFO = %q", r)
		}
	})

	t.Run("Unblock", func(t *testing.T) {
		blocked := dialClient(t, p.Addr)
		bid := clientID(blocked)
		blocked.send(resp.AppendCommandString(nil, "BLPOP", "nothing", "0"))
		waitFor(t, "BLPOP blocked on Redis", func() bool { return clientIDWhere(t, rs, "cmd=blpop") != "" })
		if r := c.do("CLIENT", "LIST", "ID", bid); !strings.Contains(r, " flags=b ") {
			t.Errorf("CLIENT LIST of a blocked client = %q, want flags=b", r)
		}
		if r := c.do("CLIENT", "UNBLOCK", bid); r != ":1\r\n" {
			t.Fatalf("CLIENT UNBLOCK %s = %q, want :1", bid, r)
		}
		if r := string(blocked.read()); r != "*-1\r\n" {
			t.Errorf("the unblocked BLPOP = %q, want a timeout's null", r)
		}
		if r := c.do("CLIENT", "UNBLOCK", bid); r != ":0\r\n" {
			t.Errorf("CLIENT UNBLOCK of a client not blocked = %q", r)
		}
	})

	t.Run("TrackingRedirect", func(t *testing.T) {
		sub := dialClient(t, p.Addr)
		subID := clientID(sub)
		if r := sub.do("SUBSCRIBE", "__redis__:invalidate"); !strings.HasPrefix(r, "*3\r\n$9\r\nsubscribe") {
			t.Fatalf("SUBSCRIBE = %q", r)
		}
		tr := dialClient(t, p.Addr)
		trID := clientID(tr)
		if r := tr.do("CLIENT", "TRACKING", "on", "REDIRECT", "999999"); r != "-ERR The client ID you want redirect to does not exist\r\n" {
			t.Errorf("REDIRECT to no client = %q", r)
		}
		if r := tr.do("CLIENT", "TRACKING", "on", "REDIRECT", subID); r != "+OK\r\n" {
			t.Fatalf("CLIENT TRACKING on REDIRECT %s = %q", subID, r)
		}
		// The session is now on its own connection (stream mode): ids are
		// still rproxy's.
		if r := tr.do("CLIENT", "ID"); r != ":"+trID+"\r\n" {
			t.Errorf("CLIENT ID in stream mode = %q, want :%s", r, trID)
		}
		if r := tr.do("CLIENT", "GETREDIR"); r != ":"+subID+"\r\n" {
			t.Errorf("CLIENT GETREDIR = %q, want :%s", r, subID)
		}
		if r := tr.do("CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", "999999"); r != "-ERR The client ID you want redirect to does not exist\r\n" {
			t.Errorf("REDIRECT to no client in stream mode = %q", r)
		}
		if r := tr.do("CLIENT", "TRACKING", "off"); r != "+OK\r\n" {
			t.Fatal(r)
		}
		if r := tr.do("CLIENT", "TRACKING", "on", "REDIRECT", subID); r != "+OK\r\n" {
			t.Fatalf("CLIENT TRACKING on REDIRECT %s in stream mode = %q", subID, r)
		}
		tr.do("GET", "tracked")
		if r := string(rs.Do(t, "SET", "tracked", "1")); r != "+OK\r\n" {
			t.Fatal(r)
		}
		if r := string(sub.read()); !strings.Contains(r, "invalidate") || !strings.Contains(r, "tracked") {
			t.Errorf("the redirected invalidation = %q", r)
		}
	})

	t.Run("Kill", func(t *testing.T) {
		if r := c.do("CLIENT", "KILL", "ID", otherID); r != ":1\r\n" {
			t.Fatalf("CLIENT KILL ID %s = %q", otherID, r)
		}
		other.expectClosed()
		if r := c.do("CLIENT", "KILL", "ID", otherID); r != ":0\r\n" {
			t.Errorf("CLIENT KILL of a closed client = %q", r)
		}
		if r := c.do("CLIENT", "KILL", "1.2.3.4:5"); r != "-ERR No such client\r\n" {
			t.Errorf("CLIENT KILL addr = %q", r)
		}
		if r := c.do("CLIENT", "KILL"); r != "-ERR wrong number of arguments for 'client|kill' command\r\n" {
			t.Errorf("CLIENT KILL = %q", r)
		}
		if r := c.do("CLIENT", "KILL", "ID", "abc"); r != "-ERR client-id should be greater than 0\r\n" {
			t.Errorf("CLIENT KILL ID abc = %q", r)
		}
	})
}

// A long pipeline of large replies goes upstream in parts whose replies fit
// limits.max_reply_buffer, each part written to the client before the next
// is sent: rproxy holds about one part of replies, not the whole pipeline.
func TestReplyBufferBoundsPipelines(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.MaxReplyBuffer = 1 << 20
		c.Coalesce = nil // every GET goes upstream
		c.HotKey = nil
	})
	value := strings.Repeat("v", 100<<10)
	rs.Do(t, "SET", "big", value)
	c := dialClient(t, p.Addr)
	writes := func() float64 { return counterValue(t, p.Registry, "rproxy_upstream_writes_total", nil) }
	before := writes()
	const n = 300
	var pipe []byte
	for range n {
		pipe = resp.AppendCommandString(pipe, "GET", "big")
	}
	c.send(pipe)
	want := "$" + strconv.Itoa(len(value)) + "\r\n" + value + "\r\n"
	for i := range n {
		if r := string(c.read()); r != want {
			t.Fatalf("reply %d: %d bytes, want the value", i, len(r))
		}
	}
	// 30 MB of replies, 1 MB at a time: about ten GETs per upstream write
	// once the reply size is known (the first part is larger).
	if got := writes() - before; got < 20 {
		t.Errorf("%v upstream writes for %d GETs of 100 KB with a 1 MB reply buffer, want the pipeline sent in parts", got, n)
	}
}

// CLIENT LIST follows what a session in stream mode did: its name set while
// subscribed (RESP3), its subscriptions, and tracking.
func TestClientListFollowsStreamSessions(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	sub := dialClient(t, p.Addr)
	if r := sub.do("HELLO", "3"); r[0] != '%' {
		t.Fatal(r)
	}
	sub.do("SUBSCRIBE", "a", "b")
	sub.read() // the second subscribe confirmation
	if r := sub.do("CLIENT", "SETNAME", "my-sub"); r != "+OK\r\n" {
		t.Fatalf("CLIENT SETNAME while subscribed = %q", r)
	}
	if r := sub.do("CLIENT", "GETNAME"); r != "$6\r\nmy-sub\r\n" {
		t.Errorf("CLIENT GETNAME while subscribed = %q", r)
	}
	trk := dialClient(t, p.Addr)
	trk.do("CLIENT", "SETNAME", "trk")
	if r := trk.do("CLIENT", "TRACKING", "on"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	trk.do("PING")
	// Asked from the tracking session itself (stream mode) as from another.
	if r := trk.do("CLIENT", "LIST"); !strings.Contains(r, "name=trk ") || !strings.Contains(r, "name=my-sub ") {
		t.Errorf("CLIENT LIST from a session in stream mode:\n%s", r)
	}
	if r := trk.do("CLIENT", "INFO"); !strings.Contains(r, "name=trk ") || !strings.Contains(r, " flags=t ") {
		t.Errorf("CLIENT INFO from a session in stream mode = %q", r)
	}
	list := dialClient(t, p.Addr).do("CLIENT", "LIST")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`name=my-sub \S+ \S+ flags=P db=0 sub=2 psub=0 ssub=0 `),
		regexp.MustCompile(`name=trk \S+ \S+ flags=t db=0 sub=0 psub=0 ssub=0 `),
	} {
		if !want.MatchString(list) {
			t.Errorf("CLIENT LIST lacks %s:\n%s", want, list)
		}
	}
	// RESET on a session in stream mode clears what CLIENT LIST shows of
	// it, as on Redis (Redis's "RESET clears client state").
	if r := trk.do("RESET"); r != "+RESET\r\n" {
		t.Fatalf("RESET in stream mode = %q", r)
	}
	if r := trk.do("CLIENT", "INFO"); !strings.Contains(r, " name= ") || !strings.Contains(r, " flags=N ") || !strings.Contains(r, " db=0 ") {
		t.Errorf("CLIENT INFO after RESET in stream mode = %q", r)
	}
	if r := trk.do("CLIENT", "GETREDIR"); r != ":-1\r\n" {
		t.Errorf("CLIENT GETREDIR after RESET in stream mode = %q", r)
	}
}

// A connection pinned for blocking commands, transactions and watches
// changed no state the session does not track: it is kept for reuse without
// a RESET, which Redis's SLOWLOG and MONITOR would show the client (Redis's
// own unit/slowlog test reads SLOWLOG right after an EXEC, and after a
// client in db 9 leaves). One that holds state is reset while its client
// stays (SELECT 3, then SELECT 0) and closed when its client leaves, as the
// client's own connection would end.
func TestPinThatChangedNoStateNeedsNoReset(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	resets := func() string {
		return regexp.MustCompile(`cmdstat_reset:calls=\d+`).FindString(string(rs.Do(t, "INFO", "commandstats")))
	}
	for range 3 {
		if r := c.do("BLPOP", "nothing", "0.01"); r != "*-1\r\n" {
			t.Fatalf("BLPOP = %q", r)
		}
	}
	assertNoPins(t, p)
	c.do("MULTI")
	c.do("SET", "k", "v")
	if r := c.do("EXEC"); r != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC = %q", r)
	}
	assertNoPins(t, p)
	c.do("WATCH", "k")
	c.do("UNWATCH")
	assertNoPins(t, p)
	c.do("WATCH", "k")
	c.do("MULTI")
	c.do("SLOWLOG", "RESET")
	c.do("DISCARD")
	assertNoPins(t, p)

	// Clients that leave inside a transaction or in another database.
	inMulti := dialClient(t, p.Addr)
	inMulti.do("MULTI")
	if r := inMulti.do("SET", "k", "w"); r != "+QUEUED\r\n" {
		t.Fatalf("SET in MULTI = %q", r)
	}
	inDB := dialClient(t, p.Addr)
	inDB.do("SELECT", "3")
	held := func() bool {
		list := string(rs.Do(t, "CLIENT", "LIST"))
		return strings.Contains(list, " flags=x ") || strings.Contains(list, " db=3 ")
	}
	if !held() {
		t.Fatalf("no upstream connection in MULTI or db 3: %s", rs.Do(t, "CLIENT", "LIST"))
	}
	inMulti.nc.Close()
	inDB.nc.Close()
	assertNoPins(t, p)
	waitFor(t, "the connections of the clients that left to close", func() bool { return !held() })
	if r := resets(); r != "" {
		t.Errorf("pins that changed no state, or whose client left, were reset: %s", r)
	}
	if r := c.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Errorf("GET after the abandoned transaction = %q", r)
	}

	c.do("SELECT", "3")
	c.do("SELECT", "0")
	assertNoPins(t, p)
	waitFor(t, "the SELECT pin reset", func() bool { return resets() == "cmdstat_reset:calls=1" })
}

// TestSharedTransactionIsolated: transactions sent whole in one write go
// on the shared connections (no dedicated connection is lent: the idle
// and pinned gauges stay at 0, where one pinned transaction leaves its
// connection idle and spares dialled), while other clients' pipelines
// share those connections at the same time: no other client's command
// lands inside a transaction (it would be answered +QUEUED, and its
// write applied at the EXEC, or not at all), and each EXEC's array holds
// exactly its own commands' results.
func TestSharedTransactionIsolated(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.Upstream.Connections = 1 })
	sharedTransactionsBesidePipelines(t, p, 8, 200, func(w int) string { return fmt.Sprintf("tx:%d", w) })
}

// sharedTransactionsBesidePipelines runs clients clients through p, each
// sending MULTI, INCR, SET, PING, GET, EXEC in one write rounds times on
// keys named from key(w), beside as many clients pipelining INCR and GET
// of keys of their own, and fails the test on every reply that is not
// Redis's, and when a dedicated connection was lent (the transactions
// went on the shared connections, or the test shows nothing).
func sharedTransactionsBesidePipelines(t *testing.T, p *proxytest.Proxy, clients, rounds int, key func(w int) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, 2*clients)
	for w := range clients {
		wg.Add(2)
		go func() {
			defer wg.Done()
			c := dialClient(t, p.Addr)
			k := key(w)
			for i := range rounds {
				got := sendAll(c, []string{"MULTI"}, []string{"INCR", k}, []string{"SET", k + ":last", strconv.Itoa(i)},
					[]string{"PING"}, []string{"GET", k + ":last"}, []string{"EXEC"})
				want := []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n",
					fmt.Sprintf("*4\r\n:%d\r\n+OK\r\n+PONG\r\n$%d\r\n%d\r\n", i+1, len(strconv.Itoa(i)), i)}
				if !slices.Equal(got, want) {
					errs <- fmt.Sprintf("transaction client %d round %d: %q, want %q", w, i, got, want)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			c := dialClient(t, p.Addr)
			k := fmt.Sprintf("plain:%d", w)
			for i := range rounds {
				got := sendAll(c, []string{"INCR", k}, []string{"GET", k})
				n := strconv.Itoa(i + 1)
				if want := []string{":" + n + "\r\n", "$" + strconv.Itoa(len(n)) + "\r\n" + n + "\r\n"}; !slices.Equal(got, want) {
					errs <- fmt.Sprintf("plain client %d round %d: %q, want %q", w, i, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, m := range []string{"rproxy_upstream_pinned_connections", "rproxy_upstream_idle_dedicated_connections"} {
		if n := counterValue(t, p.Registry, m, nil); n != 0 {
			t.Errorf("%s = %v: a transaction sent whole took a dedicated connection", m, n)
		}
	}
}

// TestTransactionEdgesInOneWriteMatchRedis: transactions sent in one write
// that must not go on the shared connections, or that Redis refuses in
// part, get Redis's replies: an EXEC with an argument (refused, and the
// transaction stays open), a queue-time error, a DISCARD, a blocking
// command and a SELECT inside, a nested MULTI, a WATCH inside, a MULTI
// whose EXEC comes in a later write. After each the session is out of any
// transaction, as on Redis.
func TestTransactionEdgesInOneWriteMatchRedis(t *testing.T) {
	direct := redistest.Start(t)
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	seqs := [][][]string{
		{{"MULTI"}, {"SET", "a", "1"}, {"EXEC", "x"}, {"EXEC"}, {"GET", "a"}},
		{{"MULTI"}, {"SET", "a"}, {"INCR", "n"}, {"EXEC"}, {"GET", "n"}},
		{{"MULTI"}, {"SET", "d", "1"}, {"DISCARD"}, {"GET", "d"}},
		{{"MULTI"}, {"LPUSH", "l", "x"}, {"BLPOP", "l", "1"}, {"EXEC"}},
		{{"MULTI"}, {"SELECT", "3"}, {"SET", "s", "1"}, {"EXEC"}, {"GET", "s"}, {"SELECT", "0"}, {"GET", "s"}},
		{{"MULTI"}, {"MULTI"}, {"INCR", "m"}, {"EXEC"}, {"GET", "m"}},
		{{"MULTI"}, {"WATCH", "w"}, {"INCR", "w"}, {"EXEC"}},
		{{"MULTI"}, {"INCR", "later"}},
	}
	transactionsMatch(t, direct.Addr, p.Addr, seqs)
}

// transactionsMatch sends each sequence in one write to Redis at direct
// and to rproxy at proxy, each on a new connection, then an EXEC (two
// when the sequence ends with an INCR: its EXEC in a write of its own),
// and fails the test where the replies differ.
func transactionsMatch(t *testing.T, direct, proxy string, seqs [][][]string) {
	t.Helper()
	for _, seq := range seqs {
		dc, pc := dialClient(t, direct), dialClient(t, proxy)
		want, got := sendAll(dc, seq...), sendAll(pc, seq...)
		if last := seq[len(seq)-1][0]; last == "INCR" { // the EXEC in a write of its own
			want, got = append(want, dc.do("EXEC")), append(got, pc.do("EXEC"))
		}
		want, got = append(want, dc.do("EXEC")), append(got, pc.do("EXEC"))
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Errorf("%v:\n through rproxy %q\n direct         %q", seq, got, want)
		}
	}
}
