package resp

import (
	"bytes"
	"math"
	"strconv"
	"sync"
)

// Redis's defaults for the limits a RequestParser enforces.
const (
	DefaultMaxBulkLen     = 512 << 20 // proto-max-bulk-len
	DefaultMaxQueryBuffer = 1 << 30   // client-query-buffer-limit
	DefaultMaxInlineLen   = 64 << 10  // PROTO_INLINE_MAX_SIZE
)

// Redis's limits for a client that must still authenticate
// (networking.c, processMultibulkBuffer).
const (
	unauthMaxCount   = 10
	unauthMaxBulkLen = 16384
)

// maxMultibulkCount is the largest argument count Redis accepts (INT_MAX).
const maxMultibulkCount = math.MaxInt32

// readBufSize is the size of a pooled read buffer (Redis's PROTO_IOBUF_LEN).
const readBufSize = 16 << 10

// growStep bounds how far a buffer grows past what has arrived, so that a
// declared length that is a lie costs at most this much (or twice what was
// sent) before the bytes come.
const growStep = 1 << 20

// gatherMax bounds the buffer ReadBufferFor sizes for bytes the socket
// holds behind a large bulk.
const gatherMax = 1 << 20

// readState is what a RequestParser needs only while it holds bytes: a
// read buffer of readBufSize and the slices a batch's commands are made
// of. It is pooled, so an idle connection holds none of it, and a busy
// one reuses what earlier batches grew.
type readState struct {
	buf     []byte
	big     []byte   // the last buffer grown past buf for a large command, kept for the next (up to maxPooledBig)
	argv    [][]byte // the batch's arguments
	offs    []int    // start and end in buf of each argument of the command so far
	scratch []byte   // re-encoded commands and inline arguments of one Parse
}

// readStates holds readStates between batches.
var readStates = sync.Pool{New: func() any { return &readState{buf: make([]byte, readBufSize)} }}

// Past these, a readState's slices are dropped rather than pooled.
const (
	maxPooledArgs    = 4096
	maxPooledScratch = 64 << 10
	// maxPooledBig bounds the large-command buffer a pooled readState
	// keeps: 100 KB SETs, alone or pipelined (gatherMax), then reuse one
	// buffer instead of allocating and zeroing a new one per batch. Pooled
	// states are shared by all connections and dropped by the GC, so idle
	// connections hold none.
	maxPooledBig = gatherMax
)

// LimitError reports a client request that breaks Redis's framing rules or
// one of the RequestLimits. The connection is to be closed after sending
// Reply.
type LimitError struct {
	// Reply is the RESP error line Redis sends before closing, e.g.
	// "-ERR Protocol error: invalid bulk length\r\n", or "" when Redis
	// closes the connection silently (the query buffer limit).
	Reply string
	// Reason says what was wrong, for the log.
	Reason string
}

func (e *LimitError) Error() string { return "resp: request refused: " + e.Reason }

// Command is one client request: its arguments and its exact bytes.
type Command struct {
	// Raw is the command as a RESP array of bulk strings, ready to forward:
	// the bytes the client sent when they are that already, else the
	// canonical encoding of Args (inline commands, and the CRLFs Redis does
	// not check).
	Raw []byte
	// Args are the arguments, at least one.
	Args [][]byte
}

// RequestLimits are the limits a RequestParser enforces while it parses,
// read for each call so that a change applies to the bytes parsed next.
type RequestLimits struct {
	// MaxBulkLen refuses a declared $len above it (proto-max-bulk-len).
	// 0 means DefaultMaxBulkLen.
	MaxBulkLen int64
	// MaxQueryBuffer closes the client, silently as Redis does, once more
	// than this many bytes of one command have arrived
	// (client-query-buffer-limit). 0 means DefaultMaxQueryBuffer.
	MaxQueryBuffer int64
	// MaxInlineLen refuses an inline command, or a *count or $len line,
	// longer than this without its end. 0 means DefaultMaxInlineLen.
	MaxInlineLen int64
	// AuthRequired applies Redis's limits for a client that has not
	// authenticated: at most 10 arguments and bulks of at most 16384
	// bytes. While it is set, Parse returns one command at a time, so that
	// an AUTH lifts the limits for the commands after it.
	AuthRequired bool
	// ResetDeauths says that a RESET makes the client authenticate again
	// (rproxy's own users): Parse then stops after a RESET, so that the
	// commands after it are parsed under the limits in force after it.
	ResetDeauths bool
}

func (l *RequestLimits) maxBulkLen() int64 {
	if l.MaxBulkLen > 0 {
		return l.MaxBulkLen
	}
	return DefaultMaxBulkLen
}

func (l *RequestLimits) maxQueryBuffer() int64 {
	if l.MaxQueryBuffer > 0 {
		return l.MaxQueryBuffer
	}
	return DefaultMaxQueryBuffer
}

func (l *RequestLimits) maxInlineLen() int64 {
	if l.MaxInlineLen > 0 {
		return l.MaxInlineLen
	}
	return DefaultMaxInlineLen
}

// reqState says what a RequestParser expects next.
type reqState uint8

const (
	rsStart    reqState = iota // the first byte of a command
	rsInline                   // an inline command, up to its \n
	rsCount                    // a *count line, up to the byte after its \r
	rsBulkLen                  // a $len line, up to the byte after its \r
	rsBulkData                 // a bulk payload and the two bytes after it
)

// RequestParser reads client requests as Redis 7.0 does
// (processInlineBuffer and processMultibulkBuffer in networking.c): the
// same framing rules, limits, error replies and close behaviour. It owns
// the connection's read buffer: the caller reads into ReadBuffer and hands
// the count to Parse, which parses only the new bytes (its state survives
// between reads, so no byte is walked twice, however the stream is split)
// and returns the commands completed. Arguments are sub-slices of the read
// buffer; a command's bytes stay where they arrived until it completes.
//
// The zero value is ready to use. It holds no buffer until the first read,
// and Release gives the buffer back between batches.
type RequestParser struct {
	buf      []byte     // st.buf, or a larger buffer of the parser's own
	st       *readState // nil while the parser holds no bytes
	end      int        // buf[:end] holds bytes read
	pos      int        // the next byte to parse
	cmdStart int        // the start of the command being parsed
	state    reqState
	count    int64 // arguments still to come
	bulk     int64 // the payload length of the bulk being read
	scan     int   // where the search for a line end resumes
	lax      bool  // the command has CRLFs Redis does not check: re-encode
	steps    int64 // bytes and arguments walked, for tests of the cost
	more     bool  // Parse stopped after one command with bytes left to parse
	err      *LimitError
}

// ReadBuffer returns where the next read goes: the free space after the
// bytes already read, at least one byte. It allocates the buffer on first
// use, moves a partial command to the buffer's start when that frees
// space, and sizes the buffer for a large bulk from its declared length,
// in bounded steps. Commands returned by Parse are invalid after it.
func (p *RequestParser) ReadBuffer() []byte { return p.ReadBufferFor(0) }

// ReadBufferFor is ReadBuffer for a caller that knows how many bytes the
// socket holds beyond those read (unread; 0 if unknown, or none). While a
// large bulk is being read, the buffer is then sized for those bytes too
// (up to gatherMax): a pipeline of large commands is read, and served, as
// one batch rather than one command a batch. The count is the kernel's,
// not the client's word.
func (p *RequestParser) ReadBufferFor(unread int) []byte {
	if p.cmdStart == p.end {
		// Nothing partial (start state, or ignored bytes): start over.
		p.pos -= p.cmdStart
		p.scan -= p.cmdStart
		p.cmdStart, p.end = 0, 0
	}
	partial := p.end - p.cmdStart
	want := partial + 1
	gather := 0 // the buffer wanted for the bytes the socket holds
	if p.state == rsBulkData {
		// The rest of this bulk in one read if it can, but never more than
		// twice what has arrived, or a step past it, on the client's word.
		want = p.pos - p.cmdStart + int(p.bulk) + 2
		want = max(min(want, max(2*partial, partial+growStep)), partial+1)
		if unread > 0 {
			gather = min(partial+unread, gatherMax)
			want = max(want, gather)
		}
	}
	switch {
	case p.buf == nil:
		p.alloc(want)
	case p.end < len(p.buf) && (p.state == rsBulkData && len(p.buf)-p.cmdStart >= gather || len(p.buf)-p.cmdStart >= want):
		// Room after what has arrived: a bulk's buffer grows once full
		// (or once short of what the socket holds).
	case want <= len(p.buf) && (partial <= len(p.buf)/2 || p.cmdStart >= len(p.buf)/2) && !(len(p.buf) > readBufSize && want <= readBufSize/2):
		p.shift(p.buf)
	default:
		old := p.buf
		size := want
		if p.state != rsBulkData {
			size = max(want, 2*partial)
		}
		p.alloc(size)
		p.shift(old)
	}
	return p.buf[p.end:]
}

// alloc sets buf to a fresh buffer of at least n bytes (a pooled one when
// that is big enough). The caller copies what is to be kept.
func (p *RequestParser) alloc(n int) {
	if p.st == nil {
		p.st = readStates.Get().(*readState)
	}
	if n <= readBufSize {
		p.buf = p.st.buf
		return
	}
	if cap(p.st.big) >= n {
		p.buf = p.st.big[:cap(p.st.big)]
		return
	}
	p.buf = make([]byte, n)
	if n <= maxPooledBig {
		p.st.big = p.buf
	}
}

// shift moves the partial command from old[cmdStart:end] to the start of
// buf, adjusting every offset.
func (p *RequestParser) shift(old []byte) {
	d := p.cmdStart
	p.steps += int64(copy(p.buf, old[d:p.end]))
	p.end -= d
	p.pos -= d
	p.scan -= d
	p.cmdStart = 0
	for i := range p.st.offs {
		p.st.offs[i] -= d
	}
}

// Release gives the read buffer back when it holds no partial command, so
// that an idle connection holds none. Commands returned by Parse are
// invalid after it.
func (p *RequestParser) Release() {
	if p.st == nil || p.cmdStart != p.end {
		return
	}
	st := p.st
	clear(st.argv)
	st.argv, st.offs, st.scratch = st.argv[:0], st.offs[:0], st.scratch[:0]
	if cap(st.argv) > maxPooledArgs || cap(st.offs) > 2*maxPooledArgs || cap(st.scratch) > maxPooledScratch {
		st.argv, st.offs, st.scratch = nil, nil, nil
	}
	readStates.Put(st)
	p.st, p.buf = nil, nil
	p.pos, p.scan, p.cmdStart, p.end = 0, 0, 0, 0
}

// Holding reports whether the parser holds a read buffer: from
// ReadBuffer until a Release with nothing partial.
func (p *RequestParser) Holding() bool { return p.st != nil }

// Buffered reports whether bytes read are still to be parsed: Parse(0, ...)
// goes on with them, after a Parse that stopped early (at one command
// because AuthRequired was set, or after a RESET with ResetDeauths).
func (p *RequestParser) Buffered() bool { return p.more && p.err == nil }

// Steps returns how many bytes and arguments the parser has walked so far:
// a measure of its work, for tests that bound the cost of an input.
func (p *RequestParser) Steps() int64 { return p.steps }

// Parse takes n more bytes, read into the slice ReadBuffer returned, and
// appends the commands they complete to cmds. On a *LimitError the
// commands before the fault are returned with it; the connection is then
// to be closed after writing their replies and the error's Reply, and
// later calls return the same error.
func (p *RequestParser) Parse(n int, lim RequestLimits, cmds []Command) ([]Command, error) {
	if p.err != nil {
		return cmds, p.err
	}
	p.end += n
	p.more = false
	st := p.st
	if st == nil {
		return cmds, nil // nothing read since Release
	}
	st.scratch = st.scratch[:0]
	clear(st.argv)
	st.argv = st.argv[:0]
	maxQuery := lim.maxQueryBuffer()
	maxInline := lim.maxInlineLen()
loop:
	for p.pos < p.end {
		switch p.state {
		case rsStart:
			p.cmdStart, p.scan, p.lax = p.pos, p.pos, false
			p.steps++
			if p.buf[p.pos] == '*' {
				p.state = rsCount
			} else {
				p.state = rsInline
			}

		case rsInline:
			i := bytes.IndexByte(p.buf[p.scan:p.end], '\n')
			if i < 0 {
				p.steps += int64(p.end - p.scan)
				p.scan = p.end
				if err := p.checkLine(int64(p.end-p.cmdStart), int64(p.end-p.cmdStart), maxInline, maxQuery); err != nil {
					return cmds, err
				}
				break loop
			}
			nl := p.scan + i
			p.steps += int64(i + 1)
			if err := p.checkLine(int64(nl-p.cmdStart), int64(nl+1-p.cmdStart), maxInline, maxQuery); err != nil {
				return cmds, err
			}
			line := p.buf[p.cmdStart:nl]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			p.pos = nl + 1
			p.state = rsStart
			first := len(st.argv)
			var ok bool
			if st.scratch, st.argv, ok = splitArgs(st.scratch, st.argv, line); !ok {
				return cmds, p.fail("-ERR Protocol error: unbalanced quotes in request\r\n", "unbalanced quotes in inline request")
			}
			p.cmdStart = p.pos
			if len(st.argv) == first {
				continue // an empty line: ignored
			}
			p.steps += int64(len(st.argv) - first)
			args := st.argv[first:len(st.argv):len(st.argv)]
			rawStart := len(st.scratch)
			st.scratch = AppendCommand(st.scratch, args...)
			cmds = append(cmds, Command{Raw: st.scratch[rawStart:len(st.scratch):len(st.scratch)], Args: args})
			if lim.AuthRequired || lim.ResetDeauths && isReset(args[0]) {
				p.more = p.pos < p.end
				return cmds, nil
			}

		case rsCount, rsBulkLen:
			i := bytes.IndexByte(p.buf[p.scan:p.end], '\r')
			if i < 0 {
				p.steps += int64(p.end - p.scan)
				p.scan = p.end
			} else {
				p.steps += int64(i)
				p.scan += i // found again at once by the next call
			}
			// Redis refuses a line longer than the inline limit before its \r;
			// judged on the bytes before the \r, so that how the stream is
			// split never changes the outcome.
			waiting := i < 0 || p.scan+1 >= p.end
			if err := p.checkHeader(maxInline, maxQuery, waiting); err != nil {
				return cmds, err
			}
			if waiting {
				break loop // no \r yet, or no byte after it: Redis waits for both
			}
			cr := p.scan
			p.steps += 2
			if p.buf[cr+1] != '\n' {
				p.lax = true // Redis skips the byte after \r unchecked
			}
			if int64(cr+2-p.cmdStart) > maxQuery {
				return cmds, p.fail("", "query buffer limit exceeded")
			}
			if err := p.header(cr, lim); err != nil {
				return cmds, err
			}

		case rsBulkData:
			next := p.pos + int(p.bulk) + 2
			p.steps++
			if next > p.end {
				if int64(p.end-p.cmdStart) > maxQuery {
					return cmds, p.fail("", "query buffer limit exceeded")
				}
				break loop // the payload is not walked: wait for the rest
			}
			if p.buf[next-2] != '\r' || p.buf[next-1] != '\n' {
				p.lax = true // Redis skips the two bytes unchecked
			}
			st.offs = append(st.offs, p.pos, next-2)
			p.pos = next
			p.count--
			if p.count > 0 {
				p.state, p.scan = rsBulkLen, p.pos
				continue
			}
			if int64(p.pos-p.cmdStart) > maxQuery {
				return cmds, p.fail("", "query buffer limit exceeded")
			}
			cmds = append(cmds, p.complete())
			if lim.AuthRequired || lim.ResetDeauths && isReset(cmds[len(cmds)-1].Args[0]) {
				p.more = p.pos < p.end
				return cmds, nil
			}
		}
	}
	if p.state != rsStart && int64(p.end-p.cmdStart) > maxQuery {
		// A command waiting for its next argument.
		return cmds, p.fail("", "query buffer limit exceeded")
	}
	return cmds, nil
}

// checkLine enforces the inline and query limits on an inline command of
// lineLen bytes before its \n (so far), cmdLen bytes in all: which breaks
// first follows from which is lower, the inline limit winning a tie.
func (p *RequestParser) checkLine(lineLen, cmdLen, maxInline, maxQuery int64) error {
	if lineLen > maxInline && maxInline <= maxQuery {
		return p.fail("-ERR Protocol error: too big inline request\r\n", "inline request longer than "+strconv.FormatInt(maxInline, 10)+" bytes")
	}
	if cmdLen > maxQuery {
		return p.fail("", "query buffer limit exceeded")
	}
	return nil
}

// checkHeader enforces the limits on the *count or $len line being read,
// up to scan (its \r, or what has arrived): the line's bytes before its \r
// against the inline limit and, while waiting for the rest, the command's
// bytes against the query limit, whichever a byte breaks first.
func (p *RequestParser) checkHeader(maxInline, maxQuery int64, waiting bool) error {
	lineStart := p.cmdStart
	if p.state == rsBulkLen {
		lineStart = p.pos
	}
	if int64(p.scan-lineStart) > maxInline && int64(lineStart-p.cmdStart)+maxInline <= maxQuery {
		if p.state == rsCount {
			return p.fail("-ERR Protocol error: too big mbulk count string\r\n", "multibulk count line longer than "+strconv.FormatInt(maxInline, 10)+" bytes")
		}
		return p.fail("-ERR Protocol error: too big bulk count string\r\n", "bulk length line longer than "+strconv.FormatInt(maxInline, 10)+" bytes")
	}
	if waiting && int64(p.end-p.cmdStart) > maxQuery {
		return p.fail("", "query buffer limit exceeded")
	}
	return nil
}

// header reads the *count or $len line from pos up to the \r at cr, as
// Redis does (string2ll; the byte after the \r is skipped unchecked).
func (p *RequestParser) header(cr int, lim RequestLimits) error {
	if p.state == rsCount {
		ll, ok := ParseInt(p.buf[p.pos+1 : cr])
		switch {
		case !ok || ll > maxMultibulkCount:
			return p.fail("-ERR Protocol error: invalid multibulk length\r\n", "invalid multibulk count")
		case ll > unauthMaxCount && lim.AuthRequired:
			return p.fail("-ERR Protocol error: unauthenticated multibulk length\r\n", "multibulk count above 10 before authentication")
		}
		p.pos = cr + 2
		if ll <= 0 {
			// Redis ignores an empty or negative count: no reply.
			p.state, p.cmdStart = rsStart, p.pos
			return nil
		}
		p.count = ll
		p.st.offs = p.st.offs[:0]
		p.state, p.scan = rsBulkLen, p.pos
		return nil
	}
	if c := p.buf[p.pos]; c != '$' {
		return p.fail(expectedDollar(c), "expected '$'")
	}
	ll, ok := ParseInt(p.buf[p.pos+1 : cr])
	switch {
	case !ok || ll < 0 || ll > lim.maxBulkLen():
		return p.fail("-ERR Protocol error: invalid bulk length\r\n", "invalid bulk length (or above proto-max-bulk-len "+strconv.FormatInt(lim.maxBulkLen(), 10)+")")
	case ll > unauthMaxBulkLen && lim.AuthRequired:
		return p.fail("-ERR Protocol error: unauthenticated bulk length\r\n", "bulk longer than 16384 bytes before authentication")
	}
	p.pos = cr + 2
	p.bulk = ll
	p.state = rsBulkData
	return nil
}

// expectedDollar is Redis's reply to a bulk header that does not start
// with '$' (addReplyErrorFormat: a NUL ends the text, CR and LF become
// spaces).
func expectedDollar(c byte) string {
	msg := "-ERR Protocol error: expected '$', got '"
	switch c {
	case 0:
		return msg + "\r\n"
	case '\r', '\n':
		c = ' '
	}
	return msg + string(c) + "'\r\n"
}

// complete makes the command whose arguments are in offs, from cmdStart to
// pos, and starts the next.
func (p *RequestParser) complete() Command {
	st := p.st
	first := len(st.argv)
	for i := 0; i < len(st.offs); i += 2 {
		st.argv = append(st.argv, p.buf[st.offs[i]:st.offs[i+1]:st.offs[i+1]])
	}
	p.steps += int64(len(st.offs) / 2)
	st.offs = st.offs[:0]
	args := st.argv[first:len(st.argv):len(st.argv)]
	raw := p.buf[p.cmdStart:p.pos:p.pos]
	if p.lax {
		start := len(st.scratch)
		st.scratch = AppendCommand(st.scratch, args...)
		raw = st.scratch[start:len(st.scratch):len(st.scratch)]
	}
	p.state, p.cmdStart, p.scan = rsStart, p.pos, p.pos
	return Command{Raw: raw, Args: args}
}

func (p *RequestParser) fail(reply, reason string) error {
	p.err = &LimitError{Reply: reply, Reason: reason}
	return p.err
}

// isReset reports whether name is RESET, in any case.
func isReset(name []byte) bool {
	return len(name) == 5 && bytes.EqualFold(name, []byte("reset"))
}

// ParseInt reads an integer argument as Redis does (string2ll in util.c,
// behind getLongLongFromObject): a decimal int64 with an optional '-', no
// '+', no space, no leading zeros (but "0"), at most 20 bytes. What
// strconv accepts and Redis refuses ("+5", "05") must be refused where
// rproxy answers for Redis.
func ParseInt(s []byte) (int64, bool) {
	if len(s) == 0 || len(s) >= 21 {
		return 0, false
	}
	if len(s) == 1 && s[0] == '0' {
		return 0, true
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
		if len(s) == 0 {
			return 0, false
		}
	}
	if s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		if v > math.MaxUint64-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// splitArgs splits an inline command line as Redis's sdssplitargs does
// (quotes, "\x41" and backslash escapes in double quotes, \' in single
// quotes; the line ends at a NUL, as a C string does), appending each
// argument's bytes to scratch and the argument to argv. ok is false for
// unbalanced quotes.
func splitArgs(scratch []byte, argv [][]byte, line []byte) ([]byte, [][]byte, bool) {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	at := func(i int) byte { // the C string's byte i, NUL past the end
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i >= len(line) {
			return scratch, argv, true
		}
		start := len(scratch)
		inq, insq, done := false, false, false
		for !done {
			c := at(i)
			switch {
			case inq:
				switch {
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					scratch = append(scratch, hexVal(at(i+2))<<4|hexVal(at(i+3)))
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
					e := at(i)
					switch e {
					case 'n':
						e = '\n'
					case 'r':
						e = '\r'
					case 't':
						e = '\t'
					case 'b':
						e = '\b'
					case 'a':
						e = '\a'
					}
					scratch = append(scratch, e)
				case c == '"':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return scratch, argv, false
					}
					done = true
				case c == 0:
					return scratch, argv, false
				default:
					scratch = append(scratch, c)
				}
			case insq:
				switch {
				case c == '\\' && at(i+1) == '\'':
					i++
					scratch = append(scratch, '\'')
				case c == '\'':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return scratch, argv, false
					}
					done = true
				case c == 0:
					return scratch, argv, false
				default:
					scratch = append(scratch, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					scratch = append(scratch, c)
				}
			}
			if i < len(line) {
				i++
			}
		}
		argv = append(argv, scratch[start:len(scratch):len(scratch)])
	}
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexVal(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
