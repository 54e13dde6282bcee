package command

import (
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// Keys agrees with Redis's own COMMAND GETKEYS for fixed-position and
// movable-key commands, including the write forms invalidation relies on.
func TestKeysMatchGetKeys(t *testing.T) {
	rs := redistest.Start(t)
	tb := Builtin()
	cases := []string{
		"get k", "set k v EX 10", "mset a 1 b 2 c 3", "mget a b c", "del a b", "rename a b",
		"lmove a b left right", "smove a b m", "hset h f v", "expire k 10", "copy a b",
		"eval x 2 k1 k2 a1", "evalsha x 0", "fcall f 1 k a", "eval_ro x 1 k",
		"zunionstore d 2 a b weights 1 2", "zinterstore d 1 a", "zdiffstore d 2 a b",
		"sort k store d", "sort k limit 0 1 store d by w", "sort_ro k", "georadius g 0 0 1 km store d",
		"georadiusbymember g m 1 km storedist d", "lmpop 2 a b left", "zmpop 1 z min",
		"blmpop 0 2 a b left", "bzmpop 0 1 z max", "sintercard 2 a b", "zunion 2 a b",
		"bitop and d a b", "sinterstore d a b", "pfmerge d a b", "object encoding k", "xadd s * f v",
		// MIGRATE ("" is the empty argument): the key, or those after KEYS.
		"migrate h 1 k 0 1", `migrate h 1 "" 0 1 KEYS a b`, `migrate h 1 "" 0 1 COPY REPLACE keys a`,
		`migrate h 1 "" 0 1 AUTH keys KEYS a b`, `migrate h 1 "" 0 1 AUTH2 u keys KEYS a keys b`,
		`migrate h 1 "" 0 1`, `migrate h 1 "" 0 1 KEYS`,
	}
	for _, c := range cases {
		args := strings.Fields(c)
		for i, a := range args {
			if a == `""` {
				args[i] = ""
			}
		}
		info := tb.Lookup([]byte(args[0]))
		if info == nil {
			t.Fatalf("%s: not in the table", args[0])
		}
		bargs := make([][]byte, len(args))
		for i, a := range args {
			bargs[i] = []byte(a)
		}
		if info.Subcommands != nil {
			info = tb.LookupArgs(bargs)
		}
		got, ok := Keys(info, bargs, nil)
		if !ok {
			t.Errorf("%s: Keys not ok", c)
			continue
		}
		raw := rs.Do(t, append([]string{"COMMAND", "GETKEYS"}, args...)...)
		v, err := resp.Parse(raw)
		if err != nil || v.Kind != '*' {
			t.Fatalf("%s: GETKEYS %q", c, raw)
		}
		var want []string
		for _, e := range v.Elems {
			want = append(want, string(e.Str))
		}
		var have []string
		for _, k := range got {
			have = append(have, string(k))
		}
		if strings.Join(have, " ") != strings.Join(want, " ") {
			t.Errorf("%s: Keys = %q, Redis says %q", c, have, want)
		}
	}
}

func TestKeysIncomplete(t *testing.T) {
	tb := Builtin()
	for _, c := range []string{"eval x", "eval x 3 a", "eval x -1", "eval x +1 k", "eval x 01 k", "fcall f +1 k", "zunionstore d", "migrate h p k 0", "migrate h p k 0 0 KEYS a", "get"} {
		args := strings.Fields(c)
		bargs := make([][]byte, len(args))
		for i, a := range args {
			bargs[i] = []byte(a)
		}
		if _, ok := Keys(tb.Lookup(bargs[0]), bargs, nil); ok {
			t.Errorf("%s: Keys reports a complete list", c)
		}
	}
}
