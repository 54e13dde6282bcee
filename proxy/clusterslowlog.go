package proxy

import (
	"strconv"
	"strings"

	"github.com/rproxy/rproxy/resp"
)

// slowlogCount is the entries SLOWLOG GET asks for: its count, 10 without
// one (Redis's default), negative for all. A count Redis refuses is
// passed on as 10: each master then answers with the refusal.
func slowlogCount(args [][]byte) int {
	if len(args) < 3 {
		return 10
	}
	n, ok := resp.ParseInt(args[2])
	if !ok || n != int64(int(n)) {
		return 10
	}
	return int(n)
}

// slowlogEntry is one master's SLOWLOG GET entry.
type slowlogEntry struct {
	raw    []byte
	at, id int64
	// args is the entry's command as logged (its RESP array), set for a
	// command rproxy sends to every master (fanOutCommands): each master
	// logs its own copy, and the copies are one entry of the joined log.
	args  []byte
	group *slowlogGroup
}

// slowlogGroup is the copies, one per master at most, of one command rproxy
// sent to every master.
type slowlogGroup struct {
	at      int64 // the first copy's time (matching is within slowlogGroupSpan of it)
	members int   // copies in the masters' logs
	atFront int   // copies at the front of their logs, while they are joined
	emitted bool  // in the joined log
}

// slowlog joins the masters' SLOWLOG GET replies into one server's log,
// newest first, cut to the count asked for. Each master's log keeps its
// order. A command sent to every master (SLOWLOG RESET, CONFIG SET, DEBUG
// SLEEP) is logged by each: its copies are one entry, placed after what
// any master logged after it, as one server would log one command. rproxy's
// own housekeeping (own: the tier's PINGs, the slot map's CLUSTER SHARDS)
// is left out, as MONITOR leaves it out. Each master numbers its own
// entries, so two may share an id.
func (m *merge) slowlog(replies [][]byte) []byte {
	entries, errReply := m.joinedSlowlog(replies, m.limit)
	if errReply != nil {
		return errReply
	}
	return appendArray(nil, '*', entries)
}

// slowlogLen is SLOWLOG LEN of the joined log: how many entries the
// masters' whole logs (SLOWLOG GET -1, sent in its place) join into.
func (m *merge) slowlogLen(replies [][]byte) []byte {
	entries, errReply := m.joinedSlowlog(replies, -1)
	if errReply != nil {
		return errReply
	}
	return resp.AppendInt(nil, int64(len(entries)))
}

// slowlogGetAll is what a cluster's masters are sent for SLOWLOG LEN.
var slowlogGetAll = resp.AppendCommandString(nil, "SLOWLOG", "GET", "-1")

// joinedSlowlog is the masters' SLOWLOG GET replies joined (slowlog), as
// their entries' raw bytes, or an error reply.
func (m *merge) joinedSlowlog(replies [][]byte, limit int) ([][]byte, []byte) {
	logs := make([][]slowlogEntry, m.parts)
	for i := range m.parts {
		elems, err := arrayElements(replies[i])
		if err != nil {
			return nil, resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
		for _, raw := range elems {
			e, ok := parseSlowlogEntry(raw, m.own)
			if !ok {
				return nil, resp.AppendError(nil, "ERR rproxy: unexpected SLOWLOG entry from a cluster node: "+strconv.Quote(string(raw)))
			}
			if e != nil {
				logs[i] = append(logs[i], *e)
			}
		}
	}
	groupSlowlogCopies(logs)
	return joinSlowlogs(logs, limit), nil
}

// parseSlowlogEntry reads one entry: id, time, duration, arguments, and
// (Redis 4 on) the client's address and name. It returns nil for one of
// rproxy's own commands (own, when set).
func parseSlowlogEntry(raw []byte, own func(addr string, args [][]byte) bool) (*slowlogEntry, bool) {
	elems, err := arrayElements(raw)
	if err != nil || len(elems) < 4 {
		return nil, false
	}
	id, ok1 := resp.Int(elems[0])
	at, ok2 := resp.Int(elems[1])
	argv, err := resp.Parse(elems[3])
	if !ok1 || !ok2 || err != nil || argv.Kind != '*' || len(argv.Elems) == 0 {
		return nil, false
	}
	args := make([][]byte, len(argv.Elems))
	for i, a := range argv.Elems {
		args[i] = a.Str
	}
	if own != nil && len(elems) > 4 {
		if addr, err := resp.Parse(elems[4]); err == nil && own(string(addr.Str), args) {
			return nil, true
		}
	}
	e := &slowlogEntry{raw: raw, id: id, at: at}
	if _, ok := fanOutCommands[fanOutName(strings.ToLower(string(args[0])), args)]; ok {
		e.args = elems[3]
	}
	return e, true
}

// slowlogGroupSpan is how far apart, in the log's seconds, the copies of
// one command sent to every master may be logged.
const slowlogGroupSpan = 1

// groupSlowlogCopies finds the copies of each command sent to every master:
// entries of the same arguments on several masters, logged within
// slowlogGroupSpan of each other, matched newest first and in each
// master's order. A copy missing on a master (faster there than the
// threshold, or gone from its log) leaves the group smaller.
func groupSlowlogCopies(logs [][]slowlogEntry) {
	groups := map[string][]*slowlogGroup{} // by arguments, newest first
	for _, log := range logs {
		next := map[string]int{} // where this master's next copy may join, by arguments
		for i := range log {
			e := &log[i]
			if e.args == nil {
				continue
			}
			k := string(e.args)
			list, j := groups[k], next[k]
			for j < len(list) && list[j].at > e.at+slowlogGroupSpan {
				j++ // newer: this master logged no copy of it
			}
			if j == len(list) || list[j].at < e.at-slowlogGroupSpan {
				g := &slowlogGroup{at: e.at}
				list = append(list[:j], append([]*slowlogGroup{g}, list[j:]...)...)
				groups[k] = list
			}
			g := list[j]
			g.members++
			e.group = g
			next[k] = j + 1
		}
	}
}

// joinSlowlogs merges the masters' logs, each newest first, into one,
// newest first, cut to limit entries (negative: all). At each step it takes
// the newest of the logs' front entries, by time and then by id; a copy of
// a command sent to every master waits until each of its copies is at the
// front of its log (what a master logged after it comes first), and then
// goes once. If every front entry is such a copy still waiting (masters
// that ran two such commands in different orders), the newest goes anyway.
// Each step looks at every log's front once: the cost is the entries
// joined times the masters.
func joinSlowlogs(logs [][]slowlogEntry, limit int) [][]byte {
	var out [][]byte
	front := make([]int, len(logs))
	// settle moves a log's front past copies already joined and counts
	// the copy it stops at as at the front.
	settle := func(master int) {
		log := logs[master]
		for front[master] < len(log) && log[front[master]].group != nil && log[front[master]].group.emitted {
			front[master]++
		}
		if front[master] < len(log) && log[front[master]].group != nil {
			log[front[master]].group.atFront++
		}
	}
	for master := range logs {
		settle(master)
	}
	for limit < 0 || len(out) < limit {
		best, bestReady := -1, false
		for master, log := range logs {
			if front[master] == len(log) {
				continue
			}
			e := &log[front[master]]
			ready := e.group == nil || e.group.atFront == e.group.members
			if best < 0 || ready && !bestReady || ready == bestReady && newerSlowlogEntry(e, &logs[best][front[best]]) {
				best, bestReady = master, ready
			}
		}
		if best < 0 {
			break
		}
		e := &logs[best][front[best]]
		out = append(out, e.raw)
		front[best]++
		if g := e.group; g != nil {
			g.emitted = true
			for master, log := range logs { // its other copies at the front go too
				if master != best && front[master] < len(log) && log[front[master]].group == g {
					front[master]++
					settle(master)
				}
			}
		}
		settle(best)
	}
	return out
}

// newerSlowlogEntry orders entries of different masters: by time, then by
// id (the masters' ids are their own: the best a join can do).
func newerSlowlogEntry(a, b *slowlogEntry) bool {
	if a.at != b.at {
		return a.at > b.at
	}
	return a.id > b.id
}
