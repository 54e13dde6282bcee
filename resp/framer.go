package resp

import (
	"bytes"
	"fmt"
	"math"
)

// MaxLength is the largest length or element count a Framer accepts in a
// header. Real replies are far smaller; anything larger means the stream is
// corrupt, and refusing it early keeps the arithmetic clear of overflow.
const MaxLength = 1 << 40

// DefaultMaxDepth is the nesting limit a Framer uses when MaxDepth is 0.
// Redis nests as deep as a Lua script's reply goes before Lua's own stack
// limit stops it (about 8,000 levels for a table that holds itself), and
// deeper still from a module; each level costs the sender at least four
// bytes, so the bound is a guard against a corrupt stream, not a budget.
const DefaultMaxDepth = 1 << 16

// frameState says what the framer expects next inside the current reply.
type frameState uint8

const (
	stType      frameState = iota // the type byte that starts a value
	stLength                      // digits of a length or element count
	stLengthLF                    // the \n after a length's \r
	stText                        // simple string, error or double: any bytes up to \r
	stNumber                      // integer or big number: [+-]digits up to \r
	stBoolean                     // t or f, then \r
	stNull                        // nothing, then \r
	stLineLF                      // the \n after a line's \r
	stPayload                     // the payload of a bulk string, bulk error or verbatim string
	stPayloadCR                   // the \r after a payload
	stPayloadLF                   // the \n after a payload
)

// frame is an open aggregate on the framer's stack.
type frame struct {
	// remaining counts the elements still to come (2 per map or attribute
	// entry).
	remaining int64
	// attribute marks an attribute: when it closes, the value it annotates
	// follows in the same position, so it does not count as an element of
	// its parent.
	attribute bool
}

// Framer finds the boundaries of RESP2 and RESP3 replies in a byte stream.
// It is fed the stream in whatever chunks arrive, keeps its place between
// calls, and never buffers, copies or rescans reply bytes. The zero value is
// ready to use.
//
// Framing is strict: anything a conforming server would not send is an
// error, because a framing mistake on a proxied connection would hand one
// client another client's reply. Streamed values ($?, *?, ...) are refused;
// Redis never sends them.
type Framer struct {
	// MaxDepth bounds how many aggregates (arrays, maps, sets, pushes,
	// attributes) may enclose one another, counting the outermost. 0 means
	// DefaultMaxDepth.
	MaxDepth int

	state   frameState
	typ     byte   // type byte of the value being read
	kind    byte   // type of the current top-level reply; see Kind
	started bool   // a byte of the current reply has been consumed
	neg     bool   // the length or integer being read is negative
	signed  bool   // the integer being read had a sign byte
	digits  int    // digits of the length being read; 0 or 1 ("seen one") for integers and booleans
	num     uint64 // value of the length or integer digits so far
	payload int64  // payload bytes still to skip
	stack   []frame
	err     error
}

// Next consumes the bytes of p that belong to the current reply. It returns
// how many bytes it consumed and whether the reply is now complete. When done
// is false, n == len(p) and the caller must feed more bytes. When done is
// true, p[n:] begins the next reply and the framer has reset itself for it.
//
// On error n is the offset in p of the offending byte. The error wraps one of
// the package's sentinel errors and is returned again by later calls; the
// framer must be Reset before reuse.
func (f *Framer) Next(p []byte) (n int, done bool, err error) {
	if f.err != nil {
		return 0, false, f.err
	}
	i := 0
	for i < len(p) {
		switch f.state {
		case stType:
			if err := f.begin(p[i]); err != nil {
				return f.fail(i, err, p[i])
			}
			i++

		case stLength:
			b := p[i]
			switch {
			case b >= '0' && b <= '9':
				if f.neg {
					// The only negative length is the -1 of a null.
					if f.digits > 0 || b != '1' {
						return f.fail(i, ErrNegativeLength, b)
					}
				} else if f.digits > 0 && f.num == 0 {
					return f.fail(i, ErrBadLength, b) // leading zero
				}
				f.num = f.num*10 + uint64(b-'0')
				f.digits++
				if f.num > MaxLength {
					return f.fail(i, ErrLengthOverflow, b)
				}
			case b == '-' && f.digits == 0 && !f.neg:
				if f.typ != '$' && f.typ != '*' {
					return f.fail(i, ErrNegativeLength, b)
				}
				f.neg = true
			case b == '?' && f.digits == 0 && !f.neg:
				return f.fail(i, ErrStreamed, b)
			case b == '\r' && f.digits > 0:
				f.state = stLengthLF
			case b == '\n':
				return f.fail(i, ErrMissingCR, b)
			default:
				return f.fail(i, ErrBadLength, b)
			}
			i++

		case stLengthLF:
			if p[i] != '\n' {
				return f.fail(i, ErrMissingLF, p[i])
			}
			i++
			if f.endHeader() {
				return f.finish(i)
			}

		case stText:
			// Scan with IndexByte: these lines can be long (error messages,
			// status replies) and carry no structure to check.
			rest := p[i:]
			cr := bytes.IndexByte(rest, '\r')
			text := rest
			if cr >= 0 {
				text = rest[:cr]
			}
			if lf := bytes.IndexByte(text, '\n'); lf >= 0 {
				return f.fail(i+lf, ErrMissingCR, '\n')
			}
			if cr < 0 {
				return len(p), false, nil
			}
			i += cr + 1
			f.state = stLineLF

		case stNumber:
			b := p[i]
			switch {
			case b >= '0' && b <= '9':
				if f.typ == ':' {
					// Integers must fit int64; big numbers are unbounded.
					limit := uint64(math.MaxInt64)
					if f.neg {
						limit++
					}
					d := uint64(b - '0')
					if f.num > (limit-d)/10 {
						return f.fail(i, ErrBadInteger, b) // out of int64 range
					}
					f.num = f.num*10 + d
				}
				f.digits = 1
			case (b == '-' || b == '+') && !f.signed && f.digits == 0:
				f.signed = true
				f.neg = b == '-'
			case b == '\r' && f.digits > 0:
				f.state = stLineLF
			case b == '\n':
				return f.fail(i, ErrMissingCR, b)
			default:
				return f.fail(i, ErrBadInteger, b)
			}
			i++

		case stBoolean:
			b := p[i]
			switch {
			case (b == 't' || b == 'f') && f.digits == 0:
				f.digits = 1
			case b == '\r' && f.digits > 0:
				f.state = stLineLF
			case b == '\n':
				return f.fail(i, ErrMissingCR, b)
			default:
				return f.fail(i, ErrBadBoolean, b)
			}
			i++

		case stNull:
			switch b := p[i]; b {
			case '\r':
				f.state = stLineLF
			case '\n':
				return f.fail(i, ErrMissingCR, b)
			default:
				return f.fail(i, ErrBadNull, b)
			}
			i++

		case stLineLF:
			if p[i] != '\n' {
				return f.fail(i, ErrMissingLF, p[i])
			}
			i++
			if f.endValue() {
				return f.finish(i)
			}

		case stPayload:
			// Skip the payload without looking at it: O(1) per call.
			k := int64(len(p) - i)
			if k > f.payload {
				k = f.payload
			}
			i += int(k)
			f.payload -= k
			if f.payload == 0 {
				f.state = stPayloadCR
			}

		case stPayloadCR:
			if p[i] != '\r' {
				return f.fail(i, ErrBulkTerminator, p[i])
			}
			i++
			f.state = stPayloadLF

		case stPayloadLF:
			if p[i] != '\n' {
				return f.fail(i, ErrBulkTerminator, p[i])
			}
			i++
			if f.endValue() {
				return f.finish(i)
			}
		}
	}
	return len(p), false, nil
}

// Kind returns the type byte of the current top-level reply ('+', '-', ':',
// '$', '*', '%', '~', '>', '_', '#', ',', '(', '=', '!') once its first byte
// has been seen, and 0 before. An attribute ('|') that precedes a reply is
// part of that reply; Kind then reports the type of the value after the
// attribute, once that has been seen.
//
// After Next reports a reply done, Kind keeps reporting that reply's type
// until the first byte of the next reply is consumed, so callers can ask
// what they just framed (a push, say).
func (f *Framer) Kind() byte { return f.kind }

// Reset discards all state, including a sticky error, so the framer can
// start on a new stream. It keeps MaxDepth and the stack's memory.
func (f *Framer) Reset() {
	*f = Framer{MaxDepth: f.MaxDepth, stack: f.stack[:0]}
}

func (f *Framer) maxDepth() int {
	if f.MaxDepth > 0 {
		return f.MaxDepth
	}
	return DefaultMaxDepth
}

// begin starts a value with type byte b.
func (f *Framer) begin(b byte) error {
	if !f.started {
		f.started = true
		f.kind = 0
	}
	f.typ = b
	f.neg, f.signed, f.digits, f.num = false, false, 0, 0
	switch b {
	case '+', '-', ',', '(':
		// A big number is digits by the spec, but Redis relays what a Lua
		// script's big_number holds ("123  123"): any text, as a line.
		f.state = stText
	case ':':
		f.state = stNumber
	case '#':
		f.state = stBoolean
	case '_':
		f.state = stNull
	case '$', '=', '!':
		f.state = stLength
	case '*', '%', '~', '>', '|':
		// Checked at the type byte, before the count, so that even an
		// empty or null aggregate cannot sit deeper than allowed.
		if len(f.stack) >= f.maxDepth() {
			return ErrTooDeep
		}
		f.state = stLength
	default:
		return ErrUnknownType
	}
	if len(f.stack) == 0 && b != '|' {
		f.kind = b
	}
	return nil
}

// endHeader acts on a complete length header and reports whether that
// completed the whole reply (a null or an empty aggregate at top level).
func (f *Framer) endHeader() bool {
	n := int64(f.num)
	switch f.typ {
	case '$', '=', '!':
		if f.neg {
			return f.endValue() // $-1: null bulk
		}
		f.payload = n
		f.state = stPayload
		if n == 0 {
			f.state = stPayloadCR
		}
		return false
	}
	if f.neg {
		return f.endValue() // *-1: null array
	}
	if f.typ == '%' || f.typ == '|' {
		n *= 2 // a key and a value per entry
	}
	if n == 0 {
		if f.typ == '|' {
			f.state = stType // an empty attribute: the value follows
			return false
		}
		return f.endValue()
	}
	f.stack = append(f.stack, frame{remaining: n, attribute: f.typ == '|'})
	f.state = stType
	return false
}

// endValue records that a value ended, closing every aggregate that this
// completes, and reports whether the top-level reply is complete.
func (f *Framer) endValue() bool {
	f.state = stType
	for len(f.stack) > 0 {
		top := &f.stack[len(f.stack)-1]
		top.remaining--
		if top.remaining > 0 {
			return false
		}
		attribute := top.attribute
		f.stack = f.stack[:len(f.stack)-1]
		if attribute {
			return false
		}
	}
	return true
}

// finish ends the current reply after n bytes of the current chunk.
func (f *Framer) finish(n int) (int, bool, error) {
	f.started = false
	return n, true, nil
}

// fail makes err sticky, adding where it happened: the value's type byte
// and the offending byte.
func (f *Framer) fail(n int, err error, b byte) (int, bool, error) {
	switch err {
	case ErrUnknownType:
		f.err = fmt.Errorf("%w %q", err, b)
	case ErrTooDeep:
		f.err = fmt.Errorf("%w: %q inside %d aggregates (MaxDepth %d)", err, b, len(f.stack), f.maxDepth())
	default:
		f.err = fmt.Errorf("%w: unexpected %q in %q value", err, b, f.typ)
	}
	return n, false, f.err
}
