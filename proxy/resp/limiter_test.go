package resp

import (
	"bytes"
	"strings"
	"testing"
)

// feedLimiter feeds data to l in chunks whose sizes cycle through sizes
// (all at once when sizes is empty) and returns the first error.
func feedLimiter(l *RequestLimiter, data []byte, sizes []int) error {
	for k := 0; len(data) > 0; k++ {
		size := len(data)
		if len(sizes) > 0 {
			size = min(sizes[k%len(sizes)], size)
		}
		if err := l.Feed(data[:size]); err != nil {
			return err
		}
		data = data[size:]
	}
	return nil
}

// sameLimitError reports whether a and b are both nil or the same limit.
func sameLimitError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ea, oka := a.(*LimitError)
	eb, okb := b.(*LimitError)
	return oka && okb && *ea == *eb
}

func TestRequestLimiterAcceptsWellFormed(t *testing.T) {
	var stream []byte
	stream = AppendCommandString(stream, "SET", "key", "value")
	stream = AppendCommandString(stream, "GET", "key")
	stream = append(stream, "PING\r\n"...)
	stream = append(stream, "\r\n"...) // empty inline line
	stream = append(stream, "ping\n"...)
	stream = append(stream, "*0\r\n*-1\r\n"...)
	stream = AppendCommand(stream, []byte("SET"), []byte("k"), bytes.Repeat([]byte("\r\n*$"), 1000))
	stream = AppendCommand(stream, []byte("SET"), []byte("k"), nil)
	stream = append(stream, "$3\r\nfoo\r\n"...) // not a command start: an inline line to the library
	stream = append(stream, "*1\r\n$\r\n\r\n"...)
	for _, sizes := range [][]int{nil, {1}, {2}, {3}, {7, 1}} {
		var l RequestLimiter
		if err := feedLimiter(&l, stream, sizes); err != nil {
			t.Fatalf("chunks %v: %v", sizes, err)
		}
		// Exactly at every limit is still fine.
		// The largest command is the SET with 4000 bytes: 4029 bytes.
		l = RequestLimiter{MaxBulkLen: 4000, MaxQueryBuffer: 4029, MaxInlineLen: 10}
		if err := feedLimiter(&l, stream, sizes); err != nil {
			t.Fatalf("chunks %v, tight limits: %v", sizes, err)
		}
		l = RequestLimiter{MaxBulkLen: 4000, MaxQueryBuffer: 4028, MaxInlineLen: 10}
		if err := feedLimiter(&l, stream, sizes); err == nil {
			t.Fatalf("chunks %v: query buffer 1 byte short not refused", sizes)
		}
	}
}

func TestRequestLimiterLimits(t *testing.T) {
	const (
		bulkReply      = "-ERR Protocol error: invalid bulk length\r\n"
		inlineReply    = "-ERR Protocol error: too big inline request\r\n"
		multibulkReply = "-ERR Protocol error: invalid multibulk length\r\n"
		mbulkStrReply  = "-ERR Protocol error: too big mbulk count string\r\n"
		bulkStrReply   = "-ERR Protocol error: too big bulk count string\r\n"
	)
	for _, tc := range []struct {
		name    string
		limiter RequestLimiter
		in      string
		reply   string // "-" for no error
		reason  string // a substring of the reason
	}{
		{"bulk at limit", RequestLimiter{MaxBulkLen: 10}, "*1\r\n$10\r\n", "-", ""},
		{"bulk over limit", RequestLimiter{MaxBulkLen: 10}, "*1\r\n$11\r\n", bulkReply, "proto-max-bulk-len"},
		{"bulk over limit before CRLF", RequestLimiter{MaxBulkLen: 10}, "*1\r\n$100", bulkReply, "proto-max-bulk-len"},
		{"default bulk at limit", RequestLimiter{}, "*1\r\n$536870912\r\n", "-", ""},
		{"default bulk over limit", RequestLimiter{}, "*1\r\n$536870913\r\n", bulkReply, "proto-max-bulk-len"},
		{"huge bulk", RequestLimiter{}, "*1\r\n$99999999999999999999999999\r\n", bulkReply, ""},
		{"second bulk over limit", RequestLimiter{MaxBulkLen: 3}, "*2\r\n$3\r\nGET\r\n$4\r\n", bulkReply, ""},
		{"inline at limit", RequestLimiter{MaxInlineLen: 10}, "0123456789\n", "-", ""},
		{"inline over limit", RequestLimiter{MaxInlineLen: 10}, "0123456789A", inlineReply, "inline"},
		{"inline CR counts", RequestLimiter{MaxInlineLen: 10}, "0123456789\r\n", inlineReply, "inline"},
		{"default inline over limit", RequestLimiter{}, strings.Repeat("a", 64<<10+1), inlineReply, "65536"},
		{"inline after command", RequestLimiter{MaxInlineLen: 4}, "PING\nGET k\n", inlineReply, ""},
		{"query buffer at limit", RequestLimiter{MaxQueryBuffer: 21}, "*1\r\n$10\r\n0123456789\r\n", "-", ""},
		{"query buffer over limit", RequestLimiter{MaxQueryBuffer: 20}, "*1\r\n$10\r\n0123456789\r\n", "", "query buffer limit exceeded"},
		{"query buffer per command", RequestLimiter{MaxQueryBuffer: 21}, strings.Repeat("*1\r\n$10\r\n0123456789\r\n", 10), "-", ""},
		{"query buffer in inline", RequestLimiter{MaxQueryBuffer: 5, MaxInlineLen: 10}, "PING!!\n", "", "query buffer"},
		{"inline limit wins a tie", RequestLimiter{MaxQueryBuffer: 5, MaxInlineLen: 5}, "PING!!\n", inlineReply, ""},
		{"query buffer in malformed stream", RequestLimiter{MaxQueryBuffer: 10}, "*1\r\nXXXXXXXXXXXXXXX", "", "query buffer"},
		{"multibulk count at limit", RequestLimiter{}, "*2147483647\r\n", "-", ""},
		{"multibulk count over limit", RequestLimiter{}, "*2147483648\r\n", multibulkReply, "multibulk"},
		{"multibulk count line too long", RequestLimiter{MaxInlineLen: 8}, "*000000001\r\n", mbulkStrReply, "count line"},
		{"bulk length line too long", RequestLimiter{MaxInlineLen: 8}, "*1\r\n$000000001\r\n", bulkStrReply, "length line"},
		{"negative bulk is left to the library", RequestLimiter{}, "*1\r\n$-5\r\nanything at all", "-", ""},
		{"bad digits are left to the library", RequestLimiter{}, "*1x\r\n$99999999999\r\n", "-", ""},
		{"missing dollar is left to the library", RequestLimiter{}, "*1\r\n:99999999999\r\n", "-", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sizes := range [][]int{nil, {1}, {2}, {5, 3}} {
				l := tc.limiter
				err := feedLimiter(&l, []byte(tc.in), sizes)
				if tc.reply == "-" {
					if err != nil {
						t.Fatalf("chunks %v: %v", sizes, err)
					}
					continue
				}
				le, ok := err.(*LimitError)
				if !ok {
					t.Fatalf("chunks %v: err = %v, want a *LimitError", sizes, err)
				}
				if le.Reply != tc.reply || !strings.Contains(le.Reason, tc.reason) {
					t.Fatalf("chunks %v: got %q (%s), want %q (%s)", sizes, le.Reply, le.Reason, tc.reply, tc.reason)
				}
				if again := l.Feed([]byte("+OK\r\n")); again != err {
					t.Fatalf("error not sticky: %v", again)
				}
				if !strings.Contains(le.Error(), le.Reason) {
					t.Fatalf("Error() = %q", le.Error())
				}
			}
		})
	}
}

func TestRequestLimiterReset(t *testing.T) {
	l := RequestLimiter{MaxBulkLen: 1}
	if err := l.Feed([]byte("*1\r\n$2\r\n")); err == nil {
		t.Fatal("no error")
	}
	l.Reset()
	if l.MaxBulkLen != 1 {
		t.Fatal("Reset lost the limits")
	}
	if err := l.Feed([]byte("*1\r\n$1\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
}

func TestRequestLimiterAllocs(t *testing.T) {
	var stream []byte
	for range 10 {
		stream = AppendCommandString(stream, "SET", "key:000001", strings.Repeat("v", 100))
		stream = append(stream, "PING\r\n"...)
	}
	var l RequestLimiter
	allocs := testing.AllocsPerRun(100, func() {
		if err := feedLimiter(&l, stream, []int{13}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Feed allocates %v times per stream", allocs)
	}
}
