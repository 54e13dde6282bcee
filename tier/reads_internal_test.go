package tier

import (
	"strings"
	"testing"

	"github.com/rproxy/rproxy/command"
)

// Every command of tierReads is a readonly single-key command of the
// built-in table (a typo or a table change would silently drop it), and
// the commands whose reply depends on chance, time or other keys are not
// taken, though the table flags them readonly.
func TestTierReadEligibility(t *testing.T) {
	table := command.Builtin()
	args := func(line string) [][]byte {
		var out [][]byte
		for _, w := range strings.Fields(line) {
			out = append(out, []byte(w))
		}
		return out
	}
	for name := range tierReads {
		info := table.Lookup([]byte(name))
		if info == nil {
			t.Errorf("%s: not in the built-in table", name)
			continue
		}
		if !Cacheable(info, args(name+" k a b")) && !Cacheable(info, args(name+" k")) {
			t.Errorf("%s: listed but not eligible (flags %b, keys %d..%d)", name, info.Flags, info.FirstKey, info.LastKey)
		}
	}
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"ZREVRANGE k 0 9 WITHSCORES", true},
		{"HGETALL k", true},
		{"EXISTS k", true},
		{"EXISTS k1 k2", false},
		{"SRANDMEMBER k", false},
		{"SPOP k", false},
		{"HRANDFIELD k", false},
		{"ZRANDMEMBER k", false},
		{"TTL k", false},
		{"PTTL k", false},
		{"EXPIRETIME k", false},
		{"OBJECT FREQ k", false},
		{"SORT_RO k BY w*", false},
		{"RANDOMKEY", false},
		{"MGET k1 k2", false},
		{"GETEX k", false},
		{"DUMP k", false},
		{"HGET", false},
	} {
		a := args(tc.line)
		info := table.LookupArgs(a)
		if info == nil {
			t.Fatalf("%s: unknown", tc.line)
		}
		if got := Cacheable(info, a); got != tc.want {
			t.Errorf("%s: Cacheable %v, want %v", tc.line, got, tc.want)
		}
	}
}
