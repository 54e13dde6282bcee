package command

import (
	"bytes"
	"testing"
)

// FuzzFromReply: a COMMAND reply from the upstream, whatever its bytes,
// gives a table or an error, never a panic; a table it gives answers
// lookups and key extraction for every command it holds.
func FuzzFromReply(f *testing.F) {
	f.Add([]byte("*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n"))
	f.Add([]byte("*1\r\n*10\r\n$6\r\nclient\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*1\r\n*6\r\n$9\r\nclient|id\r\n:2\r\n*0\r\n:0\r\n:0\r\n:0\r\n"))
	f.Add([]byte("*1\r\n*6\r\n$4\r\nmset\r\n:-3\r\n*1\r\n+write\r\n:1\r\n:-1\r\n:2\r\n"))
	f.Add([]byte("*1\r\n*6\r\n$4\r\nodd!\r\n:-1\r\n*1\r\n+movablekeys\r\n:-5\r\n:9\r\n:-3\r\n"))
	args := [][]byte{[]byte("x"), []byte("2"), []byte("a"), []byte("b"), []byte("c")}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tb, err := FromReply(raw)
		if err != nil {
			return
		}
		for _, name := range tb.Names() {
			info := tb.Lookup([]byte(name))
			if info == nil {
				t.Fatalf("%q is in the table's names but not found", name)
			}
			keys, _ := Keys(info, append([][]byte{[]byte(name)}, args[1:]...), nil)
			for _, k := range keys {
				if !containsArg(args[1:], k) {
					t.Fatalf("%s: key %q is not one of the arguments", name, k)
				}
			}
		}
	})
}

// FuzzKeys: the keys of a client's command (movable keys parsed from its
// arguments: numkeys, STORE forms) are always among its arguments, and a
// malformed command (a numkeys too large, negative or not a number) gives
// an incomplete list, never a panic or a key from outside it.
func FuzzKeys(f *testing.F) {
	f.Add("eval", []byte("return 1\x002\x00a\x00b"))
	f.Add("zunionstore", []byte("d\x00-1\x00a"))
	f.Add("sort", []byte("k\x00STORE\x00d\x00BY\x00x"))
	f.Add("lmpop", []byte("99999999999999999999\x00a\x00LEFT"))
	f.Add("georadius", []byte("k\x001\x002\x003\x00m\x00STOREDIST\x00d"))
	f.Add("xread", []byte("COUNT\x001\x00STREAMS\x00a\x00b\x00$\x00$"))
	tb := Builtin()
	f.Fuzz(func(t *testing.T, name string, blob []byte) {
		info := tb.Lookup([]byte(name))
		if info == nil {
			return
		}
		args := append([][]byte{[]byte(name)}, bytes.Split(blob, []byte{0})...)
		keys, _ := Keys(info, args, nil)
		for _, k := range keys {
			if !containsArg(args[1:], k) {
				t.Fatalf("%s %q: key %q is not one of the arguments", name, args[1:], k)
			}
		}
	})
}

func containsArg(args [][]byte, k []byte) bool {
	for _, a := range args {
		if len(a) == len(k) && (len(a) == 0 || &a[0] == &k[0]) {
			return true
		}
	}
	return false
}
