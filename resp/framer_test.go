package resp

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// validReplies holds one complete reply of every type and shape, with the
// Kind the framer must report for it.
var validReplies = []struct {
	name string
	raw  string
	kind byte
}{
	{"simple string", "+OK\r\n", '+'},
	{"empty simple string", "+\r\n", '+'},
	{"error", "-ERR unknown command 'FOO', with args beginning with: \r\n", '-'},
	{"integer", ":1000\r\n", ':'},
	{"negative integer", ":-42\r\n", ':'},
	{"plus integer", ":+7\r\n", ':'},
	{"max integer", ":9223372036854775807\r\n", ':'},
	{"min integer", ":-9223372036854775808\r\n", ':'},
	{"bulk", "$5\r\nhello\r\n", '$'},
	{"bulk with CRLF inside", "$4\r\n\r\n\r\n\r\n", '$'},
	{"empty bulk", "$0\r\n\r\n", '$'},
	{"null bulk", "$-1\r\n", '$'},
	{"array", "*2\r\n$3\r\nfoo\r\n$3\r\nbar\r\n", '*'},
	{"empty array", "*0\r\n", '*'},
	{"null array", "*-1\r\n", '*'},
	{"mixed array", "*5\r\n:1\r\n:2\r\n:3\r\n:4\r\n$6\r\nfoobar\r\n", '*'},
	{"nested array", "*2\r\n*3\r\n:1\r\n:2\r\n:3\r\n*2\r\n+Foo\r\n-Bar\r\n", '*'},
	{"array with nulls", "*3\r\n$3\r\nfoo\r\n$-1\r\n*-1\r\n", '*'},
	{"null", "_\r\n", '_'},
	{"true", "#t\r\n", '#'},
	{"false", "#f\r\n", '#'},
	{"double", ",1.23\r\n", ','},
	{"double inf", ",-inf\r\n", ','},
	{"double exponent", ",1.5e-10\r\n", ','},
	{"big number", "(3492890328409238509324850943850943825024385\r\n", '('},
	{"negative big number", "(-3492890328409238509324850943850943825024385\r\n", '('},
	{"big number as a Lua script makes it", "(123  123\r\n", '('},
	{"bulk error", "!21\r\nSYNTAX invalid syntax\r\n", '!'},
	{"verbatim", "=15\r\ntxt:Some string\r\n", '='},
	{"map", "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", '%'},
	{"empty map", "%0\r\n", '%'},
	{"set", "~5\r\n+orange\r\n+apple\r\n#t\r\n:100\r\n:999\r\n", '~'},
	{"push", ">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$5\r\nhello\r\n", '>'},
	{"push invalidate", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n", '>'},
	{"attribute before array", "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n", '*'},
	{"attribute before scalar", "|1\r\n+ttl\r\n:3600\r\n$3\r\nbar\r\n", '$'},
	{"empty attribute", "|0\r\n+OK\r\n", '+'},
	{"attribute chain", "|0\r\n|1\r\n+a\r\n+b\r\n:1\r\n", ':'},
	{"nested attribute", "*2\r\n:1\r\n|1\r\n+meta\r\n+data\r\n:2\r\n", '*'},
	{"attribute inside attribute", "|1\r\n|1\r\n+x\r\n+y\r\n+k\r\n+v\r\n_\r\n", '_'},
	{"attribute on last element", "*1\r\n|1\r\n+a\r\n+b\r\n*0\r\n", '*'},
	{"map of aggregates", "%1\r\n*1\r\n:1\r\n~1\r\n#f\r\n", '%'},
	{"HELLO reply", "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.4\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n", '%'},
}

func TestFramerValid(t *testing.T) {
	for _, tc := range validReplies {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(tc.raw)
			if msg := checkStream(t, raw, []int{len(raw)}, []byte{tc.kind}); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

// checkStream frames raw whole, byte by byte and cut at every point, and
// checks the replies end at ends with the given kinds, agreeing with the
// reference parser.
func checkStream(t *testing.T, raw []byte, ends []int, kinds []byte) string {
	t.Helper()
	want := streamResult{ends: ends, kinds: kinds, errAt: -1}
	if ref := refFrames(raw, DefaultMaxDepth); sameResult(ref, want) != "" {
		t.Fatalf("reference disagrees with the test table: %s", sameResult(ref, want))
	}
	var f Framer
	if msg := sameResult(framerFrames(t, &f, raw, nil), want); msg != "" {
		return "whole: " + msg
	}
	f.Reset()
	if msg := sameResult(framerFrames(t, &f, raw, []int{1}), want); msg != "" {
		return "byte by byte: " + msg
	}
	for cut := 1; cut < len(raw); cut++ {
		f.Reset()
		if msg := sameResult(framerFrames(t, &f, raw, []int{cut, len(raw)}), want); msg != "" {
			return "cut at " + strconv.Itoa(cut) + ": " + msg
		}
	}
	return ""
}

// TestFramerStreams frames several replies back to back, split at every
// point and at every pair of points.
func TestFramerStreams(t *testing.T) {
	streams := [][]string{
		{"+OK\r\n", "$10\r\n0123456789\r\n", ":1\r\n", "*-1\r\n", "$-1\r\n"},
		{">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", "+OK\r\n", ">2\r\n$10\r\ninvalidate\r\n_\r\n"},
		{"|1\r\n+a\r\n+b\r\n$1\r\nx\r\n", "%1\r\n+k\r\n|0\r\n*1\r\n_\r\n", "#t\r\n"},
		{"*3\r\n*0\r\n%0\r\n~1\r\n,1.5\r\n", "(12345678901234567890\r\n", "!3\r\nERR\r\n", "=7\r\ntxt:abc\r\n"},
	}
	for i, parts := range streams {
		var raw []byte
		var ends []int
		var kinds []byte
		for _, p := range parts {
			raw = append(raw, p...)
			ends = append(ends, len(raw))
			k := p[0]
			if k == '|' {
				k = validKind(p)
			}
			kinds = append(kinds, k)
		}
		t.Run("stream"+strconv.Itoa(i), func(t *testing.T) {
			if msg := checkStream(t, raw, ends, kinds); msg != "" {
				t.Fatal(msg)
			}
			want := streamResult{ends: ends, kinds: kinds, errAt: -1}
			for a := 1; a < len(raw); a++ {
				for b := a + 1; b < len(raw); b++ {
					var f Framer
					// Chunks [0,a) [a,b) [b,end).
					if msg := sameResult(framerFrames(t, &f, raw, []int{a, b - a, len(raw)}), want); msg != "" {
						t.Fatalf("cuts at %d and %d: %s", a, b, msg)
					}
				}
			}
		})
	}
}

// validKind finds the Kind of a reply starting with an attribute using the
// reference parser.
func validKind(p string) byte {
	res := refFrames([]byte(p), DefaultMaxDepth)
	if len(res.kinds) == 0 {
		return 0
	}
	return res.kinds[0]
}

// invalidReplies each break one rule; at is the offset of the offending
// byte.
var invalidReplies = []struct {
	name string
	raw  string
	err  error
	at   int
}{
	{"unknown type", "?foo\r\n", ErrUnknownType, 0},
	{"unknown type after reply", "+OK\r\nxyz\r\n", ErrUnknownType, 5},
	{"unknown type in array", "*2\r\n:1\r\nA\r\n", ErrUnknownType, 8},
	{"streamed bulk", "$?\r\n;4\r\nHell\r\n;0\r\n", ErrStreamed, 1},
	{"streamed array", "*?\r\n:1\r\n.\r\n", ErrStreamed, 1},
	{"streamed map", "%?\r\n", ErrStreamed, 1},
	{"LF without CR in simple string", "+OK\n", ErrMissingCR, 3},
	{"LF without CR in error", "-ERR\nx\r\n", ErrMissingCR, 4},
	{"LF without CR in length", "$3\nfoo\r\n", ErrMissingCR, 2},
	{"LF without CR in integer", ":12\n", ErrMissingCR, 3},
	{"LF without CR in null", "_\n", ErrMissingCR, 1},
	{"LF without CR in boolean", "#t\n", ErrMissingCR, 2},
	{"CR without LF in simple string", "+OK\rX\n", ErrMissingLF, 4},
	{"CR without LF in length", "*1\rX", ErrMissingLF, 3},
	{"non-digit length", "$1x\r\n", ErrBadLength, 2},
	{"empty length", "$\r\n", ErrBadLength, 1},
	{"plus sign in length", "*+1\r\n", ErrBadLength, 1},
	{"leading zero in length", "$01\r\na\r\n", ErrBadLength, 2},
	{"lone minus in length", "$-\r\n", ErrBadLength, 2},
	{"space in length", "$ 3\r\n", ErrBadLength, 1},
	{"negative bulk", "$-2\r\n", ErrNegativeLength, 2},
	{"minus ten bulk", "$-10\r\n", ErrNegativeLength, 3},
	{"negative zero", "*-0\r\n", ErrNegativeLength, 2},
	{"null map", "%-1\r\n", ErrNegativeLength, 1},
	{"null set", "~-1\r\n", ErrNegativeLength, 1},
	{"null push", ">-1\r\n", ErrNegativeLength, 1},
	{"null verbatim", "=-1\r\n", ErrNegativeLength, 1},
	{"null bulk error", "!-1\r\n", ErrNegativeLength, 1},
	{"null attribute", "|-1\r\n", ErrNegativeLength, 1},
	{"huge bulk", "$1099511627777\r\n", ErrLengthOverflow, 13},
	{"int64 overflow length", "*99999999999999999999\r\n", ErrLengthOverflow, 13},
	{"bulk too long", "$3\r\nfoobar\r\n", ErrBulkTerminator, 7},
	{"bulk too short", "$6\r\nfoo\r\n\r\n", ErrBulkTerminator, 10},
	{"bulk CR without LF", "$3\r\nfoo\rx", ErrBulkTerminator, 8},
	{"integer with letters", ":12a\r\n", ErrBadInteger, 3},
	{"empty integer", ":\r\n", ErrBadInteger, 1},
	{"sign only integer", ":-\r\n", ErrBadInteger, 2},
	{"two signs", ":+-1\r\n", ErrBadInteger, 2},
	{"integer overflow", ":9223372036854775808\r\n", ErrBadInteger, 19},
	{"integer underflow", ":-9223372036854775809\r\n", ErrBadInteger, 20},
	{"boolean yes", "#y\r\n", ErrBadBoolean, 1},
	{"boolean empty", "#\r\n", ErrBadBoolean, 1},
	{"boolean too long", "#tt\r\n", ErrBadBoolean, 2},
	{"null with payload", "_x\r\n", ErrBadNull, 1},
	{"error inside map", "%1\r\n+k\r\n$2\r\nv\r\n", ErrBulkTerminator, 14},
}

func TestFramerErrors(t *testing.T) {
	for _, tc := range invalidReplies {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(tc.raw)
			ref := refFrames(raw, DefaultMaxDepth)
			if ref.err != tc.err || ref.errAt != tc.at {
				t.Fatalf("reference: %v at %d; table says %v at %d", ref.err, ref.errAt, tc.err, tc.at)
			}
			for _, sizes := range [][]int{nil, {1}, {2}, {3, 1}} {
				var f Framer
				got := framerFrames(t, &f, raw, sizes)
				if msg := sameResult(got, ref); msg != "" {
					t.Fatalf("chunks %v: %s", sizes, msg)
				}
				if !strings.Contains(got.err.Error(), tc.err.Error()) {
					t.Fatalf("error %q does not say %q", got.err, tc.err)
				}
			}
		})
	}
}

func TestFramerDepth(t *testing.T) {
	nest := func(depth int, inner string) []byte {
		return []byte(strings.Repeat("*1\r\n", depth) + inner)
	}
	for _, tc := range []struct {
		maxDepth, depth int
		inner           string
		ok              bool
	}{
		{0, DefaultMaxDepth, ":1\r\n", true},
		{0, DefaultMaxDepth + 1, ":1\r\n", false},
		{0, DefaultMaxDepth - 1, "*0\r\n", true},
		{0, DefaultMaxDepth, "*0\r\n", false}, // an empty aggregate is still nested
		{0, DefaultMaxDepth, "*-1\r\n", false},
		{1, 1, "+a\r\n", true},
		{1, 1, "|0\r\n+a\r\n", false}, // an attribute nests its elements
		{1, 0, "|1\r\n+a\r\n+b\r\n+c\r\n", true},
		{3, 2, "%1\r\n+a\r\n+b\r\n", true},
		{3, 3, "%1\r\n+a\r\n+b\r\n", false},
	} {
		raw := nest(tc.depth, tc.inner)
		f := Framer{MaxDepth: tc.maxDepth}
		n, done, err := f.Next(raw)
		if tc.ok && (err != nil || !done || n != len(raw)) {
			t.Errorf("MaxDepth %d, depth %d, %q: n=%d done=%v err=%v", tc.maxDepth, tc.depth, tc.inner, n, done, err)
		}
		if !tc.ok && !errors.Is(err, ErrTooDeep) {
			t.Errorf("MaxDepth %d, depth %d, %q: err=%v, want ErrTooDeep", tc.maxDepth, tc.depth, tc.inner, err)
		}
		max := tc.maxDepth
		if max == 0 {
			max = DefaultMaxDepth
		}
		ref := refFrames(raw, max)
		if (ref.err == nil) != tc.ok {
			t.Errorf("reference disagrees: %v", ref.err)
		}
	}
}

func TestFramerKindTracking(t *testing.T) {
	var f Framer
	if f.Kind() != 0 {
		t.Fatalf("Kind before any byte = %q", f.Kind())
	}
	steps := []struct {
		in   string
		kind byte
		done bool
	}{
		{"|1\r\n+a\r\n", 0, false}, // inside a top-level attribute: not known yet
		{"+b\r\n", 0, false},
		{">", '>', false},
		{"1\r\n+x\r\n", '>', true},
		{"", '>', false}, // keeps reporting the completed reply
		{"$", '$', false},
	}
	for _, s := range steps {
		_, done, err := f.Next([]byte(s.in))
		if err != nil || done != s.done || f.Kind() != s.kind {
			t.Fatalf("after %q: done=%v err=%v Kind=%q; want done=%v Kind=%q", s.in, done, err, f.Kind(), s.done, s.kind)
		}
	}
	f.Reset()
	if f.Kind() != 0 {
		t.Fatalf("Kind after Reset = %q", f.Kind())
	}
}

func TestFramerStickyErrorAndReset(t *testing.T) {
	f := Framer{MaxDepth: 7}
	_, _, err := f.Next([]byte("*1\r\nX"))
	if !errors.Is(err, ErrUnknownType) {
		t.Fatalf("err = %v", err)
	}
	if n, done, again := f.Next([]byte("+OK\r\n")); n != 0 || done || again != err {
		t.Fatalf("after error: n=%d done=%v err=%v", n, done, again)
	}
	f.Reset()
	if f.MaxDepth != 7 {
		t.Fatalf("Reset lost MaxDepth")
	}
	if n, done, err := f.Next([]byte("+OK\r\n")); n != 5 || !done || err != nil {
		t.Fatalf("after Reset: n=%d done=%v err=%v", n, done, err)
	}
	if n, done, err := f.Next(nil); n != 0 || done || err != nil {
		t.Fatalf("empty input: n=%d done=%v err=%v", n, done, err)
	}
}

func TestFramerAllocs(t *testing.T) {
	stream := []byte("+OK\r\n$10\r\n0123456789\r\n*2\r\n%1\r\n+a\r\n:1\r\n|1\r\n+k\r\n+v\r\n_\r\n")
	var f Framer
	framerFrames(t, &f, stream, nil) // grow the stack once
	allocs := testing.AllocsPerRun(100, func() {
		for p := stream; len(p) > 0; {
			n, _, err := f.Next(p[:min(len(p), 7)])
			if err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
	})
	if allocs != 0 {
		t.Fatalf("Next allocates %v times per stream", allocs)
	}
}
