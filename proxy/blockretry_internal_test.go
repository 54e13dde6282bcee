package proxy

import (
	"testing"
	"time"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

func TestLowerTimeout(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		ms   int64
		want []string // nil: left as sent
	}{
		{"blpop", []string{"BLPOP", "a", "b", "5"}, 1200, []string{"BLPOP", "a", "b", "3.800"}},
		{"brpop", []string{"BRPOP", "a", "0.25"}, 100, []string{"BRPOP", "a", "0.150"}},
		{"brpop", []string{"BRPOP", "a", "0.0001"}, 5, []string{"BRPOP", "a", "0.001"}}, // Redis waits 1 ms for it
		{"blpop", []string{"BLPOP", "a", "2"}, 3000, []string{"BLPOP", "a", "0.001"}},   // spent: the least wait
		{"blpop", []string{"BLPOP", "a", "0"}, 3000, nil},                               // for ever
		{"blpop", []string{"BLPOP", "a", "-1"}, 3000, nil},                              // Redis's error
		{"blpop", []string{"BLPOP", "a", "0x10"}, 3000, nil},                            // read differently: left to Redis
		{"blpop", []string{"BLPOP", "a", "inf"}, 3000, nil},
		{"blmove", []string{"BLMOVE", "a", "b", "LEFT", "RIGHT", "1.5"}, 500, []string{"BLMOVE", "a", "b", "LEFT", "RIGHT", "1.000"}},
		{"brpoplpush", []string{"BRPOPLPUSH", "a", "b", "10"}, 1, []string{"BRPOPLPUSH", "a", "b", "9.999"}},
		{"bzpopmin", []string{"BZPOPMIN", "z", "3"}, 1000, []string{"BZPOPMIN", "z", "2.000"}},
		{"blmpop", []string{"BLMPOP", "4", "1", "a", "LEFT"}, 1000, []string{"BLMPOP", "3.000", "1", "a", "LEFT"}},
		{"bzmpop", []string{"BZMPOP", "4", "1", "z", "MIN"}, 1000, []string{"BZMPOP", "3.000", "1", "z", "MIN"}},
		{"xread", []string{"XREAD", "COUNT", "2", "BLOCK", "5000", "STREAMS", "s", "$"}, 1200, []string{"XREAD", "COUNT", "2", "BLOCK", "3800", "STREAMS", "s", "$"}},
		{"xread", []string{"XREAD", "BLOCK", "0", "STREAMS", "s", "$"}, 1200, nil},
		{"xread", []string{"XREAD", "BLOCK", "+5000", "STREAMS", "s", "$"}, 1200, nil}, // Redis's error to give
		{"xread", []string{"XREAD", "BLOCK", "05000", "STREAMS", "s", "$"}, 1200, nil},
		{"xread", []string{"XREAD", "STREAMS", "block", "$"}, 1200, nil}, // a stream named block
		{"xreadgroup", []string{"XREADGROUP", "GROUP", "block", "count", "NOACK", "BLOCK", "100", "STREAMS", "s", ">"}, 300, []string{"XREADGROUP", "GROUP", "block", "count", "NOACK", "BLOCK", "1", "STREAMS", "s", ">"}},
		{"xreadgroup", []string{"XREADGROUP", "GROUP", "g", "c", "BLOCK"}, 300, nil},
	} {
		got, ok := lowerTimeout(rawArgs(resp.AppendCommandString(nil, c.args...)), c.name, c.ms)
		if c.want == nil {
			if ok {
				t.Errorf("%q less %d ms: changed to %q, want it left as sent", c.args, c.ms, got)
			}
			continue
		}
		if want := resp.AppendCommandString(nil, c.want...); !ok || string(got) != string(want) {
			t.Errorf("%q less %d ms: %q (%v), want %q", c.args, c.ms, got, ok, want)
		}
	}
}

// TestLowerBlockingTimeoutsFirstOnly: of a batch sent again, only the
// first blocking command waited (Redis reads nothing more of the
// connection while it is blocked); the rest keep their timeouts.
func TestLowerBlockingTimeoutsFirstOnly(t *testing.T) {
	ss := &session{batch: upstream.NewBatch()}
	sent := [][]string{{"GET", "k"}, {"XREAD", "STREAMS", "s", "0"}, {"BLPOP", "a", "5"}, {"BRPOP", "b", "5"}}
	for _, c := range sent {
		ss.batch.Add(resp.AppendCommandString(nil, c...))
	}
	if took := ss.lowerBlockingTimeouts(command.Builtin(), 1500*time.Microsecond); took != time.Millisecond {
		t.Errorf("took off %v, want 1ms (whole milliseconds)", took)
	}
	want := [][]string{{"GET", "k"}, {"XREAD", "STREAMS", "s", "0"}, {"BLPOP", "a", "4.999"}, {"BRPOP", "b", "5"}} // an XREAD without BLOCK never blocks
	for i, w := range want {
		if got, wr := string(ss.batch.Command(i)), string(resp.AppendCommandString(nil, w...)); got != wr {
			t.Errorf("command %d: %q, want %q", i, got, wr)
		}
	}
	if took := ss.lowerBlockingTimeouts(command.Builtin(), 900*time.Microsecond); took != 0 {
		t.Errorf("under a millisecond: took off %v, want nothing", took)
	}
}

// TestLowerBlockingTimeoutsNotInTransaction: a blocking command queued in
// a transaction never waited (EXEC runs it without blocking): its bytes
// stay as the client sent them; the one after EXEC is lowered.
func TestLowerBlockingTimeoutsNotInTransaction(t *testing.T) {
	ss := &session{batch: upstream.NewBatch()}
	sent := []struct {
		args []string
		kind trackKind
	}{
		{[]string{"MULTI"}, trackMulti}, {[]string{"BLPOP", "a", "5"}, trackNone}, {[]string{"EXEC"}, trackExec},
		{[]string{"BLPOP", "b", "5"}, trackNone},
	}
	for _, c := range sent {
		ss.batch.Add(resp.AppendCommandString(nil, c.args...))
		ss.track = append(ss.track, track{kind: c.kind})
	}
	ss.lowerBlockingTimeouts(command.Builtin(), 2*time.Millisecond)
	want := [][]string{{"MULTI"}, {"BLPOP", "a", "5"}, {"EXEC"}, {"BLPOP", "b", "4.998"}}
	for i, w := range want {
		if got, wr := string(ss.batch.Command(i)), string(resp.AppendCommandString(nil, w...)); got != wr {
			t.Errorf("command %d: %q, want %q", i, got, wr)
		}
	}
}

// TestXreadBlockReadsTheOptions: BLOCK is found among XREAD's and
// XREADGROUP's options as Redis reads them, not in a group's or a
// consumer's name.
func TestXreadBlockReadsTheOptions(t *testing.T) {
	info := command.Builtin().Lookup([]byte("xreadgroup"))
	for _, c := range []struct {
		args     []string
		blocking bool
	}{
		{[]string{"XREADGROUP", "GROUP", "block", "c", "STREAMS", "s", ">"}, false},
		{[]string{"XREADGROUP", "GROUP", "g", "block", "COUNT", "1", "STREAMS", "s", ">"}, false},
		{[]string{"XREADGROUP", "GROUP", "g", "c", "NOACK", "block", "0", "STREAMS", "s", ">"}, true},
		{[]string{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "block", ">"}, false}, // a stream named block
	} {
		args := rawArgs(resp.AppendCommandString(nil, c.args...))
		if got := !isNonBlockingRead(info, args); got != c.blocking {
			t.Errorf("%q blocks: %v, want %v", c.args, got, c.blocking)
		}
	}
}
