package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/resp"
)

// aclEntry2 is an ACL LOG entry as Redis 7.0 sends it in RESP2.
func aclEntry2(count int, reason, object, user, age string) string {
	return fmt.Sprintf("*14\r\n$5\r\ncount\r\n:%d\r\n$6\r\nreason\r\n$%d\r\n%s\r\n$7\r\ncontext\r\n$8\r\ntoplevel\r\n"+
		"$6\r\nobject\r\n$%d\r\n%s\r\n$8\r\nusername\r\n$%d\r\n%s\r\n$11\r\nage-seconds\r\n$%d\r\n%s\r\n"+
		"$11\r\nclient-info\r\n$4\r\nid=1\r\n",
		count, len(reason), reason, len(object), object, len(user), user, len(age), age)
}

// aclEntry3 is the same entry in RESP3: a map, its age a double.
func aclEntry3(count int, reason, object, user, age string) string {
	return fmt.Sprintf("%%7\r\n$5\r\ncount\r\n:%d\r\n$6\r\nreason\r\n$%d\r\n%s\r\n$7\r\ncontext\r\n$8\r\ntoplevel\r\n"+
		"$6\r\nobject\r\n$%d\r\n%s\r\n$8\r\nusername\r\n$%d\r\n%s\r\n$11\r\nage-seconds\r\n,%s\r\n"+
		"$11\r\nclient-info\r\n$4\r\nid=1\r\n",
		count, len(reason), reason, len(object), object, len(user), user, age)
}

func aclLogReply(entries ...string) []byte {
	return []byte(fmt.Sprintf("*%d\r\n%s", len(entries), strings.Join(entries, "")))
}

// TestJoinACLLogs: ACL LOG of every master joins as one server's log:
// newest first, cut to the count asked; entries of one kind (reason,
// context, object, user) on several masters within Redis's 60 s grouping
// window are one entry, whose count is the masters' added (a keyed
// command's denials, each on its key's master) or, for a command rproxy
// sent to every master, the largest (each master denied the same calls);
// the same kind more than 60 s apart stays two entries, as on one server.
func TestJoinACLLogs(t *testing.T) {
	for _, tc := range []struct {
		proto int
		entry func(count int, reason, object, user, age string) string
	}{{2, aclEntry2}, {3, aclEntry3}} {
		a := aclLogReply(
			tc.entry(1, "command", "config|set", "u", "0.5"),
			tc.entry(2, "command", "set", "u", "1.5"),
			tc.entry(1, "key", "k1", "u", "3"),
			tc.entry(1, "command", "set", "u", "200"),
		)
		b := aclLogReply(
			tc.entry(1, "command", "config|set", "u", "0.501"),
			tc.entry(3, "command", "set", "u", "1.2"),
			tc.entry(1, "key", "k2", "u", "2"),
		)
		c := aclLogReply(tc.entry(1, "command", "config|set", "u", "0.499"))
		m := merge{kind: mergeACLLog, parts: 3, limit: 10}
		want := aclLogReply(
			tc.entry(1, "command", "config|set", "u", "0.499"),
			tc.entry(5, "command", "set", "u", "1.2"),
			tc.entry(1, "key", "k2", "u", "2"),
			tc.entry(1, "key", "k1", "u", "3"),
			tc.entry(1, "command", "set", "u", "200"),
		)
		if got := m.reply([][]byte{a, b, c}); string(got) != string(want) {
			t.Errorf("RESP%d:\n got %q\nwant %q", tc.proto, got, want)
		}
		m.limit = 2
		want = aclLogReply(
			tc.entry(1, "command", "config|set", "u", "0.499"),
			tc.entry(5, "command", "set", "u", "1.2"),
		)
		if got := m.reply([][]byte{a, b, c}); string(got) != string(want) {
			t.Errorf("RESP%d, ACL LOG 2:\n got %q\nwant %q", tc.proto, got, want)
		}
		m.limit = 0
		if got := m.reply([][]byte{a, b, c}); string(got) != "*0\r\n" {
			t.Errorf("RESP%d, ACL LOG 0: %q", tc.proto, got)
		}
	}
	m := merge{kind: mergeACLLog, parts: 2, limit: 10}
	if got := m.reply([][]byte{[]byte("*0\r\n"), []byte("*0\r\n")}); string(got) != "*0\r\n" {
		t.Errorf("empty logs: %q", got)
	}
	refusal := "-ERR value is out of range, must be positive\r\n"
	if got := m.reply([][]byte{[]byte(refusal), []byte(refusal)}); string(got) != refusal {
		t.Errorf("a refused count: %q", got)
	}
	for _, bad := range []string{"+OK\r\n", "*1\r\n:1\r\n", "*1\r\n*2\r\n$5\r\ncount\r\n:1\r\n", "*1\r\n*3\r\n$5\r\ncount\r\n:1\r\n$1\r\nx\r\n"} {
		if got := m.reply([][]byte{[]byte(bad), []byte("*0\r\n")}); !strings.HasPrefix(string(got), "-ERR rproxy: unexpected") {
			t.Errorf("reply %q: %q, want rproxy's error", bad, got)
		}
	}
}

// TestACLLogSent: ACL LOG goes to every master and joins (mergeACLLog),
// with its count or 10; ACL LOG RESET goes to every master and answers
// +OK as a setting does.
func TestACLLogSent(t *testing.T) {
	name := fanOutName("acl", [][]byte{[]byte("ACL"), []byte("LOG")})
	kind, ok := fanOutCommands[name]
	if !ok || kind != mergeACLLog {
		t.Fatalf("%s: %v %v, want mergeACLLog", name, kind, ok)
	}
	reset := [][]byte{[]byte("ACL"), []byte("LOG"), []byte("reset")}
	if k, raw := fanOutSent(kind, reset, []byte("raw")); k != mergeOK || string(raw) != "raw" {
		t.Errorf("ACL LOG RESET: %v %q, want mergeOK, sent as it is", k, raw)
	}
	for args, want := range map[string]int{"ACL LOG": 10, "ACL LOG 3": 3, "ACL LOG 0": 0, "ACL LOG -1": 10, "ACL LOG x": 10} {
		var a [][]byte
		for _, f := range strings.Fields(args) {
			a = append(a, []byte(f))
		}
		if k, _ := fanOutSent(kind, a, nil); k != mergeACLLog {
			t.Errorf("%s: kind %v", args, k)
		}
		if got := aclLogCount(a); got != want {
			t.Errorf("%s: count %d, want %d", args, got, want)
		}
	}
}

// FuzzJoinACLLogs: whatever two masters answer to ACL LOG, the join is one
// whole reply (an error for what is not an ACL LOG) or a master's error
// as it came, no longer than what came in plus the counts' digits, and
// never a panic.
func FuzzJoinACLLogs(f *testing.F) {
	f.Add(string(aclLogReply(aclEntry2(2, "command", "set", "u", "1.5"))), string(aclLogReply(aclEntry2(3, "command", "set", "u", "1.2"))), 10)
	f.Add(string(aclLogReply(aclEntry3(1, "key", "k", "u", "0.5"))), "*0\r\n", 1)
	f.Add("-ERR x\r\n", "*1\r\n%1\r\n$5\r\ncount\r\n:1\r\n", 0)
	f.Fuzz(func(t *testing.T, a, b string, limit int) {
		m := merge{kind: mergeACLLog, parts: 2, limit: max(0, limit%20)}
		got := m.reply([][]byte{[]byte(a), []byte(b)})
		v, err := resp.Parse(got)
		if err != nil && string(got) != a && string(got) != b { // a master's error reply is passed on as it came
			t.Fatalf("join of %q and %q = %q: %v", a, b, got, err)
		}
		if v.Kind == '*' && len(got) > len(a)+len(b)+20*(len(v.Elems)+1) {
			t.Fatalf("join of %q and %q = %d bytes", a, b, len(got))
		}
	})
}
