package policy

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzJitter: Jitter never panics, never modifies the caller's arguments,
// never raises a TTL or lowers it past MaxFraction (nor to 0), touches only
// SET, SETEX and PSETEX, is deterministic, and what it writes is a number
// Redis parses.
func FuzzJitter(f *testing.F) {
	for _, s := range []string{
		"SET k v EX 100", "set k v px 100000 get", "SET k v NX EX 100", "SET k v KEEPTTL",
		"SET d1 v", "SET d1 v NX", "SETEX k 100 v", "PSETEX k 100000 v", "GETEX k EX 100",
		"EXPIRE k 100 GT", "PEXPIRE k 100000", "SET k v EX 1099511627776", "SET k v EX 0",
		"SET x1 v EX 100", "SET k v EX 100 EX 100", "SET k v EX", "SETEX", "", " ", "SET  v EX 100",
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
	}
	type fixture struct {
		p    *Policy
		frac uint64 // in millionths
	}
	var fx []fixture
	for _, c := range []JitterConfig{
		{Exclude: []string{"x*"}, DefaultTTL: time.Hour, DefaultTTLKeys: []string{"d*"}},
		{MaxFraction: 1, Seed: 7, DefaultTTL: 1500 * time.Millisecond, DefaultTTLKeys: []string{"*"}},
	} {
		p, _ := mustNew(f, Config{Jitter: c, NoDefaults: true})
		fx = append(fx, fixture{p, p.jitter.ppm})
	}
	f.Fuzz(func(t *testing.T, line string, which uint8) {
		x := fx[int(which)%len(fx)]
		var args [][]byte
		for _, w := range strings.Split(line, " ") {
			args = append(args, []byte(w))
		}
		name := strings.ToLower(string(args[0]))
		before := bytes.Join(args, []byte{0})

		out, applied := x.p.Jitter(name, args)
		if !bytes.Equal(before, bytes.Join(args, []byte{0})) {
			t.Fatal("the caller's args were modified")
		}
		again, _ := x.p.Jitter(name, args)
		if !bytes.Equal(bytes.Join(out, []byte{0}), bytes.Join(again, []byte{0})) {
			t.Fatalf("not deterministic: %q then %q", out, again)
		}
		if applied && name != "set" && name != "setex" && name != "psetex" {
			t.Fatalf("%s is not a cache write but was changed: %q", name, out)
		}
		if !applied {
			if len(out) != len(args) || (len(out) > 0 && &out[0] != &args[0]) {
				t.Fatalf("not applied but a different slice: %q", out)
			}
			return
		}
		ttlOK := func(old uint64, s []byte) {
			t.Helper()
			n, err := strconv.ParseUint(string(s), 10, 64)
			if err != nil || strconv.FormatUint(n, 10) != string(s) {
				t.Fatalf("wrote %q: not a number Redis parses", s)
			}
			if n > old || n < 1 || n < old-old*x.frac/ppm {
				t.Fatalf("ttl %d became %d", old, n)
			}
		}
		switch len(out) {
		case len(args): // one TTL lowered in place
			changed := 0
			for i := range args {
				if same(out[i], args[i]) {
					continue
				}
				changed++
				old, ok := parseTTL(args[i])
				if !ok {
					t.Fatalf("arg %d %q replaced but was not a TTL", i, args[i])
				}
				ttlOK(old, out[i])
				if string(out[i]) == string(args[i]) {
					t.Fatalf("applied but ttl unchanged: %q", out)
				}
			}
			if changed != 1 {
				t.Fatalf("%d args changed: %q", changed, out)
			}
		case len(args) + 2: // the default TTL added to a SET
			if name != "set" {
				t.Fatalf("%s got a default ttl", name)
			}
			for i := range args {
				if !same(out[i], args[i]) {
					t.Fatalf("arg %d copied", i)
				}
			}
			opt, ttl := string(out[len(args)]), out[len(args)+1]
			switch opt {
			case "EX":
				ttlOK(3600, ttl)
			case "PX":
				ttlOK(1500, ttl)
			default:
				t.Fatalf("default ttl option %q", opt)
			}
		default:
			t.Fatalf("%d args became %d: %q", len(args), len(out), out)
		}
	})
}

// same reports whether a and b are the same bytes in memory (an empty
// argument has nothing to compare: its contents are then what count).
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
