package proxy

import (
	"math"
	"strconv"
	"time"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// A blocking command that a cluster node held and then refused (it saw
// the cluster down, or the key's slot moved away: Redis unblocks such a
// client with -CLUSTERDOWN or -MOVED) runs again, on the slot's master or
// after a pause (doPinned). Sent again as the client sent it, it would wait
// its whole timeout again on top of the time already waited: a client
// that asked for 5 seconds could wait 5 more. lowerBlockingTimeouts sends
// it with what is left of the client's timeout instead; a wait already
// spent gets the least Redis takes (1 ms), so Redis answers as at the
// timeout, in the client's protocol, or with what arrived meanwhile.

// lowerBlockingTimeouts rewrites, in the session's batch about to run
// again, the timeout of its first command that blocks to what is left of
// it after waited, in whole milliseconds (Redis's unit), and returns the
// part of waited it took off. Only that one waited: Redis reads nothing
// more of a connection while a command on it is blocked, and answers the
// commands after it at once when it releases it (the same redirect). One
// queued in a transaction never blocks (EXEC runs it without waiting), nor
// does an XREAD without BLOCK. A timeout of 0 (wait for ever) and one that
// cannot be read are left as sent; so is the batch when less than a
// millisecond has passed (a redirect met at once, before any wait).
func (ss *session) lowerBlockingTimeouts(table *command.Table, waited time.Duration) time.Duration {
	ms := waited.Milliseconds()
	if ms < 1 {
		return 0
	}
	queued := ss.askingQueued()
	for i := range ss.batch.Len() {
		if i < len(queued) && queued[i] {
			continue
		}
		info := table.Lookup(rawCommandName(ss.batch.Command(i)))
		if info == nil || info.Handling != command.BlockingCmd {
			continue
		}
		args := rawArgs(ss.batch.Command(i))
		if len(args) == 0 || isNonBlockingRead(info, args) {
			continue
		}
		if lowered, ok := lowerTimeout(args, info.Name, ms); ok {
			ss.batch.SetCommand(i, lowered)
		}
		break
	}
	return time.Duration(ms) * time.Millisecond
}

// rawArgs returns the arguments of raw, a command as RESP, or nil.
func rawArgs(raw []byte) [][]byte {
	v, err := resp.Parse(raw)
	if err != nil {
		return nil
	}
	args := make([][]byte, len(v.Elems))
	for i, a := range v.Elems {
		args[i] = a.Str
	}
	return args
}

// lowerTimeout returns args, a blocking command named name, as RESP with
// its timeout lowered by ms milliseconds (to 1 ms at least), and whether
// it changed it. It may change args.
func lowerTimeout(args [][]byte, name string, ms int64) ([]byte, bool) {
	at, millis, ok := blockingTimeoutArg(name, args)
	if !ok {
		return nil, false
	}
	var total int64 // the timeout in milliseconds, as Redis reads it
	if !isPlainNumber(args[at]) {
		return nil, false // Go's and Redis's readings may differ: leave it to Redis
	}
	if millis {
		n, err := strconv.ParseInt(string(args[at]), 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != string(args[at]) {
			return nil, false // Redis reads integers strictly: no sign but '-', no leading 0
		}
		total = n
	} else {
		f, err := strconv.ParseFloat(string(args[at]), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f*1000 > math.MaxInt64/2 {
			return nil, false
		}
		total = int64(math.Ceil(f * 1000)) // Redis's rounding (getTimeoutFromObjectOrReply)
	}
	if total <= 0 { // 0 waits for ever; a negative one is Redis's error to give
		return nil, false
	}
	left := max(total-ms, 1)
	if millis {
		args[at] = strconv.AppendInt(nil, left, 10)
	} else {
		args[at] = strconv.AppendFloat(nil, float64(left)/1000, 'f', 3, 64)
	}
	return resp.AppendCommand(nil, args...), true
}

// blockingTimeoutArg returns the index in args of a blocking command's
// timeout, and whether it counts milliseconds (XREAD's and XREADGROUP's
// BLOCK) rather than seconds. WAIT and WAITAOF are left out: a cluster
// node does not unblock them for a slot or the cluster's state.
func blockingTimeoutArg(name string, args [][]byte) (at int, millis, ok bool) {
	switch name {
	case "blpop", "brpop", "bzpopmin", "bzpopmax", "brpoplpush", "blmove":
		return len(args) - 1, false, len(args) >= 3
	case "blmpop", "bzmpop":
		return 1, false, len(args) >= 3
	case "xread", "xreadgroup":
		at, ok := xreadBlock(args)
		return at, true, ok
	}
	return 0, false, false
}

// isPlainNumber reports whether b is written with digits, a sign, a point
// and an exponent alone, which strconv and Redis read alike.
func isPlainNumber(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && c != '.' && c != '-' && c != '+' && c != 'e' && c != 'E' {
			return false
		}
	}
	return len(b) > 0
}
