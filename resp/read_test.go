package resp

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadReply(t *testing.T) {
	var stream string
	for _, tc := range validReplies {
		stream += tc.raw
	}
	// A one-byte reader and a minimal buffer force the framer across many
	// Peek windows.
	for _, r := range []io.Reader{strings.NewReader(stream), iotest.OneByteReader(strings.NewReader(stream))} {
		br := bufio.NewReaderSize(r, 16)
		var dst []byte
		for i, tc := range validReplies {
			var err error
			start := len(dst)
			if dst, err = ReadReply(br, dst); err != nil {
				t.Fatalf("reply %d (%s): %v", i, tc.name, err)
			}
			if got := string(dst[start:]); got != tc.raw {
				t.Fatalf("reply %d: got %q, want %q", i, got, tc.raw)
			}
		}
		if _, err := ReadReply(br, nil); err != io.EOF {
			t.Fatalf("at end: %v, want io.EOF", err)
		}
	}
}

func TestReadReplyErrors(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("*2\r\n:1\r\n"))
	if _, err := ReadReply(br, nil); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v, want io.ErrUnexpectedEOF", err)
	}
	br = bufio.NewReader(strings.NewReader("+OK\r\n$x\r\n"))
	if b, err := ReadReply(br, nil); err != nil || string(b) != "+OK\r\n" {
		t.Fatalf("first reply: %q, %v", b, err)
	}
	if b, err := ReadReply(br, nil); !errors.Is(err, ErrBadLength) || string(b) != "$" {
		t.Fatalf("bad reply: %q, %v", b, err)
	}
	// Nothing past the offending byte was taken.
	if rest, _ := io.ReadAll(br); string(rest) != "x\r\n" {
		t.Fatalf("left %q", rest)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want Value
	}{
		{"+OK\r\n", Value{Kind: '+', Str: []byte("OK")}},
		{"-ERR x\r\n", Value{Kind: '-', Str: []byte("ERR x")}},
		{":-5\r\n", Value{Kind: ':', Int: -5}},
		{"$3\r\nfoo\r\n", Value{Kind: '$', Str: []byte("foo")}},
		{"$0\r\n\r\n", Value{Kind: '$', Str: []byte{}}},
		{"$-1\r\n", Value{Kind: '$', Null: true}},
		{"*-1\r\n", Value{Kind: '*', Null: true}},
		{"_\r\n", Value{Kind: '_', Null: true}},
		{"#t\r\n", Value{Kind: '#', Int: 1}},
		{"#f\r\n", Value{Kind: '#'}},
		{",3.14\r\n", Value{Kind: ',', Str: []byte("3.14")}},
		{"(123456789012345678901234567890\r\n", Value{Kind: '(', Str: []byte("123456789012345678901234567890")}},
		{"!3\r\nERR\r\n", Value{Kind: '!', Str: []byte("ERR")}},
		{"=7\r\ntxt:abc\r\n", Value{Kind: '=', Str: []byte("txt:abc")}},
		{"*0\r\n", Value{Kind: '*', Elems: []Value{}}},
		{"*2\r\n:1\r\n*1\r\n+a\r\n", Value{Kind: '*', Elems: []Value{{Kind: ':', Int: 1}, {Kind: '*', Elems: []Value{{Kind: '+', Str: []byte("a")}}}}}},
		{"%1\r\n+k\r\n:1\r\n", Value{Kind: '%', Elems: []Value{{Kind: '+', Str: []byte("k")}, {Kind: ':', Int: 1}}}},
		{"~1\r\n#f\r\n", Value{Kind: '~', Elems: []Value{{Kind: '#'}}}},
		{">2\r\n+a\r\n+b\r\n", Value{Kind: '>', Elems: []Value{{Kind: '+', Str: []byte("a")}, {Kind: '+', Str: []byte("b")}}}},
		{"|1\r\n+ttl\r\n:1\r\n+OK\r\n", Value{Kind: '+', Str: []byte("OK")}},
		{"*2\r\n|1\r\n+a\r\n*1\r\n:1\r\n:7\r\n:8\r\n", Value{Kind: '*', Elems: []Value{{Kind: ':', Int: 7}, {Kind: ':', Int: 8}}}},
	} {
		got, err := Parse([]byte(tc.raw))
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.raw, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		raw string
		err error
	}{
		{"", ErrIncomplete},
		{"*2\r\n:1\r\n", ErrIncomplete},
		{"+OK\r\n+OK\r\n", ErrTrailingData},
		{"$3\r\nfoobar\r\n", ErrBulkTerminator},
		{"x", ErrUnknownType},
	} {
		if _, err := Parse([]byte(tc.raw)); !errors.Is(err, tc.err) {
			t.Errorf("Parse(%q): %v, want %v", tc.raw, err, tc.err)
		}
	}
}

// TestParseCommandReply decodes the shape of a COMMAND INFO reply, the
// kind of cold-path use Parse is for.
func TestParseCommandReply(t *testing.T) {
	raw := "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*4\r\n+flags\r\n*1\r\n+RO\r\n+begin_search\r\n%2\r\n+type\r\n+index\r\n+spec\r\n%1\r\n+index\r\n:1\r\n*0\r\n"
	v, err := Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	cmd := v.Elems[0]
	if string(cmd.Elems[0].Str) != "get" || cmd.Elems[1].Int != 2 || string(cmd.Elems[2].Elems[0].Str) != "readonly" {
		t.Fatalf("decoded %+v", cmd)
	}
}
