package proxy

import (
	"strings"
	"testing"
)

// TestFunctionStatsJoin: FUNCTION STATS of every master answers as the
// master running a script, in RESP2 and RESP3, else as the first; an
// error is passed on.
func TestFunctionStatsJoin(t *testing.T) {
	engines2 := "$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:1\r\n"
	idle2 := "*4\r\n$14\r\nrunning_script\r\n$-1\r\n" + engines2
	busy2 := "*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*3\r\n$5\r\nfcall\r\n$4\r\nspin\r\n$1\r\n0\r\n$11\r\nduration_ms\r\n:5\r\n" + engines2
	engines3 := "$7\r\nengines\r\n%1\r\n$3\r\nLUA\r\n%2\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:1\r\n"
	idle3 := "%2\r\n$14\r\nrunning_script\r\n_\r\n" + engines3
	busy3 := "%2\r\n$14\r\nrunning_script\r\n%3\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*3\r\n$5\r\nfcall\r\n$4\r\nspin\r\n$1\r\n0\r\n$11\r\nduration_ms\r\n:5\r\n" + engines3
	m := merge{kind: mergeFunctionStats, parts: 3}
	for _, tc := range []struct {
		replies []string
		want    string
	}{
		{[]string{idle2, busy2, idle2}, busy2},
		{[]string{idle2, idle2, idle2}, idle2},
		{[]string{idle3, idle3, busy3}, busy3},
		{[]string{idle3, idle3, idle3}, idle3},
		{[]string{idle2, "-ERR busy\r\n", busy2}, "-ERR busy\r\n"},
	} {
		replies := make([][]byte, len(tc.replies))
		for i, r := range tc.replies {
			replies[i] = []byte(r)
		}
		if got := string(m.reply(replies)); got != tc.want {
			t.Errorf("FUNCTION STATS of %q:\n got %q\nwant %q", tc.replies, got, tc.want)
		}
	}
	if got := string(m.reply([][]byte{[]byte("+OK\r\n"), []byte(idle2), []byte(idle2)})); len(got) == 0 || got[0] != '-' {
		t.Errorf("a reply that is no FUNCTION STATS: %q, want rproxy's error", got)
	}
}

// FuzzFunctionStatsJoin: whatever the masters answer, the join is one of
// their replies or rproxy's error, never a panic.
func FuzzFunctionStatsJoin(f *testing.F) {
	f.Add("*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*0\r\n", "%2\r\n$14\r\nrunning_script\r\n%0\r\n$7\r\nengines\r\n%0\r\n")
	f.Add("%1\r\n$14\r\nrunning_script\r\n", "-ERR x\r\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		m := merge{kind: mergeFunctionStats, parts: 2}
		got := string(m.reply([][]byte{[]byte(a), []byte(b)}))
		if got != a && got != b && !strings.HasPrefix(got, "-ERR rproxy: unexpected reply") {
			t.Fatalf("join of %q and %q = %q", a, b, got)
		}
	})
}
