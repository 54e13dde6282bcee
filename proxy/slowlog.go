package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/resp"
)

// slowLogNames is how many command names a slow-log entry keeps.
const slowLogNames = 8

// reqLogNames is how many command names a request log line carries; the
// count says how many the batch had.
const reqLogNames = 32

// reqStats is what became of a batch's commands, for its request log line.
// slowLogState is the slow log's per-batch state in a session.
type slowLogState struct {
	names []string // the batch's first command names
	count int      // the batch's commands
	skip  bool     // the batch blocked by request (BLPOP...): not logged
}

// reqLogState is request logging's (Server.SetRequestLog) per-batch state
// in a session: whether this batch is logged, when it started, and what
// became of its commands.
type reqLogState struct {
	on    bool
	start time.Time
	stats reqStats
}

type reqStats struct {
	upstream int // sent to Redis (or the pinned connection)
	local    int // answered by rproxy (the tier, PROXY, CLIENT ID...)
	refused  int // refused by the policy or as unsupported
	joined   int // coalesced into another client's identical read
	errors   int // error replies, from Redis or rproxy
}

// logBatch writes the request log line of the batch just served (outcome
// "" is found from its replies) and resets the batch's figures. Command
// names only: arguments, keys and values, and error messages (Redis may
// quote arguments in them), are never logged.
func (s *Server) logBatch(ss *session, outcome string) {
	if outcome == "" {
		outcome = "ok"
		if ss.reqlog.stats.errors > 0 {
			outcome = "error_replies"
		}
	}
	if ce := s.log.Check(zap.DebugLevel, "client batch"); ce != nil {
		// A copy: a core may encode after the session reuses its slice.
		ce.Write(zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
			zap.Strings("commands", slices.Clone(ss.slowlog.names)), zap.Int("count", ss.slowlog.count),
			zap.Duration("duration_seconds", time.Since(ss.reqlog.start)), zap.String("outcome", outcome),
			zap.Int("upstream", ss.reqlog.stats.upstream), zap.Int("local", ss.reqlog.stats.local), zap.Int("refused", ss.reqlog.stats.refused),
			zap.Int("joined", ss.reqlog.stats.joined), zap.Int("errors", ss.reqlog.stats.errors))
	}
	ss.reqlog.stats = reqStats{}
}

// slowEntry is one client batch that took longer than the threshold, from
// reading it to writing its replies. Like Redis's SLOWLOG it names the
// commands, but never their arguments (keys and values stay private).
type slowEntry struct {
	id       int64
	at       time.Time
	duration time.Duration
	names    []string // first slowLogNames command names, lower case
	count    int      // commands in the batch
	addr     string
	client   string // CLIENT SETNAME
}

// slowLog is a ring of the most recent slow batches. It is touched only
// when a batch is slow, so its lock is off the common path.
type slowLog struct {
	mu      sync.Mutex
	next    int64
	entries []slowEntry // grows to max, then entries[head] is overwritten
	head    int         // where the next entry goes once full
	n       int         // entries held
	max     int
}

func (l *slowLog) add(e slowEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.id = l.next
	l.next++
	if len(l.entries) < l.max {
		l.entries = append(l.entries, e)
	} else {
		l.entries[l.head] = e
	}
	l.head = (l.head + 1) % l.max
	l.n = min(l.n+1, l.max)
}

// get returns up to n entries, newest first (n < 0: all).
func (l *slowLog) get(n int) []slowEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n < 0 || n > l.n {
		n = l.n
	}
	out := make([]slowEntry, n)
	for i := range out {
		out[i] = l.entries[(l.head-1-i+l.max)%l.max]
	}
	return out
}

func (l *slowLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// reset forgets the entries; ids go on, as in Redis.
func (l *slowLog) reset() {
	l.mu.Lock()
	l.n = 0
	l.mu.Unlock()
}

// note records the batch just served if it took at least the
// threshold. names are the batch's command names, gathered by exec.
func (l *slowLog) note(ss *session, took time.Duration) {
	names := ss.slowlog.names[:min(len(ss.slowlog.names), slowLogNames)]
	e := slowEntry{at: time.Now(), duration: took, names: append([]string(nil), names...),
		count: ss.slowlog.count, addr: ss.conn.RemoteAddr(), client: ss.name}
	l.add(e)
}

// command answers PROXY SLOWLOG GET [n] | LEN | RESET in the shape
// of Redis's SLOWLOG GET: id, unix time, microseconds, the command names
// (with "... (N commands)" when the batch had more), client address, name.
func (l *slowLog) command(args [][]byte) []byte {
	sub := ""
	if len(args) > 2 {
		sub = strings.ToLower(string(args[2]))
	}
	switch {
	case sub == "len" && len(args) == 3:
		return resp.AppendInt(nil, int64(l.len()))
	case sub == "reset" && len(args) == 3:
		l.reset()
		return []byte("+OK\r\n")
	case sub == "get" && len(args) <= 4:
		n := 10
		if len(args) == 4 {
			v, err := strconv.Atoi(string(args[3]))
			if err != nil || v < -1 {
				return resp.AppendError(nil, "ERR value is out of range, must be positive")
			}
			n = v
		}
		entries := l.get(n)
		r := fmt.Appendf(nil, "*%d\r\n", len(entries))
		for _, e := range entries {
			r = append(r, "*6\r\n"...)
			r = resp.AppendInt(r, e.id)
			r = resp.AppendInt(r, e.at.Unix())
			r = resp.AppendInt(r, e.duration.Microseconds())
			names := e.names
			if e.count > len(names) {
				names = append(names[:len(names):len(names)], fmt.Sprintf("... (%d commands)", e.count))
			}
			r = fmt.Appendf(r, "*%d\r\n", len(names))
			for _, n := range names {
				r = resp.AppendBulk(r, []byte(n))
			}
			r = resp.AppendBulk(r, []byte(e.addr))
			r = resp.AppendBulk(r, []byte(e.client))
		}
		return r
	}
	return resp.AppendError(nil, "ERR rproxy: PROXY SLOWLOG GET [count] | LEN | RESET")
}
