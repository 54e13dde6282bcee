package proxy

import "testing"

// TestSlowLogRing: the newest max entries, newest first, ids going on
// across a reset, as Redis's SLOWLOG does.
func TestSlowLogRing(t *testing.T) {
	l := &slowLog{max: 3}
	ids := func(n int) []int64 {
		var out []int64
		for _, e := range l.get(n) {
			out = append(out, e.id)
		}
		return out
	}
	for range 2 {
		l.add(slowEntry{})
	}
	if got := ids(-1); len(got) != 2 || got[0] != 1 || got[1] != 0 {
		t.Fatalf("before wrapping: %v", got)
	}
	for range 3 {
		l.add(slowEntry{})
	}
	if got := ids(-1); len(got) != 3 || got[0] != 4 || got[1] != 3 || got[2] != 2 || l.len() != 3 {
		t.Fatalf("after wrapping: %v (len %d)", got, l.len())
	}
	if got := ids(1); len(got) != 1 || got[0] != 4 {
		t.Fatalf("get 1: %v", got)
	}
	l.reset()
	if l.len() != 0 || len(ids(-1)) != 0 {
		t.Fatal("entries left after reset")
	}
	l.add(slowEntry{})
	if got := ids(-1); len(got) != 1 || got[0] != 5 {
		t.Fatalf("after reset: %v", got)
	}
}
