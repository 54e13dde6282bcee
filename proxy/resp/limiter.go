package resp

import (
	"bytes"
	"math"
	"strconv"
)

// LimitError (request.go) reports a request a RequestLimiter refuses.

// limiterState says what a RequestLimiter expects next.
type limiterState uint8

const (
	lsStart     limiterState = iota // the first byte of a command
	lsInline                        // the rest of an inline command, up to \n
	lsHeader                        // a *count or $len line, after its type byte
	lsBulkStart                     // the $ that starts the next bulk argument
	lsPayload                       // bulk payload and its CRLF
	lsMalformed                     // framing the server library will refuse
)

// RequestLimiter watches the bytes a client sends, only to enforce size
// limits before the RESP server library buffers an oversized request. It
// follows the framing the library accepts: multibulk commands (*count, then
// count $len bulks) and inline commands (any line not starting with '*').
// Bulk payloads are skipped by count, never scanned.
//
// It does not report protocol errors: on framing the library will refuse
// anyway it stops following the commands and only keeps counting bytes
// against MaxQueryBuffer, as a backstop. The zero value enforces Redis's
// default limits.
type RequestLimiter struct {
	// MaxBulkLen refuses a declared $len above it, like Redis's
	// proto-max-bulk-len. 0 means DefaultMaxBulkLen.
	MaxBulkLen int64
	// MaxQueryBuffer refuses a command once more than this many of its
	// bytes have arrived, like Redis's client-query-buffer-limit (which
	// Redis enforces by closing silently). 0 means DefaultMaxQueryBuffer.
	MaxQueryBuffer int64
	// MaxInlineLen refuses an inline command, or a *count or $len line,
	// longer than this without its '\n'. 0 means DefaultMaxInlineLen.
	MaxInlineLen int64

	state    limiterState
	header   byte  // '*' or '$' while in lsHeader
	neg      bool  // the header has a minus sign
	cr       bool  // the header's \r has been seen
	num      int64 // header digits so far, saturating at math.MaxInt64
	lineLen  int64 // bytes of the current inline line or header line
	bulks    int64 // bulk arguments still to come in this command
	skip     int64 // payload and CRLF bytes still to skip
	cmdBytes int64 // bytes of the current command so far
	err      *LimitError
}

// Feed inspects the next bytes read from the client. It returns a
// *LimitError when the stream breaks a limit; the connection is then to be
// closed, and later calls return the same error. Limits are judged per byte,
// so how the stream is split into calls never changes the outcome.
func (l *RequestLimiter) Feed(p []byte) error {
	if l.err != nil {
		return l.err
	}
	i := 0
	for i < len(p) {
		switch l.state {
		case lsStart:
			l.cmdBytes = 0
			if p[i] != '*' {
				l.state = lsInline
				l.lineLen = 0
				continue // the byte is part of the inline line
			}
			l.startHeader('*')
			i++
			if err := l.count(1); err != nil {
				return err
			}

		case lsInline:
			rest := p[i:]
			nl := bytes.IndexByte(rest, '\n')
			seg := len(rest)
			if nl >= 0 {
				seg = nl
			}
			// For an inline command the line is the whole command so far,
			// so which limit breaks first follows from which is lower.
			l.lineLen += int64(seg)
			if maxInline := l.maxInlineLen(); l.lineLen > maxInline && maxInline <= l.maxQueryBuffer() {
				return l.fail("-ERR Protocol error: too big inline request\r\n",
					"inline request longer than "+strconv.FormatInt(maxInline, 10)+" bytes")
			}
			if err := l.count(int64(seg)); err != nil {
				return err
			}
			if nl < 0 {
				return nil
			}
			i += nl + 1
			if err := l.count(1); err != nil {
				return err
			}
			l.state = lsStart

		case lsHeader:
			if err := l.headerByte(p[i]); err != nil {
				return err
			}
			i++
			if err := l.count(1); err != nil {
				return err
			}

		case lsBulkStart:
			if p[i] == '$' {
				l.startHeader('$')
			} else {
				l.state = lsMalformed
			}
			i++
			if err := l.count(1); err != nil {
				return err
			}

		case lsPayload:
			k := int64(len(p) - i)
			if k > l.skip {
				k = l.skip
			}
			i += int(k)
			l.skip -= k
			if err := l.count(k); err != nil {
				return err
			}
			if l.skip == 0 {
				l.endBulk()
			}

		case lsMalformed:
			return l.count(int64(len(p) - i))
		}
	}
	return nil
}

// Reset forgets the stream, including a limit error, keeping the limits.
func (l *RequestLimiter) Reset() {
	*l = RequestLimiter{MaxBulkLen: l.MaxBulkLen, MaxQueryBuffer: l.MaxQueryBuffer, MaxInlineLen: l.MaxInlineLen}
}

func (l *RequestLimiter) startHeader(typ byte) {
	l.state = lsHeader
	l.header = typ
	l.neg, l.cr = false, false
	l.num, l.lineLen = 0, 0
}

// headerByte takes one byte of a *count or $len line after its type byte.
// Parsing is as lax as the laxest server library (empty digits read as 0),
// so that nothing the library accepts is mistaken for malformed.
func (l *RequestLimiter) headerByte(b byte) error {
	l.lineLen++
	switch {
	case l.cr:
		if b != '\n' {
			l.state = lsMalformed
			return nil
		}
		l.endHeader()
		return nil
	case b == '\r':
		l.cr = true
	case b >= '0' && b <= '9':
		if l.num > (math.MaxInt64-9)/10 {
			l.num = math.MaxInt64
		} else {
			l.num = l.num*10 + int64(b-'0')
		}
		if !l.neg && l.header == '$' && l.num > l.maxBulkLen() {
			return l.fail("-ERR Protocol error: invalid bulk length\r\n",
				"bulk length above "+strconv.FormatInt(l.maxBulkLen(), 10)+" (proto-max-bulk-len)")
		}
		if !l.neg && l.header == '*' && l.num > maxMultibulkCount {
			return l.fail("-ERR Protocol error: invalid multibulk length\r\n",
				"multibulk count above "+strconv.Itoa(maxMultibulkCount))
		}
	case b == '-' && l.lineLen == 1:
		l.neg = true
	default:
		l.state = lsMalformed
		return nil
	}
	if maxInline := l.maxInlineLen(); l.lineLen > maxInline {
		if l.header == '*' {
			return l.fail("-ERR Protocol error: too big mbulk count string\r\n",
				"multibulk count line longer than "+strconv.FormatInt(maxInline, 10)+" bytes")
		}
		return l.fail("-ERR Protocol error: too big bulk count string\r\n",
			"bulk length line longer than "+strconv.FormatInt(maxInline, 10)+" bytes")
	}
	return nil
}

func (l *RequestLimiter) endHeader() {
	if l.header == '*' {
		if l.neg || l.num == 0 {
			l.state = lsStart // *0 and *-1 are empty commands
			return
		}
		l.bulks = l.num
		l.state = lsBulkStart
		return
	}
	if l.neg {
		l.state = lsMalformed // no null bulks in requests
		return
	}
	l.skip = l.num + 2 // the payload and its CRLF
	if l.num > math.MaxInt64-2 {
		l.skip = math.MaxInt64 // only with MaxBulkLen near MaxInt64
	}
	l.state = lsPayload
}

func (l *RequestLimiter) endBulk() {
	l.bulks--
	if l.bulks == 0 {
		l.state = lsStart
		return
	}
	l.state = lsBulkStart
}

// count adds n bytes to the current command and checks the query buffer
// limit.
func (l *RequestLimiter) count(n int64) error {
	l.cmdBytes += n
	if l.cmdBytes > l.maxQueryBuffer() {
		return l.fail("", "query buffer limit exceeded")
	}
	return nil
}

func (l *RequestLimiter) fail(reply, reason string) error {
	l.err = &LimitError{Reply: reply, Reason: reason}
	return l.err
}

func (l *RequestLimiter) maxBulkLen() int64 {
	if l.MaxBulkLen > 0 {
		return l.MaxBulkLen
	}
	return DefaultMaxBulkLen
}

func (l *RequestLimiter) maxQueryBuffer() int64 {
	if l.MaxQueryBuffer > 0 {
		return l.MaxQueryBuffer
	}
	return DefaultMaxQueryBuffer
}

func (l *RequestLimiter) maxInlineLen() int64 {
	if l.MaxInlineLen > 0 {
		return l.MaxInlineLen
	}
	return DefaultMaxInlineLen
}
