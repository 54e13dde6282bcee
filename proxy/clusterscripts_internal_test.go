package proxy

import (
	"testing"
	"time"
)

// TestLoadedScriptsForget: a script is loaded everywhere once, and again
// after a new slot map, SCRIPT FLUSH, or loadedScriptsFor (a master's cache
// can empty without the map changing: a restart, a flush elsewhere).
func TestLoadedScriptsForget(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLoadedScripts(func() time.Time { return now })
	body := []byte("return 1")
	step := func(what string, version uint64, want bool) {
		t.Helper()
		if got := l.first(body, version); got != want {
			t.Errorf("%s: first = %v, want %v", what, got, want)
		}
	}
	step("first EVAL", 1, true)
	step("second EVAL", 1, false)
	step("new slot map", 2, true)
	step("after it", 2, false)
	l.forget()
	step("after SCRIPT FLUSH", 2, true)
	now = now.Add(loadedScriptsFor - time.Second)
	step("within loadedScriptsFor", 2, false)
	now = now.Add(time.Second)
	step("loadedScriptsFor later", 2, true)
	step("after it", 2, false)
	if !l.first([]byte("return 2"), 2) {
		t.Error("another script: first = false")
	}
}
