package proxy

import (
	"testing"
	"time"
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
