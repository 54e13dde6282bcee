package resp

import "strconv"

// Header reads the header of a length-prefixed reply of type typ ('$', '=',
// '*', ...) at the start of r: its length and the bytes after the header
// line. ok is false for another type, a malformed or negative (null)
// length.
func Header(r []byte, typ byte) (n int, rest []byte, ok bool) {
	if len(r) < 4 || r[0] != typ {
		return 0, nil, false
	}
	for i := 1; i+1 < len(r); i++ {
		if r[i] == '\r' && r[i+1] == '\n' {
			n, err := strconv.Atoi(string(r[1:i]))
			if err != nil || n < 0 {
				return 0, nil, false
			}
			return n, r[i+2:], true
		}
	}
	return 0, nil, false
}

// Payload returns the payload of a complete bulk reply of type typ ('$'
// or '='): r must be exactly one such reply.
func Payload(r []byte, typ byte) ([]byte, bool) {
	n, rest, ok := Header(r, typ)
	if !ok || len(rest) != n+2 {
		return nil, false
	}
	return rest[:n], true
}

// Int returns the value of an integer reply ":<n>\r\n" (r exactly one).
func Int(r []byte) (int64, bool) {
	if len(r) < 4 || r[0] != ':' || r[len(r)-2] != '\r' || r[len(r)-1] != '\n' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(r[1:len(r)-2]), 10, 64)
	return n, err == nil
}

// IsNull reports a null reply in RESP2 ("$-1", "*-1") or RESP3 ("_").
func IsNull(r []byte) bool {
	s := string(r)
	return s == "$-1\r\n" || s == "_\r\n" || s == "*-1\r\n"
}
