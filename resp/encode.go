package resp

import "strconv"

// AppendCommand appends a command, a RESP array of bulk strings, to dst.
func AppendCommand(dst []byte, args ...[]byte) []byte {
	dst = appendHeader(dst, '*', int64(len(args)))
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendCommandString is AppendCommand for string arguments, so callers
// need not convert (and copy) them to byte slices.
func AppendCommandString(dst []byte, args ...string) []byte {
	dst = appendHeader(dst, '*', int64(len(args)))
	for _, a := range args {
		dst = appendHeader(dst, '$', int64(len(a)))
		dst = append(dst, a...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}

// AppendError appends the error reply "-" + msg + "\r\n" to dst. A \r or \n
// in msg would end the line early and desynchronize the client, so each is
// replaced with a space.
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}

// AppendBulk appends b as a bulk string to dst.
func AppendBulk(dst, b []byte) []byte {
	dst = appendHeader(dst, '$', int64(len(b)))
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendNullBulk appends the null reply of protocol version proto to dst:
// "_\r\n" for RESP3, "$-1\r\n" otherwise.
func AppendNullBulk(dst []byte, proto int) []byte {
	if proto >= 3 {
		return append(dst, "_\r\n"...)
	}
	return append(dst, "$-1\r\n"...)
}

// AppendInt appends the integer reply n to dst.
func AppendInt(dst []byte, n int64) []byte {
	return appendHeader(dst, ':', n)
}

// appendHeader appends a type byte, a decimal number and CRLF: the shape of
// integers, lengths and counts alike.
func appendHeader(dst []byte, typ byte, n int64) []byte {
	dst = append(dst, typ)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '\r', '\n')
}
