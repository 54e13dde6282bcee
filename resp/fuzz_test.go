package resp

import (
	"bytes"
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

// FuzzRequestParser checks the incremental parser against the one-shot
// reference parser (refRequests), fed whole and in fuzzer-chosen chunks,
// under small fuzzer-chosen limits.
func FuzzRequestParser(f *testing.F) {
	f.Add([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"), []byte{1}, uint16(0), uint16(0), uint16(0), false)
	f.Add([]byte("*1\r\n$100\r\n"), []byte{3}, uint16(10), uint16(0), uint16(0), false)
	f.Add([]byte("PING\r\nGET key\r\n\"a\\x41\" 'b\\'c'\n"), []byte{2}, uint16(0), uint16(8), uint16(4), true)
	f.Add([]byte("*0\r\n*-1\r\n*2\rX$4\r\nPINGxy$1\r\na\r\n*02\r\n"), []byte{5, 1}, uint16(0), uint16(0), uint16(0), false)
	f.Add([]byte("*11\r\n*1\r\n$20000\r\n"), []byte{7}, uint16(0), uint16(0), uint16(0), true)
	f.Fuzz(func(t *testing.T, data, sizes []byte, maxBulk, maxQuery, maxInline uint16, auth bool) {
		lim := RequestLimits{MaxBulkLen: int64(maxBulk), MaxQueryBuffer: int64(maxQuery), MaxInlineLen: int64(maxInline), AuthRequired: auth}
		want := refRequests(data, lim)
		if got := parseChunked(t, data, nil, lim); !reflect.DeepEqual(got, want) {
			t.Fatalf("whole input:\n got %+v\nwant %+v", got, want)
		}
		if got := parseChunked(t, data, chunkSizes(sizes), lim); !reflect.DeepEqual(got, want) {
			t.Fatalf("chunks %v:\n got %+v\nwant %+v", chunkSizes(sizes), got, want)
		}
	})
}

// FuzzRequestParserCost fails when an input costs the parser far more work
// than its length: steps (bytes walked and copied, arguments made) are
// bounded by a small multiple of the bytes and reads, however the input is
// split and whatever it declares.
func FuzzRequestParserCost(f *testing.F) {
	f.Add([]byte("*2147483647\r\n"), []byte("$1\r\na\r\n"), uint16(50), []byte{1})
	f.Add([]byte("*1\r\n$536870912\r\n"), []byte("x"), uint16(1000), []byte{3})
	f.Add([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n"), []byte("0123456789"), uint16(10000), []byte{200})
	f.Add([]byte(""), []byte("GET \"k\" "), uint16(3000), []byte{1, 2})
	f.Fuzz(func(t *testing.T, head, drip []byte, repeat uint16, sizes []byte) {
		data := append(append([]byte(nil), head...), bytes.Repeat(drip, int(repeat))...)
		if len(data) > 1<<20 {
			return
		}
		total := int64(len(data))
		var p RequestParser
		reads := 0
		chunks := chunkSizes(sizes)
		var cmds []Command
		for k := 0; len(data) > 0; k++ {
			buf := p.ReadBufferFor(k % 2 * len(data)) // told what is left every other read
			size := len(data)
			if len(chunks) > 0 {
				size = min(size, chunks[k%len(chunks)])
			}
			n := copy(buf, data[:size])
			data = data[n:]
			reads++
			var err error
			if cmds, err = p.Parse(n, RequestLimits{}, cmds[:0]); err != nil {
				break
			}
		}
		if bound := 4*total + 4*int64(reads) + 64; p.Steps() > bound {
			t.Fatalf("%d bytes in %d reads cost %d steps, over %d", total, reads, p.Steps(), bound)
		}
	})
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
