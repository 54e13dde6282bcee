package policy

import (
	"strings"
	"testing"
)

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pat, s string
		want   bool
	}{
		{"*", "anything", true},
		{"*", "", true}, // see glob.match: differs from Redis's raw loop on purpose
		{"**", "", true},
		{"", "", true},
		{"", "a", false},
		{"a*", "", false},
		{"user:*", "user:1", true},
		{"user:*", "user:", true},
		{"user:*", "users:1", false},
		{"*:session", "u:1:session", true},
		{"*:session", "u:1:sessions", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false},
		{"h?llo", "hello", true},
		{"h?llo", "hllo", false},
		{"h[ae]llo", "hallo", true},
		{"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true},
		{"h[b-a]llo", "hbllo", true}, // Redis swaps a reversed range
		{"h[a-b]llo", "hcllo", false},
		{`h\*llo`, "h*llo", true},
		{`h\*llo`, "hello", false},
		{`h[\]]llo`, "h]llo", true},
		{`a\`, `a\`, true},  // a trailing backslash is literal
		{"[abc", "a", true}, // unterminated set runs to the end
		{"[abc", "ab", false},
		{"Key", "key", false}, // case-sensitive, like KEYS
		{"*a*a*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 200), false},
	} {
		if got := glob(tc.pat).match([]byte(tc.s)); got != tc.want {
			t.Errorf("glob %q match %q = %v, want %v", tc.pat, tc.s, got, tc.want)
		}
	}
}

// refMatch is an independent matcher: the pattern is parsed into tokens the
// way Redis reads it, then matched by dynamic programming.
func refMatch(pat, s []byte) bool {
	type tok struct {
		kind byte // 'c' one byte from set, '*' any run
		set  [256]bool
	}
	var toks []tok
	for i := 0; i < len(pat); {
		var t tok
		switch pat[i] {
		case '*':
			t.kind = '*'
			i++
		case '?':
			t.kind = 'c'
			for c := range t.set {
				t.set[c] = true
			}
			i++
		case '[':
			t.kind = 'c'
			i++
			not := i < len(pat) && pat[i] == '^'
			if not {
				i++
			}
			for i < len(pat) && pat[i] != ']' {
				switch {
				case pat[i] == '\\' && len(pat)-i >= 2:
					i++
					t.set[pat[i]] = true
				case len(pat)-i >= 3 && pat[i+1] == '-':
					lo, hi := pat[i], pat[i+2]
					if lo > hi {
						lo, hi = hi, lo
					}
					for c := int(lo); c <= int(hi); c++ {
						t.set[c] = true
					}
					i += 2
				default:
					t.set[pat[i]] = true
				}
				i++
			}
			i++ // the ']' (or past the end)
			if not {
				for c := range t.set {
					t.set[c] = !t.set[c]
				}
			}
		default:
			if pat[i] == '\\' && len(pat)-i >= 2 {
				i++
			}
			t.kind = 'c'
			t.set[pat[i]] = true
			i++
		}
		toks = append(toks, t)
	}
	// m[j]: toks[i:] matches s[j:], computed from the last token back.
	m := make([]bool, len(s)+1)
	m[len(s)] = true
	for i := len(toks) - 1; i >= 0; i-- {
		next := make([]bool, len(s)+1)
		for j := len(s); j >= 0; j-- {
			if toks[i].kind == '*' {
				next[j] = m[j] || (j < len(s) && next[j+1])
			} else {
				next[j] = j < len(s) && toks[i].set[s[j]] && m[j+1]
			}
		}
		m = next
	}
	return m[0]
}

func FuzzGlob(f *testing.F) {
	for _, seed := range [][2]string{
		{"*", ""}, {"a*b?c", "axxbyc"}, {"[a-z]*", "q1"}, {"[^", "x"}, {`\`, `\`},
		{"[\\", "\\"}, {"*[", "ab"}, {"[a-]", "]"}, {"**a**", "bab"}, {"h[^e]llo", "hallo"},
	} {
		f.Add(seed[0], []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, pat string, s []byte) {
		if len(pat) > 64 || len(s) > 256 {
			return
		}
		got := glob(pat).match(s)
		if want := refMatch([]byte(pat), s); got != want {
			t.Fatalf("glob %q match %q = %v, reference says %v", pat, s, got, want)
		}
		if !glob("*").match(s) {
			t.Fatalf("* does not match %q", s)
		}
	})
}

func BenchmarkGlobPrefix(b *testing.B) {
	g, k := glob("session:*"), []byte("user:123456:profile")
	for b.Loop() {
		g.match(k)
	}
}
