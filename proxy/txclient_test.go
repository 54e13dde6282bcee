package proxy_test

import (
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
)

// The CLIENT commands rproxy answers, queued inside MULTI, are answered in
// EXEC's array with the session's own values (its id, its name as the
// transaction left it), take effect only when the transaction runs (not
// after a WATCH aborted it), and the commands after EXEC in the same write
// see their effect. The byte-for-byte comparison with Redis is in
// statefulCorpus and the random pipelines; ids differ from Redis's there.
func TestClientCommandsAnsweredInsideExec(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			c := dialClient(t, p.Addr)
			c.do("HELLO", proto)
			id := c.id()

			got := c.pipeline([]string{"MULTI"}, []string{"CLIENT", "ID"}, []string{"CLIENT", "INFO"},
				[]string{"CLIENT", "SETNAME", "tx-name"}, []string{"CLIENT", "LIST", "ID", id}, []string{"GET", "nokey"},
				[]string{"EXEC"}, []string{"CLIENT", "GETNAME"})
			replies := strings.SplitN(got, "+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n", 2)
			if len(replies) != 2 || replies[0] != "+OK\r\n" {
				t.Fatalf("MULTI and the queued commands: %q", got)
			}
			exec := replies[1]
			if !strings.HasPrefix(exec, "*5\r\n:"+id+"\r\n") {
				t.Fatalf("EXEC's array does not start with CLIENT ID %s: %q", id, exec)
			}
			// CLIENT INFO before the SETNAME shows no name; CLIENT LIST
			// after it shows the new one.
			info, list, _ := strings.Cut(exec[strings.Index(exec, "id="):], "+OK\r\n")
			if !strings.Contains(info, "id="+id+" ") || !strings.Contains(info, " name= ") {
				t.Errorf("CLIENT INFO in EXEC = %q, want id=%s and no name", info, id)
			}
			// As Redis shows a client running EXEC (of 5 commands).
			if !strings.Contains(info, " flags=x ") || !strings.Contains(info, " multi=5 ") || !strings.Contains(info, " cmd=exec ") {
				t.Errorf("CLIENT INFO in EXEC = %q, want flags=x multi=5 cmd=exec", info)
			}
			if !strings.Contains(list, "id="+id+" ") || !strings.Contains(list, " name=tx-name ") {
				t.Errorf("CLIENT LIST in EXEC = %q, want id=%s name=tx-name", list, id)
			}
			if strings.Contains(exec, "rproxy:") {
				t.Errorf("a marker reached the client: %q", exec)
			}
			if !strings.HasSuffix(exec, "$7\r\ntx-name\r\n") {
				t.Errorf("CLIENT GETNAME after EXEC in the same write: %q, want tx-name", exec)
			}

			// A transaction a WATCH aborts changes nothing.
			other := dialClient(t, p.Addr)
			c.pipeline([]string{"WATCH", "watched"}, []string{"MULTI"}, []string{"CLIENT", "SETNAME", "never"}, []string{"CLIENT", "GETNAME"})
			other.do("SET", "watched", "1")
			null := "*-1\r\n"
			if proto == "3" {
				null = "_\r\n"
			}
			if got := c.pipeline([]string{"EXEC"}, []string{"CLIENT", "GETNAME"}); got != null+"$7\r\ntx-name\r\n" {
				t.Errorf("aborted EXEC, then GETNAME = %q, want %q", got, null+"$7\r\ntx-name\r\n")
			}
			// The next transaction is answered as usual.
			if got := c.pipeline([]string{"MULTI"}, []string{"CLIENT", "GETNAME"}, []string{"EXEC"}); got != "+OK\r\n+QUEUED\r\n*1\r\n$7\r\ntx-name\r\n" {
				t.Errorf("next transaction = %q", got)
			}
			// A transaction discarded, and one opened after it in the same
			// write, whose EXEC comes in the next.
			if got := c.pipeline([]string{"MULTI"}, []string{"CLIENT", "SETNAME", "discarded"}, []string{"DISCARD"},
				[]string{"MULTI"}, []string{"CLIENT", "SETNAME", "later"}); got != "+OK\r\n+QUEUED\r\n+OK\r\n+OK\r\n+QUEUED\r\n" {
				t.Errorf("DISCARD, then a transaction left open = %q", got)
			}
			if got := c.pipeline([]string{"CLIENT", "GETNAME"}, []string{"EXEC"}, []string{"CLIENT", "GETNAME"}); got != "+QUEUED\r\n*2\r\n+OK\r\n$5\r\nlater\r\n$5\r\nlater\r\n" {
				t.Errorf("its EXEC in the next write = %q", got)
			}
		})
	}
}

// In auth.mode proxy an AUTH queued inside MULTI is checked at EXEC and
// answered in its array; a good one logs the session in as that user
// then, and not at all when a WATCH aborts the transaction.
func TestAuthAnsweredInsideExec(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"alice": sha("alicepw"), "bob": sha("bobpw")}
	})
	c := dialClient(t, p.Addr)
	if r := c.do("AUTH", "alice", "alicepw"); r != "+OK\r\n" {
		t.Fatalf("AUTH alice = %q", r)
	}
	got := c.pipeline([]string{"MULTI"}, []string{"AUTH", "bob", "wrong"}, []string{"CLIENT", "INFO"}, []string{"AUTH", "bob", "bobpw"},
		[]string{"AUTH", "a", "b", "c"}, []string{"EXEC"}, []string{"CLIENT", "INFO"})
	head := "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n-WRONGPASS "
	if !strings.HasPrefix(got, head) || !strings.Contains(got, "\r\n+OK\r\n-ERR syntax error\r\n$") {
		t.Fatalf("AUTH inside MULTI: %q", got)
	}
	before, after, _ := strings.Cut(got[strings.Index(got, "id="):], "+OK\r\n-ERR syntax error")
	if !strings.Contains(before, " user=alice ") || !strings.Contains(after, " user=bob ") {
		t.Errorf("CLIENT INFO inside EXEC before the AUTH, then after EXEC: %q, %q: want alice, then bob", before, after)
	}

	other := dialClient(t, p.Addr)
	other.do("AUTH", "alice", "alicepw")
	c.pipeline([]string{"WATCH", "w"}, []string{"MULTI"}, []string{"AUTH", "alice", "alicepw"})
	other.do("SET", "w", "1")
	if got := c.do("EXEC"); got != "*-1\r\n" {
		t.Fatalf("EXEC after the watched key changed: %q", got)
	}
	if info := c.do("CLIENT", "INFO"); !strings.Contains(info, " user=bob ") {
		t.Errorf("the aborted transaction's AUTH logged the session in: %q", info)
	}
}

// A transaction may queue at most 1,024 commands for rproxy to answer in
// EXEC (their arguments are kept until then): the next is refused, which
// aborts the transaction, instead of growing rproxy's memory without end.
func TestClientCommandsInsideExecBounded(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	cmds := [][]string{{"MULTI"}}
	for range 1025 {
		cmds = append(cmds, []string{"CLIENT", "GETNAME"})
	}
	got := c.pipeline(append(cmds, []string{"EXEC"})...)
	want := "+OK\r\n" + strings.Repeat("+QUEUED\r\n", 1024) + "-ERR rproxy: more than 1024 CLIENT and AUTH commands (or 1048576 bytes of them) in one transaction\r\n-EXECABORT"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("1025 CLIENT GETNAMEs in a transaction: ...%q", got[max(0, len(got)-200):])
	}
	// The next transaction starts afresh.
	if got := c.pipeline([]string{"MULTI"}, []string{"CLIENT", "GETNAME"}, []string{"EXEC"}); got != "+OK\r\n+QUEUED\r\n*1\r\n$-1\r\n" {
		t.Errorf("the next transaction = %q", got)
	}
	big := strings.Repeat("n", 600_000)
	got = c.pipeline([]string{"MULTI"}, []string{"CLIENT", "SETNAME", big}, []string{"CLIENT", "SETNAME", big}, []string{"EXEC"})
	if !strings.HasPrefix(got, "+OK\r\n+QUEUED\r\n-ERR rproxy: more than 1024") || !strings.HasSuffix(got, "-EXECABORT Transaction discarded because of previous errors.\r\n") {
		t.Errorf("two 600 KB names in a transaction: %q", got)
	}
}

// The policy judges a CLIENT or AUTH command queued inside MULTI as it
// judges it outside: a rule that denies CLIENT SETNAME refuses it there
// too (which aborts the transaction), not only the ECHO queued in its
// place.
func TestPolicyJudgesClientCommandsInsideMulti(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(func(pc *policy.Config) {
		pc.Rules = []policy.Rule{{Name: "no-names", Commands: []string{"client|setname"}, Action: policy.Deny}}
	}))
	c := dialClient(t, p.Addr)
	if r := c.do("CLIENT", "SETNAME", "x"); !strings.HasPrefix(r, "-DENIED") {
		t.Fatalf("CLIENT SETNAME outside MULTI = %q, want the rule's refusal", r)
	}
	got := c.pipeline([]string{"MULTI"}, []string{"CLIENT", "SETNAME", "x"}, []string{"CLIENT", "GETNAME"}, []string{"EXEC"}, []string{"CLIENT", "GETNAME"})
	if !strings.HasPrefix(got, "+OK\r\n-DENIED ") || !strings.Contains(got, "+QUEUED\r\n-EXECABORT ") || !strings.HasSuffix(got, "$-1\r\n") {
		t.Errorf("CLIENT SETNAME inside MULTI under a rule that denies it: %q", got)
	}
}

// CLIENT KILL and CLIENT UNBLOCK queued inside MULTI act at EXEC, their
// answers in EXEC's array, as on Redis: the same bytes from Redis directly
// and through rproxy for a transaction that kills a client, unblocks a
// blocked one and gets each command's errors in its place; one that kills
// its own client, which is closed once EXEC's reply is written (the
// command after EXEC in the same write never runs); and transactions
// that are discarded or aborted at queue time, which kill nothing.
func TestClientKillAndUnblockAnsweredInsideExec(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	run := func(addr string) []string {
		c := dialClient(t, addr)
		victim := dialClient(t, addr)
		blocked := dialClient(t, addr)
		survivor := dialClient(t, addr)
		vid, bid, sid := victim.id(), blocked.id(), survivor.id()
		blocked.send(pipeline([]string{"BLPOP", "nolist", "0"}))
		waitFor(t, "the BLPOP blocked", func() bool {
			return strings.Contains(string(rs.Do(t, "INFO", "clients")), "\r\nblocked_clients:1\r\n")
		})
		var out []string
		out = append(out, c.pipeline([]string{"MULTI"}, []string{"SET", "m", "1"},
			[]string{"CLIENT", "KILL", "ID", vid}, []string{"CLIENT", "KILL", "ID", "999999"},
			[]string{"CLIENT", "KILL", "127.0.0.1:1"}, []string{"CLIENT", "KILL", "ID", "x"},
			[]string{"CLIENT", "KILL", "ID", sid, "MAXAGE"},
			[]string{"CLIENT", "UNBLOCK", bid}, []string{"CLIENT", "UNBLOCK", "999999"},
			[]string{"CLIENT", "UNBLOCK", bid, "later"}, []string{"CLIENT", "UNBLOCK", "x"}, []string{"EXEC"}))
		out = append(out, "blocked: "+string(blocked.read()), "victim: "+victim.expectClosed())
		// Discarded, and aborted at queue time (an arity error; CLIENT
		// KILL without arguments is one too): the survivor lives on.
		out = append(out, c.pipeline([]string{"MULTI"}, []string{"CLIENT", "KILL", "ID", sid}, []string{"DISCARD"},
			[]string{"MULTI"}, []string{"CLIENT", "KILL", "ID", sid}, []string{"GET"}, []string{"EXEC"},
			[]string{"MULTI"}, []string{"CLIENT", "KILL"}, []string{"EXEC"}))
		out = append(out, "survivor: "+survivor.do("PING"))
		// It kills itself: EXEC's reply, then the close; PING never runs.
		c.send(pipeline([]string{"MULTI"}, []string{"CLIENT", "KILL", "ID", c.id(), "SKIPME", "no"}, []string{"EXEC"}, []string{"PING"}))
		out = append(out, "self: "+c.expectClosed())
		return out
	}
	direct := run(rs.Addr)
	rs.Do(t, "DEL", "m")
	through := run(p.Addr)
	if strings.Join(through, "\n") != strings.Join(direct, "\n") {
		t.Errorf("through rproxy:\n%q\ndirect:\n%q", through, direct)
	}
	if !strings.Contains(direct[0], "*10\r\n+OK\r\n:1\r\n:0\r\n-ERR No such client\r\n") || direct[1] != "blocked: *-1\r\n" {
		t.Errorf("the transaction, direct (the scenario itself is wrong): %q, %q", direct[0], direct[1])
	}
}
