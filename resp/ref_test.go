package resp

import (
	"errors"
	"strconv"
	"testing"
)

// This file holds the reference the Framer is checked against: a plain
// recursive parser over a complete buffer, written independently of the
// Framer's state machine, and drivers that run both over a stream.

// errRefIncomplete marks a stream that ends inside a reply.
var errRefIncomplete = errors.New("incomplete")

// refError is a reference parse failure: a sentinel and the offset of the
// offending byte.
type refError struct {
	at  int
	err error
}

func (e *refError) Error() string { return strconv.Itoa(e.at) + ": " + e.err.Error() }

// refParser parses the complete buffer b.
type refParser struct {
	b        []byte
	maxDepth int
}

func (r *refParser) fail(at int, err error) (int, byte, error) {
	return 0, 0, &refError{at, err}
}

// value parses the value at pos inside depth aggregates and returns its end
// and its type (the annotated value's type for an attribute).
func (r *refParser) value(pos, depth int) (int, byte, error) {
	b := r.b
	for {
		if pos >= len(b) {
			return r.fail(pos, errRefIncomplete)
		}
		t := b[pos]
		switch t {
		case '+', '-', ',', '(':
			for i := pos + 1; i < len(b); i++ {
				switch b[i] {
				case '\n':
					return r.fail(i, ErrMissingCR)
				case '\r':
					end, err := r.lf(i + 1)
					return end, t, err
				}
			}
			return r.fail(len(b), errRefIncomplete)
		case ':':
			i := pos + 1
			if i < len(b) && (b[i] == '+' || b[i] == '-') {
				i++
			}
			start := i
			for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
				if t == ':' {
					if _, err := strconv.ParseInt(string(b[pos+1:i+1]), 10, 64); err != nil {
						return r.fail(i, ErrBadInteger)
					}
				}
			}
			if i >= len(b) {
				return r.fail(i, errRefIncomplete)
			}
			if b[i] == '\n' {
				return r.fail(i, ErrMissingCR)
			}
			if b[i] != '\r' || i == start {
				return r.fail(i, ErrBadInteger)
			}
			end, err := r.lf(i + 1)
			return end, t, err
		case '#', '_':
			i := pos + 1
			if t == '#' {
				if i >= len(b) {
					return r.fail(i, errRefIncomplete)
				}
				if b[i] == '\n' {
					return r.fail(i, ErrMissingCR)
				}
				if b[i] != 't' && b[i] != 'f' {
					return r.fail(i, ErrBadBoolean)
				}
				i++
			}
			if i >= len(b) {
				return r.fail(i, errRefIncomplete)
			}
			switch {
			case b[i] == '\n':
				return r.fail(i, ErrMissingCR)
			case b[i] != '\r' && t == '#':
				return r.fail(i, ErrBadBoolean)
			case b[i] != '\r':
				return r.fail(i, ErrBadNull)
			}
			end, err := r.lf(i + 1)
			return end, t, err
		case '$', '=', '!':
			n, next, err := r.length(pos+1, t)
			if err != nil {
				return 0, 0, err
			}
			if n < 0 {
				return next, t, nil
			}
			end := next + int(n)
			for _, want := range []byte{'\r', '\n'} {
				if end >= len(b) {
					return r.fail(len(b), errRefIncomplete)
				}
				if b[end] != want {
					return r.fail(end, ErrBulkTerminator)
				}
				end++
			}
			return end, t, nil
		case '*', '%', '~', '>', '|':
			if depth >= r.maxDepth {
				return r.fail(pos, ErrTooDeep)
			}
			n, next, err := r.length(pos+1, t)
			if err != nil {
				return 0, 0, err
			}
			if t == '%' || t == '|' {
				n *= 2
			}
			for i := int64(0); i < n; i++ {
				if next, _, err = r.value(next, depth+1); err != nil {
					return 0, 0, err
				}
			}
			if t == '|' {
				pos = next // the annotated value follows, at the same depth
				continue
			}
			return next, t, nil
		default:
			return r.fail(pos, ErrUnknownType)
		}
	}
}

// length parses the digits of a header starting at pos, through its CRLF.
func (r *refParser) length(pos int, t byte) (int64, int, error) {
	b := r.b
	i := pos
	neg := false
	if i < len(b) && b[i] == '?' {
		_, _, err := r.fail(i, ErrStreamed)
		return 0, 0, err
	}
	if i < len(b) && b[i] == '-' {
		if t != '$' && t != '*' {
			_, _, err := r.fail(i, ErrNegativeLength)
			return 0, 0, err
		}
		neg = true
		i++
	}
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		var err error
		switch v, _ := strconv.ParseInt(string(b[start:i+1]), 10, 64); {
		case neg && (i > start || b[i] != '1'):
			err = ErrNegativeLength
		case i > start && b[start] == '0':
			err = ErrBadLength
		case v > MaxLength:
			err = ErrLengthOverflow
		}
		if err != nil {
			_, _, err = r.fail(i, err)
			return 0, 0, err
		}
	}
	var err error
	switch {
	case i >= len(b):
		err = errRefIncomplete
	case b[i] == '\n':
		err = ErrMissingCR
	case b[i] != '\r' || i == start:
		err = ErrBadLength
	}
	if err != nil {
		_, _, err = r.fail(i, err)
		return 0, 0, err
	}
	next, err := r.lf(i + 1)
	if err != nil {
		return 0, 0, err
	}
	if neg {
		return -1, next, nil
	}
	n, _ := strconv.ParseInt(string(b[start:i]), 10, 64)
	return n, next, nil
}

// lf checks for the \n at pos that ends a line.
func (r *refParser) lf(pos int) (int, error) {
	if pos >= len(r.b) {
		_, _, err := r.fail(pos, errRefIncomplete)
		return 0, err
	}
	if r.b[pos] != '\n' {
		_, _, err := r.fail(pos, ErrMissingLF)
		return 0, err
	}
	return pos + 1, nil
}

// streamResult is what framing a whole stream found.
type streamResult struct {
	ends  []int  // offsets just past each complete reply
	kinds []byte // Kind of each complete reply
	errAt int    // offset of the offending byte, or -1
	err   error  // the framing error, or nil
}

// refFrames frames data with the reference parser.
func refFrames(data []byte, maxDepth int) streamResult {
	r := refParser{b: data, maxDepth: maxDepth}
	res := streamResult{errAt: -1}
	for pos := 0; pos < len(data); {
		end, kind, err := r.value(pos, 0)
		if err != nil {
			var re *refError
			errors.As(err, &re)
			if re.err != errRefIncomplete {
				res.errAt, res.err = re.at, re.err
			}
			return res
		}
		res.ends = append(res.ends, end)
		res.kinds = append(res.kinds, kind)
		pos = end
	}
	return res
}

// framerFrames frames data with f, feeding it in chunks whose sizes cycle
// through sizes (the whole of data at once when sizes is empty), and checks
// the Next contract on the way.
func framerFrames(t testing.TB, f *Framer, data []byte, sizes []int) streamResult {
	t.Helper()
	res := streamResult{errAt: -1}
	off := 0
	for k := 0; off < len(data); k++ {
		size := len(data) - off
		if len(sizes) > 0 {
			size = min(sizes[k%len(sizes)], size)
		}
		chunk := data[off : off+size]
		for len(chunk) > 0 {
			n, done, err := f.Next(chunk)
			if n < 0 || n > len(chunk) {
				t.Fatalf("Next consumed %d of %d bytes", n, len(chunk))
			}
			if err != nil {
				if done {
					t.Fatalf("Next reported done with error %v", err)
				}
				res.errAt, res.err = off+n, err
				if _, _, again := f.Next(chunk[n:]); again != err {
					t.Fatalf("error not sticky: %v, then %v", err, again)
				}
				return res
			}
			if !done && n != len(chunk) {
				t.Fatalf("Next consumed %d of %d bytes without completing a reply", n, len(chunk))
			}
			if done && n == 0 {
				t.Fatalf("Next completed a reply consuming no bytes")
			}
			off += n
			chunk = chunk[n:]
			if done {
				res.ends = append(res.ends, off)
				res.kinds = append(res.kinds, f.Kind())
			}
		}
	}
	return res
}

// sameResult reports how got (from the Framer) differs from want, or "".
func sameResult(got, want streamResult) string {
	if !equalInts(got.ends, want.ends) {
		return "ends " + fmtInts(got.ends) + ", want " + fmtInts(want.ends)
	}
	if string(got.kinds) != string(want.kinds) {
		return "kinds " + strconv.Quote(string(got.kinds)) + ", want " + strconv.Quote(string(want.kinds))
	}
	if (got.err == nil) != (want.err == nil) || got.err != nil && !errors.Is(got.err, want.err) {
		return "error " + errString(got.err) + ", want " + errString(want.err)
	}
	if got.errAt != want.errAt {
		return "error at " + strconv.Itoa(got.errAt) + ", want at " + strconv.Itoa(want.errAt) + " (" + errString(got.err) + ")"
	}
	return ""
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func fmtInts(a []int) string {
	s := "["
	for i, v := range a {
		if i > 0 {
			s += " "
		}
		s += strconv.Itoa(v)
	}
	return s + "]"
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
