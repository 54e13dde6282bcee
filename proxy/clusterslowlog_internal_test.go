package proxy

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/resp"
)

// slowlogReply is a master's SLOWLOG GET reply; each entry is "id at
// addr command args...".
func slowlogReply(entries ...string) []byte {
	out := appendAggregate(nil, '*', len(entries))
	for _, e := range entries {
		var id, at int64
		var addr string
		f := strings.Fields(e)
		fmt.Sscan(f[0], &id)
		fmt.Sscan(f[1], &at)
		addr = f[2]
		out = appendAggregate(out, '*', 6)
		out = resp.AppendInt(out, id)
		out = resp.AppendInt(out, at)
		out = resp.AppendInt(out, 5)
		out = resp.AppendCommandString(out, f[3:]...)
		out = resp.AppendBulk(out, []byte(addr))
		out = resp.AppendBulk(out, nil)
	}
	return out
}

// joinedCommands is the joined log's commands, newest first, as
// "at command args...".
func joinedCommands(t *testing.T, r []byte) []string {
	t.Helper()
	v, err := resp.Parse(r)
	if err != nil || v.Kind != '*' {
		t.Fatalf("joined log %q: %v", r, err)
	}
	var out []string
	for _, e := range v.Elems {
		s := fmt.Sprint(e.Elems[1].Int)
		for _, a := range e.Elems[3].Elems {
			s += " " + string(a.Str)
		}
		out = append(out, s)
	}
	return out
}

// TestClusterSlowlogJoin: the masters' logs join into one server's log. A
// command rproxy sent to every master (SLOWLOG RESET, CONFIG SET, DEBUG
// SLEEP) is logged by each and is one entry, after what any master logged
// after it even in the same second with a lower id; rproxy's own
// housekeeping is left out; LEN counts the joined log (Redis's Tcl suite,
// unit/slowlog in cluster mode: "Rewritten commands are logged as their
// original command", "only logs commands taking more time than
// specified" and 5 more).
func TestClusterSlowlogJoin(t *testing.T) {
	own := func(addr string, args [][]byte) bool { return addr == "own:1" && string(args[0]) == "PING" }
	cases := []struct {
		name    string
		masters [][]string // each master's log, newest first
		want    []string
	}{{
		name: "a command sent to every master is one entry, after what followed it",
		masters: [][]string{
			{"9 100 a:1 geoadd k 1 2 m", "8 100 a:1 slowlog reset"},
			{"30 100 b:1 slowlog reset"},
			{"40 100 c:1 slowlog reset"},
		},
		want: []string{"100 geoadd k 1 2 m", "100 slowlog reset"},
	}, {
		name: "copies a second apart; one master logged none",
		masters: [][]string{
			{"5 101 a:1 debug sleep 0.2", "4 100 a:1 get x"},
			{"7 102 b:1 debug sleep 0.2"},
			{"3 99 c:1 set y 1"},
		},
		want: []string{"102 debug sleep 0.2", "100 get x", "99 set y 1"},
	}, {
		name: "the same command twice: two entries",
		masters: [][]string{
			{"3 200 a:1 config set slowlog-log-slower-than 0", "2 200 a:1 incr n", "1 200 a:1 config set slowlog-log-slower-than 0"},
			{"9 200 b:1 config set slowlog-log-slower-than 0", "8 200 b:1 config set slowlog-log-slower-than 0"},
		},
		want: []string{"200 config set slowlog-log-slower-than 0", "200 incr n", "200 config set slowlog-log-slower-than 0"},
	}, {
		name: "the same command on two masters, not sent to every master: two entries",
		masters: [][]string{
			{"3 300 a:1 incr n"},
			{"9 300 b:1 incr n"},
		},
		want: []string{"300 incr n", "300 incr n"},
	}, {
		name: "copies logged in different orders: each once",
		masters: [][]string{
			{"2 400 a:1 config set a 1", "1 400 a:1 config set b 1"},
			{"2 400 b:1 config set b 1", "1 400 b:1 config set a 1"},
		},
		want: []string{"400 config set a 1", "400 config set b 1"},
	}, {
		name: "rproxy's own commands left out",
		masters: [][]string{
			{"3 500 own:1 PING", "2 500 a:1 PING"},
			{"9 500 own:1 get k"},
		},
		want: []string{"500 get k", "500 PING"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var replies [][]byte
			for _, log := range tc.masters {
				replies = append(replies, slowlogReply(log...))
			}
			m := merge{kind: mergeSlowlog, parts: len(replies), limit: -1, own: own}
			if got := joinedCommands(t, m.slowlog(replies)); !slices.Equal(got, tc.want) {
				t.Errorf("SLOWLOG GET -1:\n got %q\nwant %q", got, tc.want)
			}
			m.limit = 1
			if got := joinedCommands(t, m.slowlog(replies)); !slices.Equal(got, tc.want[:1]) {
				t.Errorf("SLOWLOG GET 1: %q, want %q", got, tc.want[:1])
			}
			m.kind = mergeSlowlogLen
			if n, ok := resp.Int(m.reply(replies)); !ok || n != int64(len(tc.want)) {
				t.Errorf("SLOWLOG LEN: %d, want %d", n, len(tc.want))
			}
		})
	}
}

// FuzzClusterSlowlogJoin: whatever two masters answer SLOWLOG GET with,
// the join returns one reply (an array or rproxy's error), never a panic,
// and never more entries than the masters gave.
func FuzzClusterSlowlogJoin(f *testing.F) {
	f.Add(slowlogReply("9 100 a:1 geoadd k 1 2 m", "8 100 a:1 slowlog reset"), slowlogReply("30 100 b:1 slowlog reset"))
	f.Add(slowlogReply("2 400 a:1 config set a 1", "1 400 a:1 config set b 1"), slowlogReply("2 400 b:1 config set b 1", "1 400 b:1 config set a 1"))
	f.Add([]byte("*1\r\n*4\r\n:1\r\n:2\r\n:3\r\n*0\r\n"), []byte("*0\r\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		m := merge{kind: mergeSlowlog, parts: 2, limit: -1}
		out := m.slowlog([][]byte{a, b})
		v, err := resp.Parse(out)
		if err != nil {
			t.Fatalf("join of %q and %q: %q does not parse: %v", a, b, out, err)
		}
		if v.Kind == '-' {
			return
		}
		ea, _ := arrayElements(a)
		eb, _ := arrayElements(b)
		if v.Kind != '*' || len(v.Elems) > len(ea)+len(eb) {
			t.Fatalf("join of %q and %q: %q", a, b, out)
		}
	})
}

// FuzzMonitorFanOutLine: any MONITOR command text is read without a panic.
func FuzzMonitorFanOutLine(f *testing.F) {
	for _, s := range []string{`"DBSIZE"`, `"CONFIG" "SET" "a" "b"`, `"SCRIPT" "LOAD" "x\"y"`, `"`, `"\`, `"a" "`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, cmd []byte) {
		fanOutLine(cmd)
		// The name upstream.OwnMonitor matches: a prefix of the line's
		// first quoted word, never longer than the line.
		if name := monitorLineName(cmd); len(name) > 0 && !bytes.HasPrefix(cmd, []byte(`"`+name+`"`)) {
			t.Fatalf("monitorLineName(%q) = %q", cmd, name)
		}
	})
}

// BenchmarkClusterSlowlogJoin: 16 masters' full logs of 1024 entries, half
// of them copies of commands sent to every master.
func BenchmarkClusterSlowlogJoin(b *testing.B) {
	var replies [][]byte
	for m := range 16 {
		var log []string
		for i := range 1024 {
			at := 100000 - i/8
			if i%2 == 0 {
				log = append(log, fmt.Sprintf("%d %d a:%d config set x %d", 5000-i, at, m, i))
			} else {
				log = append(log, fmt.Sprintf("%d %d a:%d get k%d-%d", 5000-i, at, m, m, i))
			}
		}
		replies = append(replies, slowlogReply(log...))
	}
	m := merge{kind: mergeSlowlog, parts: len(replies), limit: -1}
	b.ResetTimer()
	for range b.N {
		m.slowlog(replies)
	}
}
