package policy

// glob is a compiled Redis-style pattern. Matching needs no compilation step
// (the pattern is walked as Redis walks it), so this only keeps the bytes.
type glob []byte

// match reports whether s matches the pattern with Redis's KEYS/SCAN MATCH
// rules (stringmatchlen in util.c, case-sensitive): '*' any run of bytes,
// '?' one byte, "[abc]", "[^a]", "[a-z]" a set of bytes (an unterminated
// set runs to the end of the pattern), '\' escapes the next byte. One
// deliberate difference: the empty string matches a pattern of only '*'s
// (Redis's loop never runs for it, though KEYS * special-cases it anyway).
func (g glob) match(s []byte) bool {
	if len(s) == 0 {
		for _, c := range g {
			if c != '*' {
				return false
			}
		}
		return true
	}
	var skipLonger bool
	return globMatch(g, s, &skipLonger)
}

// globMatch is stringmatchlen_impl. skipLonger is Redis's fix for
// exponential backtracking: once the rest of the pattern after a '*' failed
// at every later offset, no earlier '*' can help by matching more, so every
// level gives up. That bounds the work to O(len(p)*len(s)). Recursion depth
// is the number of '*' runs in the pattern, which the operator controls.
func globMatch(p, s []byte, skipLonger *bool) bool {
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if globMatch(p[1:], s, skipLonger) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			matched := false
			for {
				if len(p) == 0 {
					break // unterminated: the set runs to the pattern's end
				}
				if p[0] == '\\' && len(p) >= 2 {
					p = p[1:]
					if p[0] == s[0] {
						matched = true
					}
				} else if p[0] == ']' {
					break
				} else if len(p) >= 3 && p[1] == '-' {
					lo, hi := p[0], p[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					p = p[2:]
					if s[0] >= lo && s[0] <= hi {
						matched = true
					}
				} else if p[0] == s[0] {
					matched = true
				}
				p = p[1:]
			}
			if not {
				matched = !matched
			}
			if !matched {
				return false
			}
			s = s[1:]
			if len(p) == 0 {
				// Redis backs up one byte so its common advance lands on
				// the end; here the pattern is simply done.
				return len(s) == 0
			}
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}
