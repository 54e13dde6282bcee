package resp

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// parsed is what a stream parses to: the commands (Raw, then the
// arguments, as strings), and the error reply that ends it (closed).
type parsed struct {
	Cmds   [][]string
	Reply  string
	Closed bool
}

// parseChunked feeds data to a fresh RequestParser in chunks whose sizes
// cycle through sizes (as large as the parser takes when sizes is empty).
func parseChunked(t testing.TB, data []byte, sizes []int, lim RequestLimits) parsed {
	t.Helper()
	var p RequestParser
	var out parsed
	var cmds []Command
	collect := func(cmds []Command) {
		for _, c := range cmds {
			if len(c.Args) == 0 {
				t.Fatalf("command with no arguments: %q", c.Raw)
			}
			if !bytes.Equal(c.Raw, AppendCommand(nil, c.Args...)) && !bytes.Equal(c.Raw, rawOf(c)) {
				t.Fatalf("Raw %q does not frame Args %q", c.Raw, c.Args)
			}
			s := []string{string(c.Raw)}
			for _, a := range c.Args {
				s = append(s, string(a))
			}
			out.Cmds = append(out.Cmds, s)
		}
	}
	step := func(n int) bool {
		var err error
		cmds, err = p.Parse(n, lim, cmds[:0])
		collect(cmds)
		for err == nil && p.Buffered() {
			cmds, err = p.Parse(0, lim, cmds[:0])
			collect(cmds)
		}
		if err != nil {
			le, ok := err.(*LimitError)
			if !ok {
				t.Fatalf("error %T %v is not a *LimitError", err, err)
			}
			out.Reply, out.Closed = le.Reply, true
			return false
		}
		p.Release()
		return true
	}
	for k := 0; len(data) > 0; k++ {
		// Every other read is told what is left to read, as the proxy's
		// reads are by TCP_INQ.
		buf := p.ReadBufferFor(k % 2 * len(data))
		size := len(buf)
		if len(sizes) > 0 {
			size = min(size, sizes[k%len(sizes)])
		}
		n := copy(buf[:size], data)
		data = data[n:]
		if !step(n) {
			break
		}
	}
	return out
}

// rawOf is the canonical encoding of c's arguments: what Raw must be when
// it is not the bytes as sent.
func rawOf(c Command) []byte { return AppendCommand(nil, c.Args...) }

// refRequests is the reference: Redis's processInputBuffer over the whole
// input at once, written as plainly as possible.
func refRequests(data []byte, lim RequestLimits) parsed {
	var out parsed
	maxQ, maxI := lim.maxQueryBuffer(), lim.maxInlineLen()
	fail := func(reply string) parsed {
		out.Reply, out.Closed = reply, true
		return out
	}
	pos := 0
	for pos < len(data) {
		start := pos
		if data[pos] != '*' {
			nl := bytes.IndexByte(data[pos:], '\n')
			lineEnd := len(data)
			if nl >= 0 {
				lineEnd = pos + nl
			}
			cmdLen := int64(lineEnd - pos)
			if nl >= 0 {
				cmdLen++
			}
			if int64(lineEnd-pos) > maxI && maxI <= maxQ {
				return fail("-ERR Protocol error: too big inline request\r\n")
			}
			if cmdLen > maxQ {
				return fail("")
			}
			if nl < 0 {
				return out
			}
			line := bytes.TrimSuffix(data[pos:lineEnd], []byte("\r"))
			_, args, ok := splitArgs(nil, nil, line)
			if !ok {
				return fail("-ERR Protocol error: unbalanced quotes in request\r\n")
			}
			pos = lineEnd + 1
			if len(args) > 0 {
				out.Cmds = append(out.Cmds, strs(AppendCommand(nil, args...), args))
			}
			continue
		}
		cr := bytes.IndexByte(data[pos:], '\r')
		if cr >= 0 {
			cr += pos
		}
		lineEnd := cr
		if cr < 0 {
			lineEnd = len(data)
		}
		if int64(lineEnd-pos) > maxI && maxI <= maxQ {
			return fail("-ERR Protocol error: too big mbulk count string\r\n")
		}
		if cr < 0 || cr+1 >= len(data) {
			if int64(len(data)-start) > maxQ {
				return fail("")
			}
			return out
		}
		if int64(cr+2-start) > maxQ {
			return fail("")
		}
		lax := data[cr+1] != '\n'
		ll, err := strconv.ParseInt(string(data[pos+1:cr]), 10, 64)
		digits := string(data[pos+1 : cr])
		canonical := err == nil && len(digits) < 21 && strconv.FormatInt(ll, 10) == digits
		if !canonical || ll > 1<<31-1 {
			return fail("-ERR Protocol error: invalid multibulk length\r\n")
		}
		if ll > 10 && lim.AuthRequired {
			return fail("-ERR Protocol error: unauthenticated multibulk length\r\n")
		}
		pos = cr + 2
		if ll <= 0 {
			continue
		}
		var args [][]byte
		for range ll {
			lineStart := pos
			cr := bytes.IndexByte(data[pos:], '\r')
			if cr >= 0 {
				cr += pos
			}
			lineEnd := cr
			if cr < 0 {
				lineEnd = len(data)
			}
			if int64(lineEnd-lineStart) > maxI && int64(lineStart-start)+maxI <= maxQ {
				return fail("-ERR Protocol error: too big bulk count string\r\n")
			}
			if cr < 0 || cr+1 >= len(data) {
				if int64(len(data)-start) > maxQ {
					return fail("")
				}
				return out
			}
			if int64(cr+2-start) > maxQ {
				return fail("")
			}
			lax = lax || data[cr+1] != '\n'
			if data[pos] != '$' {
				return fail(expectedDollar(data[pos]))
			}
			digits := string(data[pos+1 : cr])
			bl, err := strconv.ParseInt(digits, 10, 64)
			if err != nil || len(digits) >= 21 || strconv.FormatInt(bl, 10) != digits || bl < 0 || bl > lim.maxBulkLen() {
				return fail("-ERR Protocol error: invalid bulk length\r\n")
			}
			if bl > 16384 && lim.AuthRequired {
				return fail("-ERR Protocol error: unauthenticated bulk length\r\n")
			}
			next := cr + 2 + int(bl) + 2
			if next > len(data) {
				if int64(len(data)-start) > maxQ {
					return fail("")
				}
				return out
			}
			lax = lax || string(data[next-2:next]) != "\r\n"
			args = append(args, data[cr+2:cr+2+int(bl)])
			pos = next
		}
		if int64(pos-start) > maxQ {
			return fail("")
		}
		raw := data[start:pos]
		if lax {
			raw = AppendCommand(nil, args...)
		}
		out.Cmds = append(out.Cmds, strs(raw, args))
	}
	return out
}

func strs(raw []byte, args [][]byte) []string {
	s := []string{string(raw)}
	for _, a := range args {
		s = append(s, string(a))
	}
	return s
}

func TestRequestParser(t *testing.T) {
	const (
		bulkReply      = "-ERR Protocol error: invalid bulk length\r\n"
		multibulkReply = "-ERR Protocol error: invalid multibulk length\r\n"
	)
	set := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"
	for _, tc := range []struct {
		name  string
		lim   RequestLimits
		in    string
		cmds  []string // each command's arguments joined by spaces
		reply string   // "-" for no close
	}{
		{"multibulk", RequestLimits{}, set + "*1\r\n$4\r\nPING\r\n", []string{"SET k hello", "PING"}, "-"},
		{"incomplete", RequestLimits{}, set[:len(set)-3], nil, "-"},
		{"empty counts ignored", RequestLimits{}, "*0\r\n*-1\r\n*-5\r\n*1\r\n$4\r\nPING\r\n", []string{"PING"}, "-"},
		{"inline", RequestLimits{}, "PING\r\nset k \"a b\\x41\\n\" 'c\\'d'\nGET k\n\r\n", []string{"PING", "set k a bA\n c'd", "GET k"}, "-"},
		{"inline unbalanced", RequestLimits{}, "PING\nGET \"k\n", []string{"PING"}, "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"inline close quote then letter", RequestLimits{}, "GET \"k\"x\n", nil, "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"leading zero bulk", RequestLimits{}, "*1\r\n$04\r\nPING\r\n", nil, bulkReply},
		{"leading zero count", RequestLimits{}, "*01\r\n$4\r\nPING\r\n", nil, multibulkReply},
		{"plus sign", RequestLimits{}, "*+1\r\n", nil, multibulkReply},
		{"minus zero", RequestLimits{}, "*-0\r\n", nil, multibulkReply},
		{"empty count", RequestLimits{}, "*\r\n", nil, multibulkReply},
		{"negative bulk", RequestLimits{}, "*1\r\n$-1\r\n", nil, bulkReply},
		{"count at limit", RequestLimits{}, "*2147483647\r\n", nil, "-"},
		{"count over limit", RequestLimits{}, "*2147483648\r\n", nil, multibulkReply},
		{"bulk at limit", RequestLimits{MaxBulkLen: 10}, "*1\r\n$10\r\n", nil, "-"},
		{"bulk over limit", RequestLimits{MaxBulkLen: 10}, "*1\r\n$11\r\n", nil, bulkReply},
		{"huge bulk", RequestLimits{}, "*1\r\n$99999999999999999999999999\r\n", nil, bulkReply},
		{"expected dollar", RequestLimits{}, "*1\r\n:1\r\n", nil, "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"expected dollar CR", RequestLimits{}, "*1\r\n\r\n", nil, "-ERR Protocol error: expected '$', got ' '\r\n"},
		{"CRLF not checked", RequestLimits{}, "*1\rX$4\rYPINGab", []string{"PING"}, "-"},
		{"count line too long", RequestLimits{}, "*" + strings.Repeat("1", 64<<10), nil, "-ERR Protocol error: too big mbulk count string\r\n"},
		{"count line at limit", RequestLimits{}, "*" + strings.Repeat("1", 64<<10-1), nil, "-"},
		{"bulk line too long", RequestLimits{}, "*1\r\n$" + strings.Repeat("1", 64<<10), nil, "-ERR Protocol error: too big bulk count string\r\n"},
		{"inline too long", RequestLimits{}, strings.Repeat("a", 64<<10+1), nil, "-ERR Protocol error: too big inline request\r\n"},
		{"inline CR counts", RequestLimits{MaxInlineLen: 10}, "0123456789\r\n", nil, "-ERR Protocol error: too big inline request\r\n"},
		{"query buffer at limit", RequestLimits{MaxQueryBuffer: 21}, strings.Repeat("*1\r\n$10\r\n0123456789\r\n", 3), []string{"0123456789", "0123456789", "0123456789"}, "-"},
		{"query buffer over limit", RequestLimits{MaxQueryBuffer: 20}, "*1\r\n$10\r\n0123456789\r\n", nil, ""},
		{"query buffer while waiting", RequestLimits{MaxQueryBuffer: 20}, "*2\r\n$10\r\n0123456789\r\n$", nil, ""},
		{"inline limit wins a tie", RequestLimits{MaxQueryBuffer: 5, MaxInlineLen: 5}, "PING!!\n", nil, "-ERR Protocol error: too big inline request\r\n"},
		{"unauth count", RequestLimits{AuthRequired: true}, "*1\r\n$4\r\nPING\r\n*11\r\n", []string{"PING"}, "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"unauth count at limit", RequestLimits{AuthRequired: true}, "*10\r\n", nil, "-"},
		{"unauth bulk", RequestLimits{AuthRequired: true}, "*2\r\n$4\r\nAUTH\r\n$16385\r\n", nil, "-ERR Protocol error: unauthenticated bulk length\r\n"},
		{"unauth bulk at limit", RequestLimits{AuthRequired: true}, "*2\r\n$4\r\nAUTH\r\n$16384\r\n", nil, "-"},
		{"invalid before unauth", RequestLimits{AuthRequired: true}, "*1\r\n$99999999999\r\n", nil, bulkReply},
		{"reset deauths", RequestLimits{ResetDeauths: true}, "PING\r\nreset\r\n*1\r\n$5\r\nRESET\r\n*1\r\n$4\r\nPING\r\n", []string{"PING", "reset", "RESET", "PING"}, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := refRequests([]byte(tc.in), tc.lim)
			for _, sizes := range [][]int{nil, {1}, {2}, {5, 3}, {4096}} {
				got := parseChunked(t, []byte(tc.in), sizes, tc.lim)
				var names []string
				for _, c := range got.Cmds {
					names = append(names, strings.Join(c[1:], " "))
				}
				if strings.Join(names, "|") != strings.Join(tc.cmds, "|") {
					t.Fatalf("chunks %v: commands %q, want %q", sizes, names, tc.cmds)
				}
				wantClosed := tc.reply != "-"
				if got.Closed != wantClosed || (wantClosed && got.Reply != tc.reply) {
					t.Fatalf("chunks %v: closed %v with %q, want %q", sizes, got.Closed, got.Reply, tc.reply)
				}
				if strings.Join(flatten(got.Cmds), "|") != strings.Join(flatten(ref.Cmds), "|") || got.Reply != ref.Reply || got.Closed != ref.Closed {
					t.Fatalf("chunks %v: %+v, reference %+v", sizes, got, ref)
				}
			}
		})
	}
}

func flatten(cmds [][]string) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c...)
	}
	return out
}

// TestRequestParserRawIsSent: a well-framed command's Raw is the bytes as
// sent, in the read buffer (no copy); an inline one is re-encoded.
func TestRequestParserRawIsSent(t *testing.T) {
	var p RequestParser
	in := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\nGET k\r\n"
	buf := p.ReadBuffer()
	n := copy(buf, in)
	cmds, err := p.Parse(n, RequestLimits{}, nil)
	if err != nil || len(cmds) != 2 {
		t.Fatalf("Parse = %d commands, %v", len(cmds), err)
	}
	if &cmds[0].Raw[0] != &buf[0] || string(cmds[0].Raw) != in[:20] {
		t.Fatalf("multibulk Raw %q is not the read buffer's bytes", cmds[0].Raw)
	}
	if string(cmds[1].Raw) != in[:20] {
		t.Fatalf("inline Raw %q, want %q", cmds[1].Raw, in[:20])
	}
}

// TestRequestParserLargeBulk: a large bulk is read into a buffer sized from
// its declared length (one allocation for 100 KB), and a declared length
// that is a lie costs at most a bounded step before the bytes come.
func TestRequestParserLargeBulk(t *testing.T) {
	value := bytes.Repeat([]byte("v"), 100<<10)
	in := AppendCommand(nil, []byte("SET"), []byte("k"), value)
	var p RequestParser
	var cmds []Command
	var err error
	sizes := map[int]bool{}
	for data := in; len(data) > 0; {
		buf := p.ReadBuffer()
		sizes[cap(p.buf)] = true
		n := copy(buf[:min(len(buf), 4096)], data)
		data = data[n:]
		if cmds, err = p.Parse(n, RequestLimits{}, cmds[:0]); err != nil {
			t.Fatal(err)
		}
	}
	if len(cmds) != 1 || !bytes.Equal(cmds[0].Args[2], value) {
		t.Fatalf("got %d commands", len(cmds))
	}
	if len(sizes) != 2 || !sizes[readBufSize] || !sizes[len(in)] {
		t.Fatalf("buffer sizes %v, want the pooled one, then exactly the command's %d bytes", sizes, len(in))
	}

	var liar RequestParser
	n := copy(liar.ReadBuffer(), "*1\r\n$536870912\r\nxx")
	if _, err := liar.Parse(n, RequestLimits{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(liar.ReadBuffer()) + liar.end; got > 2<<20 {
		t.Fatalf("a 512 MB declaration with 2 bytes sent made a %d byte buffer", got)
	}
}

// TestRequestParserGathersLargeCommands: told what the socket holds
// (ReadBufferFor), the parser sizes its buffer for a pipeline of large
// commands, up to gatherMax, so that one read serves them as one batch;
// without the count, each comes alone. Every command arrives intact.
func TestRequestParserGathersLargeCommands(t *testing.T) {
	value := bytes.Repeat([]byte("v"), 100<<10)
	one := AppendCommand(nil, []byte("SET"), []byte("k"), value)
	for _, tc := range []struct {
		commands   int
		told       bool
		maxBatches int
	}{
		{8, true, 1},  // 800 KB: the first read's 16 KB, then the rest at once
		{30, true, 4}, // 3 MB: batches of up to gatherMax
		{8, false, 8}, // without the count: one command a batch
		{1, true, 1},  // nothing behind it
	} {
		in := bytes.Repeat(one, tc.commands)
		var p RequestParser
		var cmds []Command
		var err error
		got, batches, maxBuf := 0, 0, 0
		for data := in; len(data) > 0; {
			var buf []byte
			if tc.told {
				buf = p.ReadBufferFor(len(data))
			} else {
				buf = p.ReadBuffer()
			}
			maxBuf = max(maxBuf, len(p.buf))
			n := copy(buf, data)
			data = data[n:]
			if cmds, err = p.Parse(n, RequestLimits{}, cmds[:0]); err != nil {
				t.Fatal(err)
			}
			for p.Buffered() {
				var more []Command
				if more, err = p.Parse(0, RequestLimits{}, nil); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, more...)
			}
			if len(cmds) > 0 {
				batches++
			}
			for _, c := range cmds {
				if len(c.Args) != 3 || !bytes.Equal(c.Args[2], value) {
					t.Fatalf("%d commands: command %d came damaged", tc.commands, got)
				}
				got++
			}
		}
		if got != tc.commands || batches > tc.maxBatches {
			t.Errorf("%d commands, told %v: %d parsed in %d batches, want %d in at most %d", tc.commands, tc.told, got, batches, tc.commands, tc.maxBatches)
		}
		if tc.told && tc.commands > 1 && batches == tc.commands {
			t.Errorf("%d commands, told: one a batch", tc.commands)
		}
		if maxBuf > gatherMax+len(one) {
			t.Errorf("%d commands: a %d byte buffer, over gatherMax and a command", tc.commands, maxBuf)
		}
	}
}

// TestRequestParserRelease: the buffer goes back when no command is
// partial, and stays while one is.
func TestRequestParserRelease(t *testing.T) {
	var p RequestParser
	n := copy(p.ReadBuffer(), "PING\r\n*1\r\n$4\r\nPI")
	if _, err := p.Parse(n, RequestLimits{}, nil); err != nil {
		t.Fatal(err)
	}
	p.Release()
	if p.buf == nil {
		t.Fatal("released a buffer holding a partial command")
	}
	n = copy(p.ReadBuffer(), "NG\r\n")
	cmds, err := p.Parse(n, RequestLimits{}, nil)
	if err != nil || len(cmds) != 1 || string(cmds[0].Args[0]) != "PING" {
		t.Fatalf("got %q, %v", cmds, err)
	}
	p.Release()
	if p.buf != nil {
		t.Fatal("kept a buffer with nothing partial")
	}
}

// TestRequestParserNoAllocs: steady-state parsing allocates nothing per
// command.
func TestRequestParserNoAllocs(t *testing.T) {
	var in []byte
	for range 100 {
		in = AppendCommandString(in, "SET", "key:1", "value")
		in = AppendCommandString(in, "GET", "key:1")
	}
	var p RequestParser
	var cmds []Command
	run := func() {
		n := copy(p.ReadBuffer(), in)
		var err error
		if cmds, err = p.Parse(n, RequestLimits{}, cmds[:0]); err != nil || len(cmds) != 200 {
			t.Fatalf("%d commands, %v", len(cmds), err)
		}
		p.Release()
	}
	run()
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	if a := testing.AllocsPerRun(100, run); a > 0 {
		t.Fatalf("%v allocations per 200-command batch", a)
	}
}

func TestString2ll(t *testing.T) {
	for _, tc := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true}, {"1", 1, true}, {"-1", -1, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"-9223372036854775808", -1 << 63, true}, {"9223372036854775808", 0, false}, {"", 0, false},
		{"-", 0, false}, {"01", 0, false}, {"-0", 0, false}, {"+1", 0, false}, {"1 ", 0, false},
		{"00000000000000000001", 0, false},
	} {
		n, ok := ParseInt([]byte(tc.in))
		if n != tc.n || ok != tc.ok {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.n, tc.ok)
		}
	}
}

// TestRequestParserStopsAfterReset: with ResetDeauths, Parse returns the
// commands up to a RESET and leaves the rest for the next call, which may
// bring other limits.
func TestRequestParserStopsAfterReset(t *testing.T) {
	var p RequestParser
	lim := RequestLimits{ResetDeauths: true}
	n := copy(p.ReadBuffer(), "PING\r\nRESET\r\n*11\r\n")
	cmds, err := p.Parse(n, lim, nil)
	if err != nil || len(cmds) != 2 || !p.Buffered() {
		t.Fatalf("Parse = %q, %v, buffered %v; want PING and RESET, the rest buffered", cmds, err, p.Buffered())
	}
	lim.AuthRequired = true
	if _, err := p.Parse(0, lim, nil); err == nil || err.(*LimitError).Reply != "-ERR Protocol error: unauthenticated multibulk length\r\n" {
		t.Fatalf("after RESET: %v", err)
	}
}
