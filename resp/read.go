package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// ReadReply reads exactly one complete reply from r and appends its raw
// bytes to dst. It takes from r only the bytes of that reply, so the next
// call starts at the next reply. At a clean end of stream it returns io.EOF;
// if the stream ends inside a reply, io.ErrUnexpectedEOF. On a framing error
// the bytes up to the offending one have been consumed and appended.
//
// It is meant for tests and cold paths: it allocates a Framer per call.
func ReadReply(r *bufio.Reader, dst []byte) ([]byte, error) {
	var f Framer
	started := false
	for {
		if r.Buffered() == 0 {
			if _, err := r.Peek(1); err != nil {
				if started && errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return dst, err
			}
		}
		buf, _ := r.Peek(r.Buffered()) // cannot fail: the bytes are buffered
		n, done, err := f.Next(buf)
		dst = append(dst, buf[:n]...)
		if _, derr := r.Discard(n); derr != nil && err == nil {
			err = derr
		}
		started = true
		if err != nil || done {
			return dst, err
		}
	}
}

// Value is a decoded reply.
type Value struct {
	// Kind is the reply's type byte, e.g. '+' or '*'.
	Kind byte
	// Str holds the payload of simple strings, errors, bulk strings, bulk
	// errors, verbatim strings (including their "txt:" prefix), doubles and
	// big numbers, as text. It aliases the buffer given to Parse.
	Str []byte
	// Int holds integers, and booleans as 1 or 0.
	Int int64
	// Elems holds the elements of arrays, sets and pushes, and the keys and
	// values of maps flattened as key, value, key, value...
	Elems []Value
	// Null is set for $-1, *-1 and _.
	Null bool
}

// Parse decodes raw, which must hold exactly one complete reply. Attributes
// are skipped. It is meant for cold paths such as reading a COMMAND reply;
// it allocates for aggregates and is as strict as Framer, which it uses to
// validate raw before decoding.
func Parse(raw []byte) (Value, error) {
	var f Framer
	n, done, err := f.Next(raw)
	if err != nil {
		return Value{}, err
	}
	if !done {
		return Value{}, ErrIncomplete
	}
	if n != len(raw) {
		return Value{}, fmt.Errorf("%w: %d bytes", ErrTrailingData, len(raw)-n)
	}
	v, _, err := decode(raw, 0)
	return v, err
}

// decode decodes the value at raw[pos:], returning it and the offset after
// it. raw has been validated by a Framer; the bounds checks only guarantee
// that a bug cannot become a panic.
func decode(raw []byte, pos int) (Value, int, error) {
	for {
		if pos >= len(raw) {
			return Value{}, pos, ErrIncomplete
		}
		typ := raw[pos]
		line, next, ok := readLine(raw, pos+1)
		if !ok {
			return Value{}, pos, ErrIncomplete
		}
		switch typ {
		case '|':
			// Attributes annotate the value after them; skip them.
			n := 2 * parseLength(line)
			var err error
			for i := int64(0); i < n; i++ {
				if _, next, err = decode(raw, next); err != nil {
					return Value{}, next, err
				}
			}
			pos = next
			continue
		case '+', '-', ',', '(':
			return Value{Kind: typ, Str: line}, next, nil
		case ':':
			n, err := strconv.ParseInt(string(line), 10, 64)
			return Value{Kind: typ, Int: n}, next, err
		case '#':
			v := Value{Kind: typ}
			if len(line) > 0 && line[0] == 't' {
				v.Int = 1
			}
			return v, next, nil
		case '_':
			return Value{Kind: typ, Null: true}, next, nil
		case '$', '=', '!':
			n := parseLength(line)
			if n < 0 {
				return Value{Kind: typ, Null: true}, next, nil
			}
			if n > int64(len(raw)-next-2) {
				return Value{}, next, ErrIncomplete
			}
			end := next + int(n)
			return Value{Kind: typ, Str: raw[next:end:end]}, end + 2, nil
		case '*', '%', '~', '>':
			n := parseLength(line)
			if n < 0 {
				return Value{Kind: typ, Null: true}, next, nil
			}
			if typ == '%' {
				n *= 2
			}
			// Every element takes at least 3 bytes, which bounds the
			// allocation by the input rather than by the declared count.
			elems := make([]Value, 0, min(n, int64(len(raw)-next)/3))
			for i := int64(0); i < n; i++ {
				var e Value
				var err error
				if e, next, err = decode(raw, next); err != nil {
					return Value{}, next, err
				}
				elems = append(elems, e)
			}
			return Value{Kind: typ, Elems: elems}, next, nil
		default:
			return Value{}, pos, fmt.Errorf("%w %q", ErrUnknownType, typ)
		}
	}
}

// readLine returns the bytes from raw[pos] up to the next CRLF and the
// offset after the CRLF.
func readLine(raw []byte, pos int) (line []byte, next int, ok bool) {
	for i := pos; i+1 < len(raw); i++ {
		if raw[i] == '\r' && raw[i+1] == '\n' {
			return raw[pos:i:i], i + 2, true
		}
	}
	return nil, pos, false
}

// parseLength parses a validated length: digits, or -1.
func parseLength(b []byte) int64 {
	if len(b) > 0 && b[0] == '-' {
		return -1
	}
	var n int64
	for _, c := range b {
		n = n*10 + int64(c-'0')
	}
	return n
}
