package command

import (
	"bytes"

	"github.com/rproxy/rproxy/resp"
)

// Keys appends to dst the key arguments of args (args[0] is the command
// name) for the command info describes, and reports whether the list is
// complete. Fixed positions come from COMMAND's first/last/step; commands
// with movable keys are parsed for the ones the proxy needs (scripts,
// functions, *STORE forms, the multi-pop family). ok is false when a
// movable-key command is not parsed here or args are malformed: callers
// that need every key (invalidation) must then assume any key.
func Keys(info *Info, args [][]byte, dst [][]byte) (keys [][]byte, ok bool) {
	if info.Has(MovableKeys) {
		return movableKeys(info.Name, args, dst)
	}
	return rangeKeys(info.FirstKey, info.LastKey, info.Step, args, dst)
}

func rangeKeys(first, last, step int, args [][]byte, dst [][]byte) ([][]byte, bool) {
	if first <= 0 {
		return dst, true
	}
	if last < 0 {
		last = len(args) + last
	}
	if step <= 0 {
		step = 1
	}
	if first >= len(args) {
		return dst, false
	}
	for i := first; i <= last && i < len(args); i += step {
		dst = append(dst, args[i])
	}
	return dst, true
}

// movableKeys handles the commands whose keys move with their arguments.
func movableKeys(name string, args [][]byte, dst [][]byte) ([][]byte, bool) {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return numKeys(args, 2, dst)
	case "zunionstore", "zinterstore", "zdiffstore":
		if len(args) < 2 {
			return dst, false
		}
		return numKeys(args, 2, append(dst, args[1]))
	case "zunion", "zinter", "zdiff", "sintercard", "zintercard", "lmpop", "zmpop":
		return numKeys(args, 1, dst)
	case "blmpop", "bzmpop":
		return numKeys(args, 2, dst)
	case "xread", "xreadgroup":
		// STREAMS key [key ...] id [id ...]: the first half.
		for i := 1; i < len(args); i++ {
			if eqFold(args[i], "streams") {
				n := len(args) - i - 1
				if n == 0 || n%2 != 0 {
					return dst, false
				}
				return append(dst, args[i+1:i+1+n/2]...), true
			}
		}
		return dst, false
	case "sort", "sort_ro", "georadius", "georadiusbymember":
		if len(args) < 2 {
			return dst, false
		}
		dst = append(dst, args[1])
		for i := 2; i+1 < len(args); i++ {
			if eqFold(args[i], "store") || eqFold(args[i], "storedist") {
				dst = append(dst, args[i+1])
				i++
			}
		}
		return dst, true
	case "migrate":
		return migrateKeys(args, dst)
	}
	return dst, false
}

// migrateKeys reads MIGRATE's keys as Redis's migrateGetKeys does: the key
// argument, or with the KEYS option (found after the fixed arguments,
// skipping AUTH's and AUTH2's values) the arguments after it, the key
// argument then being empty.
func migrateKeys(args [][]byte, dst [][]byte) ([][]byte, bool) {
	if len(args) < 6 {
		return dst, false
	}
	for i := 6; i < len(args); i++ {
		switch {
		case eqFold(args[i], "keys"):
			if len(args[3]) > 0 {
				return dst, false // Redis refuses it
			}
			return append(dst, args[i+1:]...), true
		case eqFold(args[i], "auth"):
			i++
		case eqFold(args[i], "auth2"):
			i += 2
		}
	}
	return append(dst, args[3]), true
}

// numKeys reads a key count at args[at] followed by that many keys.
func numKeys(args [][]byte, at int, dst [][]byte) ([][]byte, bool) {
	if at >= len(args) {
		return dst, false
	}
	n, ok := resp.ParseInt(args[at]) // as Redis reads it: "+1" and "01" are no count
	if !ok || n < 0 || n > int64(len(args)-at-1) {
		return dst, false
	}
	return append(dst, args[at+1:at+1+int(n)]...), true
}

func eqFold(b []byte, s string) bool { return bytes.EqualFold(b, []byte(s)) }
