package proxy

import (
	"testing"

	"github.com/rproxy/rproxy/command"
)

// TestMayAffectReads: the commands after which reads answered later must
// be answered first (answerReadsBeforeWrite), and reads that need not.
func TestMayAffectReads(t *testing.T) {
	table := command.Builtin()
	for name, want := range map[string]bool{
		"set": true, "del": true, "incr": true, "lpush": true, "eval": true, "fcall": true,
		"exec": true, "multi": true, "flushall": true, "publish": true, "spublish": true,
		"get": false, "mget": false, "ping": false, "echo": false, "ttl": false, "hgetall": false,
	} {
		info := table.Lookup([]byte(name))
		if info == nil {
			t.Fatalf("%s: not in the built-in table", name)
		}
		if got := mayAffectReads(info); got != want {
			t.Errorf("mayAffectReads(%s) = %v, want %v", name, got, want)
		}
	}
	if !mayAffectReads(nil) {
		t.Error("an unknown command (a module's) was taken as read-only")
	}
}
