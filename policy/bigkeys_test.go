package policy

import (
	"strings"
	"testing"
)

func TestDelVerdict(t *testing.T) {
	p, reg := mustNew(t, DefaultConfig())
	if !p.BigKeyCheck() || p.BigKeyAction() != Deny {
		t.Fatalf("defaults: check %v action %s", p.BigKeyCheck(), p.BigKeyAction())
	}
	for _, tc := range []struct {
		typ  string
		size int64
		over bool
	}{
		{"hash", 10000, false},
		{"hash", 10001, true},
		{"list", 1e6, true},
		{"set", 20000, true},
		{"zset", 20000, true},
		{"stream", 20000, true},
		{"string", 1 << 20, false},
		{"string", 1<<20 + 1, true},
		{"string", 20000, false}, // elements limit is not a byte limit
		{"none", 1e9, false},
		{"ReJSON-RL", 1e9, false},
	} {
		over, reply := p.DelVerdict([]byte("k"), tc.typ, tc.size)
		if over != tc.over || (reply != nil) != over {
			t.Errorf("%s size %d: over %v reply %q", tc.typ, tc.size, over, reply)
		}
	}
	if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", "bigkey-del", "action", "deny"); got != 6 {
		t.Fatalf("bigkey-del counted %v, want 6", got)
	}

	_, reply := p.DelVerdict([]byte("big:\r\n"+strings.Repeat("x", 100)), "hash", 250000)
	s := string(reply)
	if !strings.HasPrefix(s, "-DENIED ") || !strings.HasSuffix(s, "\r\n") || strings.Count(s, "\r") != 1 || strings.Count(s, "\n") != 1 {
		t.Fatalf("reply is not one RESP error line: %q", s)
	}
	for _, w := range []string{`"big:\r\n`, "...", "hash", "250000 elements", "UNLINK"} {
		if !strings.Contains(s, w) {
			t.Errorf("reply lacks %q: %q", w, s)
		}
	}
}

func TestDelVerdictRewriteAndOff(t *testing.T) {
	p, reg := mustNew(t, Config{BigKeys: BigKeyConfig{DelMaxElements: 10, Action: Rewrite}})
	if over, reply := p.DelVerdict([]byte("k"), "list", 11); !over || reply != nil {
		t.Fatalf("rewrite: over %v reply %q", over, reply)
	}
	if over, _ := p.DelVerdict([]byte("k"), "string", 1<<30); over {
		t.Fatal("the byte check is off (0) but a string was over")
	}
	if p.BigKeyAction() != Rewrite {
		t.Fatal(p.BigKeyAction())
	}
	if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", "bigkey-del", "action", "rewrite"); got != 1 {
		t.Fatalf("counted %v", got)
	}
	off, _ := mustNew(t, Config{})
	if off.BigKeyCheck() {
		t.Fatal("zero limits still ask for a probe")
	}
}

func TestCheckValueSize(t *testing.T) {
	p, reg := mustNew(t, Config{BigKeys: BigKeyConfig{MaxValueBytes: 4}})
	for _, tc := range []struct {
		line   string
		denied bool
	}{
		{"SET k 1234", false},
		{"SET k 12345", true},
		{"SET k12345 v", false}, // the key is not the value
		{"SET k v EX 100000", false},
		{"SETEX k 100000 12345", true},
		{"SETEX k 100000 1234", false},
		{"PSETEX k 1 12345", true},
		{"SETNX k 12345", true},
		{"GETSET k 12345", true},
		{"APPEND k 12345", true},
		{"SETRANGE k 0 12345", true},
		{"MSET a 1 b 12345", true},
		{"MSET a 1 b12345 2", false},
		{"MSETNX a 12345", true},
		{"HSET h f 1 g 12345", true},
		{"HSET h f12345 1", false},
		{"HMSET h f 12345", true},
		{"HSETNX h f 12345", true},
		{"LPUSH l 1 2 12345", true},
		{"RPUSH l 1 2 3", false},
		{"LPUSHX l 12345", true},
		{"RPUSHX l 12345", true},
		{"SADD s 12345", true},
		{"LSET l 0 12345", true},
		{"LINSERT l BEFORE p 12345", true},
		{"LINSERT l BEFORE pivot12345 x", false},
		{"GET 12345", false},
		{"SET", false},
	} {
		reply, denied := p.CheckValueSize(cmd(tc.line))
		if denied != tc.denied || (reply != nil) != denied {
			t.Errorf("%s: denied %v reply %q", tc.line, denied, reply)
		}
		if denied && (!strings.HasPrefix(string(reply), "-DENIED ") || !strings.Contains(string(reply), "5 bytes")) {
			t.Errorf("%s: reply %q", tc.line, reply)
		}
	}
	if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", "max-value", "action", "deny"); got != 18 {
		t.Fatalf("max-value counted %v", got)
	}
	off, _ := mustNew(t, Config{})
	if _, denied := off.CheckValueSize(cmd("SET k " + strings.Repeat("x", 1<<20))); denied {
		t.Fatal("MaxValueBytes 0 refused a value")
	}
}
