package tier

import (
	"testing"

	"github.com/rproxy/rproxy/command"
)

// Lock acquisitions are SET with NX (an option, not the value) and SETNX.
func TestLockAcquire(t *testing.T) {
	set, setnx, get := &command.Info{Name: "set"}, &command.Info{Name: "setnx"}, &command.Info{Name: "get"}
	args := func(s ...string) [][]byte {
		b := make([][]byte, len(s))
		for i := range s {
			b[i] = []byte(s[i])
		}
		return b
	}
	for _, c := range []struct {
		info *command.Info
		args [][]byte
		want bool
	}{
		{set, args("SET", "lock", "tok", "NX", "PX", "1000"), true},
		{set, args("set", "lock", "tok", "px", "1000", "nx"), true},
		{set, args("SET", "k", "NX"), false}, // the value is "NX"
		{set, args("SET", "k", "v", "XX"), false},
		{set, args("SET", "k", "v"), false},
		{setnx, args("SETNX", "lock", "tok"), true},
		{get, args("GET", "NX"), false},
	} {
		if got := LockAcquire(c.info, c.args); got != c.want {
			t.Errorf("LockAcquire(%q) = %v", c.args, got)
		}
	}
}
