package resp

// IsCanonicalCommand reports whether raw is a command framed exactly as
// AppendCommand would frame it: "*<n>\r\n" then n "$<len>\r\n<bytes>\r\n",
// lengths in plain decimal (no sign, no leading zero). Client parsers are
// laxer than Redis (redcon accepts "$04"); forwarding such bytes to a shared
// connection would make Redis close it, failing every client's requests.
// Payloads are skipped, not scanned.
func IsCanonicalCommand(raw []byte) bool {
	n, i, ok := canonicalHeader(raw, 0, '*')
	if !ok || n < 1 {
		return false
	}
	for ; n > 0; n-- {
		var l int
		if l, i, ok = canonicalHeader(raw, i, '$'); !ok {
			return false
		}
		if l > len(raw)-i-2 || raw[i+l] != '\r' || raw[i+l+1] != '\n' {
			return false
		}
		i += l + 2
	}
	return i == len(raw)
}

// canonicalHeader reads "<typ><digits>\r\n" at raw[i:].
func canonicalHeader(raw []byte, i int, typ byte) (n, next int, ok bool) {
	if i >= len(raw) || raw[i] != typ {
		return 0, 0, false
	}
	i++
	start := i
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		if i-start >= 18 {
			return 0, 0, false // longer than any real length
		}
		n = n*10 + int(raw[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || (digits > 1 && raw[start] == '0') {
		return 0, 0, false
	}
	if i+1 >= len(raw) || raw[i] != '\r' || raw[i+1] != '\n' {
		return 0, 0, false
	}
	return n, i + 2, true
}
