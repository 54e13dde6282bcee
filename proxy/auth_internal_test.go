package proxy

import (
	"testing"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// One failed-AUTH line per second at most, each with the count of the
// failures not logged since the previous line.
func TestAuthLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	type step struct {
		at         time.Duration
		ok         bool
		suppressed int
	}
	for i, st := range []step{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{500 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 3},
		{time.Second + 1, false, 0},
		{5 * time.Second, true, 1},
		{9 * time.Second, true, 0},
	} {
		ok, n := l.allow(t0.Add(st.at))
		if ok != st.ok || n != st.suppressed {
			t.Errorf("step %d at %v: allow = %v, %d; want %v, %d", i, st.at, ok, n, st.ok, st.suppressed)
		}
	}
}

// withoutCredentials leaves no username or password of AUTH or HELLO's
// AUTH option in place, keeps every other argument and the argument count,
// and leaves other commands as sent.
func TestWithoutCredentials(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"AUTH", "pw"}, []string{"AUTH", "-"}},
		{[]string{"auth", "user", "pw"}, []string{"auth", "-", "-"}},
		{[]string{"AUTH"}, []string{"AUTH"}},
		{[]string{"HELLO", "3", "AUTH", "user", "pw", "SETNAME", "n"}, []string{"HELLO", "3", "AUTH", "-", "-", "SETNAME", "n"}},
		{[]string{"HELLO", "3", "SETNAME", "auth", "AUTH", "user", "pw"}, []string{"HELLO", "3", "SETNAME", "auth", "-", "-", "-"}},
		{[]string{"HELLO", "3", "AUTH", "user"}, []string{"HELLO", "3", "AUTH", "-"}},
		{[]string{"HELLO", "3"}, []string{"HELLO", "3"}},
		{[]string{"GET", "auth"}, []string{"GET", "auth"}},
	} {
		raw := resp.AppendCommandString(nil, tc.in...)
		args := make([][]byte, len(tc.in))
		for i, a := range tc.in {
			args[i] = []byte(a)
		}
		got := withoutCredentials(resp.Command{Raw: raw, Args: args})
		if want := resp.AppendCommandString(nil, tc.want...); string(got) != string(want) {
			t.Errorf("withoutCredentials(%q) = %q, want %q", tc.in, got, want)
		}
	}
}
