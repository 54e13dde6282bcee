package proxy_test

import (
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// Commands rproxy answers or acts on itself get Redis's answer when Redis
// would refuse their arguments (and accept what Redis accepts): a wrong argument count (checked first, as
// Redis does, so RESET x did reset the session and CLIENT KILL got the
// policy's refusal) and integers Redis reads strictly ("+5" and "05" are
// not integers to Redis: HELLO 03 switched protocols, CLIENT KILL ID 05
// answered 0). Bytes compared with Redis's own, outside and inside MULTI
// and in stream mode.
func TestArgumentsRefusedAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	refused := [][]string{
		{"RESET", "x"}, {"HELLO", "03"}, {"HELLO", "+3"}, {"CLIENT", "KILL", "ID", "+5"},
		{"CLIENT", "KILL", "ID", "05"}, {"CLIENT", "UNBLOCK", "+1"}, {"CLIENT", "UNBLOCK", "k", "v"}, {"CLIENT", "LIST", "ID", "+1"},
		{"CLIENT", "TRACKING", "ON", "REDIRECT", "+99"}, {"CLIENT", "KILL"}, {"CLIENT", "SETNAME"},
		{"SELECT", "+1"}, {"PING", "a", "b"}, {"EXEC", "x"}, {"GET"}, {"MULTI", "x"}, {"KEYS"},
		{"CLIENT", "LIST", "ID", "0"}, {"CLIENT", "LIST", "ID", "-1"}, // integers to Redis: no one listed
	}
	directAndThrough(t, rs, p, nil, nil, append(refused, []string{"CLIENT", "GETNAME"}, []string{"SET", "k", "v"}))
	directAndThrough(t, rs, p, func() { rs.Do(t, "DEL", "k") }, nil, [][]string{
		{"MULTI"}, {"SET", "k", "1"}, {"RESET", "x"}, {"CLIENT", "KILL"}, {"EXEC"}, {"GET", "k"},
	})
	directAndThrough(t, rs, p, nil, [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}},
		[][]string{{"RESET", "x"}, {"CLIENT", "KILL", "ID", "+5"}, {"HELLO", "03"}, {"CLIENT", "KILL"}, {"PING"}})
	directAndThrough(t, rs, p, func() { rs.Do(t, "DEL", "k") }, [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}}, [][]string{
		{"MULTI"}, {"SET", "k", "1"}, {"RESET", "x"}, {"CLIENT", "KILL"}, {"EXEC"}, {"GET", "k"},
	})
	directAndThrough(t, rs, p, nil, [][]string{{"SUBSCRIBE", "ch"}},
		[][]string{{"RESET", "x"}, {"CLIENT", "KILL"}, {"PING"}})
}

// A CLIENT TRACKING that Redis refuses changes nothing rproxy follows of
// the session's tracking: CLIENT GETREDIR (answered by rproxy in stream
// mode) says what Redis would, and tracking Redis kept on is still on
// (rproxy took a refused OFF for an OFF). Bytes compared with Redis's own.
func TestTrackingRefusedChangesNothing(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	getredir := []string{"CLIENT", "GETREDIR"}
	directAndThrough(t, rs, p, nil, nil, [][]string{
		{"CLIENT", "TRACKING", "on", "BCAST", "OPTIN"}, getredir,
		{"CLIENT", "TRACKING", "on", "REDIRECT"}, getredir,
		{"CLIENT", "TRACKING", "on", "PREFIX", "a"}, getredir,
		{"CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"}, getredir,
		{"CLIENT", "TRACKING", "maybe"}, getredir,
	})
	directAndThrough(t, rs, p, nil, [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "on", "OPTIN"}}, [][]string{
		{"CLIENT", "TRACKING", "off", "x"}, getredir,
		{"CLIENT", "TRACKING", "on", "BCAST"}, getredir,
		{"CLIENT", "TRACKING", "on", "OPTOUT"}, getredir,
		{"CLIENT", "TRACKING", "on", "REDIRECT", "99998", "REDIRECT", "99999"}, getredir,
		{"CLIENT", "TRACKING", "on", "NOLOOP"}, getredir,
		{"CLIENT", "TRACKING", "off"}, getredir,
	})
}

// A CLIENT TRACKING in BCAST mode whose prefixes overlap those Redis holds
// for the session (or, for the first, one given after it) is refused by
// Redis and changes nothing rproxy follows: GETREDIR and TRACKINGINFO's
// redirect (answered and rewritten by rproxy) said 0 after such a refusal,
// Redis the target's id. Prefixes accumulate across commands, so the
// overlap may be with any earlier one, or with BCAST's "" when none was
// given. Bytes compared with Redis's own, the target's id written <id>.
func TestTrackingPrefixOverlapRefusedAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	run := func(addr string, script func(id string) [][]string) string {
		target := dialClient(t, addr)
		id := strings.TrimSpace(strings.TrimPrefix(target.do("CLIENT", "ID"), ":"))
		target.do("SUBSCRIBE", "__redis__:invalidate")
		c := dialClient(t, addr)
		return strings.ReplaceAll(c.pipeline(script(id)...), ":"+id+"\r\n", ":<id>\r\n")
	}
	getredir, info := []string{"CLIENT", "GETREDIR"}, []string{"CLIENT", "TRACKINGINFO"}
	for _, script := range []func(id string) [][]string{
		func(id string) [][]string {
			return [][]string{
				{"CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", "a"}, getredir,
				{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab"}, getredir, info,
				{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "c", "PREFIX", ""}, getredir,
				{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b", "PREFIX", "bx"}, getredir,
				{"CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", "c"}, getredir, info,
				{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "d", "PREFIX", "c"}, getredir, info,
				{"CLIENT", "TRACKING", "off"}, getredir,
				{"CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", "ab"}, getredir, info,
			}
		},
		func(id string) [][]string {
			return [][]string{
				{"CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST"}, getredir,
				{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "x"}, getredir, info,
				{"CLIENT", "TRACKING", "on", "BCAST"}, getredir,
			}
		},
	} {
		direct, through := run(rs.Addr, script), run(p.Addr, script)
		if direct != through {
			t.Fatalf("replies differ\n  direct: %q\n  rproxy: %q", direct, through)
		}
		if !strings.Contains(direct, "overlaps with an existing prefix") {
			t.Fatalf("no overlap refused: %q", direct)
		}
	}
}

// Redis 7.0 answers a CLIENT TRACKING on BCAST whose prefixes after the
// first overlap one another with its error and then +OK, two replies to
// one command (redis/redis#15073), and tracks them. rproxy answers the
// error alone, as later Redis does, and tracking stays as it was: the
// client's replies stay in step, pipelined, before and in stream mode.
func TestTrackingPrefixOverlapAnsweredOnce(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	overlapErr := "-ERR Prefix 'pb' overlaps with another provided prefix 'pbx'. Prefixes for a single client must not overlap.\r\n"
	trackingOff := "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
	trackingA := "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*1\r\n$1\r\na\r\n"
	for _, tc := range []struct {
		setup [][]string
		info  string
	}{
		{nil, trackingOff},
		{[][]string{{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a"}}, trackingA},
	} {
		c := dialClient(t, p.Addr)
		for _, cmd := range tc.setup {
			c.do(cmd...)
		}
		got := c.pipeline([]string{"PING"}, []string{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "zz", "PREFIX", "pb", "PREFIX", "pbx"},
			[]string{"PING", "after"}, []string{"CLIENT", "TRACKINGINFO"})
		if want := "+PONG\r\n" + overlapErr + "$5\r\nafter\r\n" + tc.info; got != want {
			t.Fatalf("after %q:\n got  %q\n want %q", tc.setup, got, want)
		}
	}
}
