package command

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

func TestBuiltinClassifies(t *testing.T) {
	tb := Builtin()
	if tb.Len() < 200 {
		t.Fatalf("builtin table has %d commands", tb.Len())
	}
	cases := map[string]Handling{
		"GET": Forward, "set": Forward, "Hello": Hello, "client": Client, "SELECT": Select,
		"quit": Quit, "reset": Reset, "multi": Transaction, "exec": Transaction, "watch": Transaction,
		"subscribe": Subscribe, "auth": Unsupported, "monitor": Subscribe, "sync": Subscribe, "psync": Subscribe,
		"blpop": BlockingCmd, "brpoplpush": BlockingCmd, "bzmpop": BlockingCmd, "xread": BlockingCmd,
		"wait": BlockingCmd, "publish": Forward, "eval": Forward,
	}
	for name, want := range cases {
		info := tb.Lookup([]byte(name))
		if info == nil {
			t.Fatalf("%s: not in the table", name)
		}
		if info.Handling != want {
			t.Errorf("%s: handling %d, want %d", name, info.Handling, want)
		}
	}
	get := tb.Lookup([]byte("get"))
	if !get.Has(ReadOnly) || get.Has(Write) || get.FirstKey != 1 || get.LastKey != 1 || get.Step != 1 || get.Arity != 2 {
		t.Errorf("get info = %+v", get)
	}
	if tb.Lookup([]byte("nosuchcommand")) != nil {
		t.Error("unknown command found")
	}
	if info := tb.LookupArgs([][]byte{[]byte("CLIENT"), []byte("SetName"), []byte("x")}); info == nil || info.Name != "client|setname" {
		t.Errorf("LookupArgs(CLIENT SETNAME) = %+v", info)
	}
	if info := tb.LookupArgs([][]byte{[]byte("client"), []byte("nosuch")}); info == nil || info.Name != "client" {
		t.Errorf("LookupArgs(CLIENT nosuch) = %+v", info)
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	tb := Builtin()
	name := []byte("GeT")
	long := []byte("ZRANGEBYSCORE")
	allocs := testing.AllocsPerRun(1000, func() {
		if tb.Lookup(name) == nil || tb.Lookup(long) == nil {
			t.Fatal("lookup failed")
		}
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocates %v times per call", allocs)
	}
}

// The table loaded from a live server matches the generated built-in one for
// the server version the built-in table was generated from.
func TestFromReplyMatchesLiveServer(t *testing.T) {
	rs := redistest.Start(t)
	for _, proto := range []string{"2", "3"} {
		var raw []byte
		if proto == "3" {
			raw = helloThenCommand(t, rs)
		} else {
			raw = rs.Do(t, "COMMAND")
		}
		tb, err := FromReply(raw)
		if err != nil {
			t.Fatalf("RESP%s: FromReply: %v", proto, err)
		}
		if tb.Source() != "upstream" {
			t.Fatalf("source %q", tb.Source())
		}
		builtin := Builtin()
		if tb.Len() != builtin.Len() && serverVersion(t) == "7.0.15" {
			t.Errorf("RESP%s: %d commands from the server, %d built in", proto, tb.Len(), builtin.Len())
		}
		for _, name := range []string{"get", "set", "blpop", "client", "xread", "hello"} {
			a, b := tb.Lookup([]byte(name)), builtin.Lookup([]byte(name))
			if a == nil || b == nil {
				t.Fatalf("RESP%s: %s missing (server %v, builtin %v)", proto, name, a != nil, b != nil)
			}
			if a.Flags != b.Flags || a.Arity != b.Arity || a.FirstKey != b.FirstKey || a.Handling != b.Handling {
				t.Errorf("RESP%s: %s differs: server %+v builtin %+v", proto, name, a, b)
			}
		}
		if info := tb.LookupArgs([][]byte{[]byte("client"), []byte("setname")}); info.Name != "client|setname" {
			t.Errorf("RESP%s: subcommands not loaded: %+v", proto, info)
		}
	}
}

func serverVersion(t *testing.T) string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		t.Fatalf("redis-server --version: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if len(f) > 2 && f[:2] == "v=" {
			return f[2:]
		}
	}
	return ""
}

// helloThenCommand fetches COMMAND over a RESP3 connection.
func helloThenCommand(t *testing.T, rs *redistest.Server) []byte {
	t.Helper()
	c := dial(t, rs.Addr)
	defer c.Close()
	c.Write(resp.AppendCommandString(resp.AppendCommandString(nil, "HELLO", "3"), "COMMAND"))
	rd := newReader(c)
	if _, err := resp.ReadReply(rd, nil); err != nil {
		t.Fatalf("HELLO: %v", err)
	}
	raw, err := resp.ReadReply(rd, nil)
	if err != nil {
		t.Fatalf("COMMAND: %v", err)
	}
	if raw[0] != '*' {
		t.Fatalf("COMMAND over RESP3 starts with %q", raw[0])
	}
	return raw
}

func TestFromReplyRejectsGarbage(t *testing.T) {
	for _, raw := range []string{"+OK\r\n", "*0\r\n", "*1\r\n*2\r\n$3\r\nget\r\n:2\r\n", "$-1\r\n", "garbage"} {
		if _, err := FromReply([]byte(raw)); err == nil {
			t.Errorf("FromReply(%q) succeeded", raw)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	tb := Builtin()
	name := []byte("GET")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if tb.Lookup(name) == nil {
			b.Fatal("not found")
		}
	}
}

func TestIDsAreDense(t *testing.T) {
	tb := Builtin()
	names := tb.Names()
	if len(names) != tb.Len() {
		t.Fatalf("%d names for %d commands", len(names), tb.Len())
	}
	for id, name := range names {
		info := tb.Lookup([]byte(name))
		if info == nil || info.ID != id {
			t.Fatalf("names[%d] = %q, its info %+v", id, name, info)
		}
	}
	sub := tb.LookupArgs([][]byte{[]byte("client"), []byte("setname")})
	if sub.ID != tb.Lookup([]byte("client")).ID {
		t.Fatal("a subcommand does not share its parent's ID")
	}
}
