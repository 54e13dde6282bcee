package resp

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"testing"
)

// fuzzMaxDepth is small so the fuzzer reaches the depth limit.
const fuzzMaxDepth = 16

// chunkSizes turns fuzzer bytes into chunk sizes of 1 to 37 bytes.
func chunkSizes(b []byte) []int {
	sizes := make([]int, len(b))
	for i, c := range b {
		sizes[i] = int(c)%37 + 1
	}
	return sizes
}

// FuzzFramer checks the Framer against the reference parser, fed whole and
// in fuzzer-chosen chunks.
func FuzzFramer(f *testing.F) {
	for _, tc := range validReplies {
		f.Add([]byte(tc.raw), []byte{1})
	}
	for _, tc := range invalidReplies {
		f.Add([]byte(tc.raw), []byte{2, 0})
	}
	f.Add([]byte("+OK\r\n$10\r\n0123456789\r\n*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n_\r\n"), []byte{3, 0, 4})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		want := refFrames(data, fuzzMaxDepth)
		whole := Framer{MaxDepth: fuzzMaxDepth}
		if msg := sameResult(framerFrames(t, &whole, data, nil), want); msg != "" {
			t.Fatalf("whole input: %s", msg)
		}
		chunked := Framer{MaxDepth: fuzzMaxDepth}
		if msg := sameResult(framerFrames(t, &chunked, data, chunkSizes(sizes)), want); msg != "" {
			t.Fatalf("chunks %v: %s", chunkSizes(sizes), msg)
		}
	})
}

// FuzzRequestLimiter checks that the limiter never panics, that chunking
// never changes its verdict, and that well-formed commands within the
// limits always pass while one byte less of limit is refused.
func FuzzRequestLimiter(f *testing.F) {
	f.Add([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"), []byte{1}, uint16(0), uint16(0), uint16(0))
	f.Add([]byte("*1\r\n$100\r\n"), []byte{3}, uint16(10), uint16(0), uint16(0))
	f.Add([]byte("PING\r\nGET key\r\n"), []byte{2}, uint16(0), uint16(8), uint16(4))
	f.Add([]byte("SET\x00key\x00value\x00\x00GET\x00key"), []byte{5, 1}, uint16(0), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, data, sizes []byte, maxBulk, maxQuery, maxInline uint16) {
		// Arbitrary bytes under small limits: chunking must not matter.
		limits := RequestLimiter{MaxBulkLen: int64(maxBulk), MaxQueryBuffer: int64(maxQuery), MaxInlineLen: int64(maxInline)}
		whole, chunked := limits, limits
		errWhole := feedLimiter(&whole, data, nil)
		errChunked := feedLimiter(&chunked, data, chunkSizes(sizes))
		if !sameLimitError(errWhole, errChunked) {
			t.Fatalf("whole: %v; chunks %v: %v", errWhole, chunkSizes(sizes), errChunked)
		}
		if errWhole != nil {
			if _, ok := errWhole.(*LimitError); !ok {
				t.Fatalf("error %T is not a *LimitError", errWhole)
			}
		}

		// Well-formed commands built from the data, with limits set to
		// exactly what they need.
		stream, cmdLimits := wellFormedCommands(data)
		for _, s := range [][]int{nil, chunkSizes(sizes)} {
			l := cmdLimits
			if err := feedLimiter(&l, stream, s); err != nil {
				t.Fatalf("well-formed %q, limits %+v, chunks %v: %v", stream, cmdLimits, s, err)
			}
		}
		tight := cmdLimits
		tight.MaxQueryBuffer--
		if tight.MaxQueryBuffer > 0 {
			err := feedLimiter(&tight, stream, chunkSizes(sizes))
			var le *LimitError
			if !errors.As(err, &le) || le.Reason != "query buffer limit exceeded" {
				t.Fatalf("well-formed %q with MaxQueryBuffer %d: %v, want query buffer limit", stream, tight.MaxQueryBuffer, err)
			}
		}
	})
}

// wellFormedCommands builds a stream from data, split at NUL bytes into
// arguments and at double NULs into commands, plus an inline command, and
// the smallest limits the stream meets.
func wellFormedCommands(data []byte) ([]byte, RequestLimiter) {
	var stream []byte
	limits := RequestLimiter{MaxBulkLen: 1, MaxQueryBuffer: 1, MaxInlineLen: 32}
	for _, cmd := range bytes.Split(data, []byte{0, 0}) {
		args := bytes.Split(cmd, []byte{0})
		start := len(stream)
		stream = AppendCommand(stream, args...)
		for _, a := range args {
			limits.MaxBulkLen = max(limits.MaxBulkLen, int64(len(a)))
		}
		limits.MaxQueryBuffer = max(limits.MaxQueryBuffer, int64(len(stream)-start))
	}
	// An inline command: the data with its line feeds removed, led by a
	// letter so it cannot start with '*'.
	line := append([]byte("X"), bytes.ReplaceAll(data, []byte("\n"), nil)...)
	stream = append(append(stream, line...), "\r\n"...)
	limits.MaxInlineLen = max(limits.MaxInlineLen, int64(len(line)+1))
	limits.MaxQueryBuffer = max(limits.MaxQueryBuffer, int64(len(line)+2))
	return stream, limits
}

// FuzzParse checks that Parse accepts exactly what the Framer frames as one
// reply, and that what it decodes survives re-encoding.
func FuzzParse(f *testing.F) {
	for _, tc := range validReplies {
		f.Add([]byte(tc.raw))
	}
	f.Add([]byte("+OK\r\n+OK\r\n"))
	f.Add([]byte("*3\r\n:1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		var fr Framer
		n, done, ferr := fr.Next(data)
		oneReply := ferr == nil && done && n == len(data)
		if (err == nil) != oneReply {
			t.Fatalf("Parse error %v, but Framer: n=%d of %d, done=%v, err=%v", err, n, len(data), done, ferr)
		}
		if err != nil {
			return
		}
		if v.Kind != fr.Kind() {
			t.Fatalf("Parse kind %q, Framer kind %q", v.Kind, fr.Kind())
		}
		again, err := Parse(encodeValue(nil, v))
		if err != nil {
			t.Fatalf("re-encoded %q does not parse: %v", encodeValue(nil, v), err)
		}
		if !reflect.DeepEqual(again, v) {
			t.Fatalf("round trip changed %+v to %+v", v, again)
		}
	})
}

// encodeValue encodes v back into RESP.
func encodeValue(dst []byte, v Value) []byte {
	switch v.Kind {
	case '+', '-', ',', '(':
		dst = append(dst, v.Kind)
		dst = append(dst, v.Str...)
		return append(dst, '\r', '\n')
	case ':':
		return AppendInt(dst, v.Int)
	case '#':
		if v.Int == 1 {
			return append(dst, "#t\r\n"...)
		}
		return append(dst, "#f\r\n"...)
	case '_':
		return append(dst, "_\r\n"...)
	case '$', '=', '!':
		if v.Null {
			return append(dst, "$-1\r\n"...)
		}
		dst = appendHeader(dst, v.Kind, int64(len(v.Str)))
		dst = append(dst, v.Str...)
		return append(dst, '\r', '\n')
	default: // aggregates
		if v.Null {
			return append(dst, "*-1\r\n"...)
		}
		n := len(v.Elems)
		if v.Kind == '%' {
			n /= 2
		}
		dst = append(dst, v.Kind)
		dst = append(strconv.AppendInt(dst, int64(n), 10), '\r', '\n')
		for _, e := range v.Elems {
			dst = encodeValue(dst, e)
		}
		return dst
	}
}
