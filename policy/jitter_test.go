package policy

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func words(line string) [][]byte {
	var out [][]byte
	for _, w := range strings.Fields(line) {
		out = append(out, []byte(w))
	}
	return out
}

func joined(args [][]byte) string { return string(bytes.Join(args, []byte(" "))) }

func jitterPolicy(t testing.TB, j JitterConfig) *Policy {
	t.Helper()
	p, _ := mustNew(t, Config{Jitter: j, NoDefaults: true})
	return p
}

// TestJitterSpread: 1000 keys set with EX 100 get TTLs in [90, 100],
// spread over the whole range: never above what was asked.
func TestJitterSpread(t *testing.T) {
	p := jitterPolicy(t, JitterConfig{})
	counts := map[uint64]int{}
	for i := range 1000 {
		out, applied := p.Jitter("set", words(fmt.Sprintf("SET k_%d v EX 100", i)))
		ttl, err := strconv.ParseUint(string(out[4]), 10, 64)
		if err != nil || ttl < 90 || ttl > 100 {
			t.Fatalf("k_%d: ttl %q", i, out[4])
		}
		if applied != (ttl != 100) {
			t.Fatalf("k_%d: applied %v with ttl %d", i, applied, ttl)
		}
		counts[ttl]++
	}
	// 11 values, ~91 each if uniform; a fair hash stays well inside these.
	for v := uint64(90); v <= 100; v++ {
		if counts[v] < 50 || counts[v] > 140 {
			t.Fatalf("ttl %d chosen %d times of 1000: not spread: %v", v, counts[v], counts)
		}
	}
}

func TestJitterDeterministic(t *testing.T) {
	p := jitterPolicy(t, JitterConfig{Seed: 42})
	a, _ := p.Jitter("set", words("SET user:7 v EX 3600"))
	b, _ := p.Jitter("set", words("set user:7 other-value ex 3600 get"))
	c, _ := p.Jitter("setex", words("SETEX user:7 3600 v"))
	if string(a[4]) != string(b[4]) || string(a[4]) != string(c[2]) {
		t.Fatalf("same key and ttl, different expiry: %s %s %s", a[4], b[4], c[2])
	}
	// Another proxy with the same seed agrees; another seed spreads differently.
	same, _ := jitterPolicy(t, JitterConfig{Seed: 42}).Jitter("set", words("SET user:7 v EX 3600"))
	if string(same[4]) != string(a[4]) {
		t.Fatal("two policies with the same seed disagree")
	}
	differ := 0
	other := jitterPolicy(t, JitterConfig{Seed: 43})
	for i := range 20 {
		x, _ := p.Jitter("set", words(fmt.Sprintf("SET k%d v EX 3600", i)))
		y, _ := other.Jitter("set", words(fmt.Sprintf("SET k%d v EX 3600", i)))
		if string(x[4]) != string(y[4]) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the seed does not change anything")
	}
}

func TestJitterCommands(t *testing.T) {
	p := jitterPolicy(t, JitterConfig{Exclude: []string{"cache:pinned:*"}})
	for _, tc := range []struct {
		line string
		at   int // index of the TTL that must be lowered; -1: untouched
	}{
		{"SET k v EX 1000", 4},
		{"set k v ex 1000", 4},
		{"SET k v PX 100000", 4},
		{"SET k v GET EX 1000", 5},
		{"SET k v EX 1000 GET", 4},
		{"SET k v Px 100000 get", 4},
		{"SET k v NX EX 1000", -1},
		{"SET k v EX 1000 NX", -1},
		{"SET k v XX PX 100000", -1},
		{"SET k v KEEPTTL", -1},
		{"SET k v EXAT 2000000000", -1},
		{"SET k v PXAT 2000000000000", -1},
		{"SET k v", -1},
		{"SET k v EX", -1},
		{"SET k v EX 1000 PX 1000", -1},
		{"SET k v EX 1000 EX 1000", -1},
		{"SET k v EX 1000 IFEQ x", -1}, // an option this does not know
		{"SET k v EX 0", -1},
		{"SET k v EX -1000", -1},
		{"SET k v EX 01000", -1},
		{"SET k v EX +1000", -1},
		{"SET k v EX 1000.5", -1},
		{"SET k v EX 1099511627777", -1}, // 2^40 + 1
		{"SET k v EX 99999999999999999999999", -1},
		{"SETEX k 1000 v", 2},
		{"PSETEX k 100000 v", 2},
		{"SETEX k 1000", -1},
		{"SETEX k abc v", -1},
		{"SETEX cache:1 1000 v", 2},
		{"SETEX cache:pinned:1 1000 v", -1},
		// Refreshes mean exactly what they say (sliding sessions, windows).
		{"GETEX k EX 1000", -1},
		{"GETEX k px 100000", -1},
		{"GETEX k EXAT 2000000000", -1},
		{"GETEX k PERSIST", -1},
		{"GETEX k", -1},
		{"EXPIRE cache:1 1000", -1},
		{"PEXPIRE cache:1 100000 GT", -1},
		{"EXPIREAT cache:1 2000000000", -1},
		{"PEXPIREAT cache:1 2000000000000", -1},
		{"SET cache:pinned:1 v EX 1000", -1},
		{"GET k", -1},
		{"SET", -1},
		{"SET k", -1},
	} {
		args := words(tc.line)
		orig := joined(args)
		out, applied := p.Jitter(strings.ToLower(string(args[0])), args)
		if joined(args) != orig {
			t.Fatalf("%s: the caller's args were modified: %s", tc.line, joined(args))
		}
		if tc.at < 0 {
			if applied || joined(out) != orig {
				t.Errorf("%s: changed to %s", tc.line, joined(out))
			}
			continue
		}
		// k and cache:1 with these TTLs happen to get a non-zero spread;
		// a zero one would make this test fail only if the hash changed.
		if !applied || len(out) != len(args) {
			t.Errorf("%s: not jittered (%s)", tc.line, joined(out))
			continue
		}
		old, _ := strconv.ParseUint(string(args[tc.at]), 10, 64)
		got, err := strconv.ParseUint(string(out[tc.at]), 10, 64)
		if err != nil || got >= old || got < old-old/10 {
			t.Errorf("%s: ttl %s", tc.line, out[tc.at])
		}
		for i := range args {
			if i != tc.at && &out[i][0] != &args[i][0] {
				t.Errorf("%s: arg %d copied instead of reused", tc.line, i)
			}
		}
	}
}

func TestJitterDisabledAndFraction(t *testing.T) {
	if out, applied := jitterPolicy(t, JitterConfig{Disabled: true}).Jitter("set", words("SET k v EX 1000")); applied || string(out[4]) != "1000" {
		t.Fatalf("disabled jitter changed %s", joined(out))
	}
	p := jitterPolicy(t, JitterConfig{MaxFraction: 0.5})
	minSeen := uint64(1000)
	for i := range 500 {
		out, _ := p.Jitter("setex", words(fmt.Sprintf("SETEX k%d 1000 v", i)))
		n, _ := strconv.ParseUint(string(out[2]), 10, 64)
		if n < 500 || n > 1000 {
			t.Fatalf("ttl %d outside [500, 1000]", n)
		}
		minSeen = min(minSeen, n)
	}
	if minSeen > 600 {
		t.Fatalf("with max fraction 0.5 the smallest ttl was %d", minSeen)
	}
	// max_fraction 1 never makes a TTL 0 (Redis would refuse the SET).
	one := jitterPolicy(t, JitterConfig{MaxFraction: 1})
	for i := range 200 {
		out, _ := one.Jitter("psetex", words(fmt.Sprintf("PSETEX k%d 2 v", i)))
		if n, _ := strconv.ParseUint(string(out[2]), 10, 64); n < 1 || n > 2 {
			t.Fatalf("PSETEX 2 at max fraction 1 became %s", out[2])
		}
	}
	// Small TTLs have no room for a whole unit: left alone.
	if out, applied := jitterPolicy(t, JitterConfig{}).Jitter("set", words("SET k v EX 9")); applied || string(out[4]) != "9" {
		t.Fatalf("EX 9 became %s", joined(out))
	}
}

func TestDefaultTTL(t *testing.T) {
	p := jitterPolicy(t, JitterConfig{DefaultTTL: time.Hour, DefaultTTLKeys: []string{"cache:*"}, Exclude: []string{"cache:exact:*"}})
	check := func(line, want string) {
		t.Helper()
		args := words(line)
		out, applied := p.Jitter("set", args)
		if got := joined(out); !strings.HasPrefix(got, want) || applied != (got != line) {
			t.Errorf("%s: got %s (applied %v), want prefix %s", line, got, applied, want)
		}
	}
	check("SET cache:1 v", "SET cache:1 v EX 3")
	check("SET cache:1 v GET", "SET cache:1 v GET EX 3")
	check("SET cache:exact:1 v", "SET cache:exact:1 v EX 3600") // excluded: no jitter, still the default
	check("SET cache:1 v NX", "SET cache:1 v NX EX 3600")       // conditional: exact default
	check("SET cache:1 v KEEPTTL", "SET cache:1 v KEEPTTL")
	check("SET cache:1 v EXAT 2000000000", "SET cache:1 v EXAT 2000000000")
	check("SET other v", "SET other v")

	out, _ := p.Jitter("set", words("SET cache:1 v"))
	n, _ := strconv.ParseUint(string(out[4]), 10, 64)
	if len(out) != 5 || n < 3240 || n > 3600 {
		t.Fatalf("default ttl %s", joined(out))
	}

	ms := jitterPolicy(t, JitterConfig{Disabled: true, DefaultTTL: 1500 * time.Millisecond, DefaultTTLKeys: []string{"*"}})
	if out, _ := ms.Jitter("set", words("SET k v")); joined(out) != "SET k v PX 1500" {
		t.Fatalf("sub-second default: %s", joined(out))
	}
}

func TestJitterMetric(t *testing.T) {
	p, reg := mustNew(t, Config{Jitter: JitterConfig{DefaultTTL: time.Hour, DefaultTTLKeys: []string{"c:*"}}})
	applied := 0
	for i := range 100 {
		if _, ok := p.Jitter("setex", words(fmt.Sprintf("SETEX k%d 1000 v", i))); ok {
			applied++
		}
	}
	p.Jitter("set", words("SET c:1 v"))
	if got := counter(t, reg, "rproxy_policy_jitter_applied_total"); got < float64(applied) || got > float64(applied+1) {
		t.Fatalf("jitter_applied_total %v, %d setex applied", got, applied)
	}
	if got := counter(t, reg, "rproxy_policy_default_ttl_applied_total"); got != 1 {
		t.Fatalf("default_ttl_applied_total %v", got)
	}
}

func BenchmarkJitterSet(b *testing.B) {
	p := jitterPolicy(b, JitterConfig{Exclude: []string{"lock:*"}})
	args := words("SET user:12345:profile some-value EX 3600")
	b.ReportAllocs()
	for b.Loop() {
		p.Jitter("set", args)
	}
}

func BenchmarkJitterOtherCommand(b *testing.B) {
	p := jitterPolicy(b, JitterConfig{})
	args := words("GET user:12345:profile")
	b.ReportAllocs()
	for b.Loop() {
		p.Jitter("get", args)
	}
}
