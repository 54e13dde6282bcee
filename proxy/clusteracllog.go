package proxy

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/resp"
)

// aclLogGroupSpan is how far apart, in seconds, two masters' entries of
// the same kind may have been updated to count as one entry of the joined
// log: Redis's own grouping window (ACL_LOG_GROUPING_MAX_TIME_DELTA), in
// which one server adds a repeat to its entry instead of logging another.
const aclLogGroupSpan = 60

// aclLogCount is how many entries ACL LOG asks for: its count argument, 10
// without one (Redis's default). A count Redis refuses makes every master
// answer with an error, which is the reply.
func aclLogCount(args [][]byte) int {
	if len(args) < 3 {
		return 10
	}
	n, ok := resp.ParseInt(args[2])
	if !ok || n < 0 || n != int64(int(n)) {
		return 10
	}
	return int(n)
}

// aclLogResets reports whether an ACL LOG is ACL LOG RESET.
func aclLogResets(args [][]byte) bool {
	return len(args) > 2 && bytes.EqualFold(args[2], []byte("reset"))
}

// aclLogEntry is one master's ACL LOG entry.
type aclLogEntry struct {
	kind   byte     // '*' (RESP2: name, value, ...) or '%' (RESP3's map)
	fields [][]byte // names and values, in Redis's order
	count  int64
	// countAt is the index in fields of the count's value.
	countAt int
	age     float64 // seconds since the entry was last updated
	// key is what Redis groups repeats by: reason, context, object and
	// username.
	key    string
	master int
	// everyMaster: the denied command is one rproxy sends to every master
	// (fanOutCommands), so each master logged the same denial.
	everyMaster bool
}

// aclLog joins the masters' ACL LOG replies into one server's log, newest
// first, cut to the count asked for. Each master logs the denials and
// failed logins of the commands it ran: a client's keyed commands on their
// keys' masters, a command rproxy sends to every master on each, a login on
// the masters it reached. Entries of one kind (reason, context, object,
// user) updated on several masters within Redis's grouping window are one
// entry, as one server adds a repeat to its entry: its count is the
// masters' counts added, or for a command sent to every master, which each
// master denied once per call, the largest of them; the rest of the entry
// (age, client, ids) is the newest copy's.
func (m *merge) aclLog(replies [][]byte) []byte {
	var all []aclLogEntry
	for i := range m.parts {
		elems, err := arrayElements(replies[i])
		if err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
		for _, raw := range elems {
			e, ok := parseACLLogEntry(raw)
			if !ok {
				return resp.AppendError(nil, "ERR rproxy: unexpected ACL LOG entry from a cluster node: "+strconv.Quote(string(raw)))
			}
			e.master = i
			all = append(all, e)
		}
	}
	slices.SortStableFunc(all, func(a, b aclLogEntry) int { return cmp.Compare(a.age, b.age) })
	type group struct {
		first   int    // index in all of its newest entry
		count   int64  // joined count
		masters []bool // the masters with an entry in it
	}
	var groups []*group
	open := map[string][]*group{} // by key, newest first
	for i := range all {
		e := &all[i]
		var g *group
		for _, h := range open[e.key] {
			if !h.masters[e.master] && e.age-all[h.first].age <= aclLogGroupSpan {
				g = h
				break
			}
		}
		switch {
		case g == nil:
			g = &group{first: i, count: e.count, masters: make([]bool, m.parts)}
			groups = append(groups, g)
			open[e.key] = append(open[e.key], g)
		case e.everyMaster:
			g.count = max(g.count, e.count)
		default:
			g.count += e.count
		}
		g.masters[e.master] = true
	}
	if len(groups) > m.limit {
		groups = groups[:m.limit]
	}
	out := appendAggregate(nil, '*', len(groups))
	for _, g := range groups {
		out = all[g.first].appendWithCount(out, g.count)
	}
	return out
}

// parseACLLogEntry reads one ACL LOG entry: a RESP2 array of names and
// values, or a RESP3 map.
func parseACLLogEntry(raw []byte) (aclLogEntry, bool) {
	e := aclLogEntry{countAt: -1}
	fields, err := mapOrArrayElements(raw)
	if err != nil || len(fields)%2 != 0 {
		return e, false
	}
	e.kind, e.fields = raw[0], fields // '*' or '%': what mapOrArrayElements took
	var reason, context, object, username []byte
	ageSeen := false
	for i := 0; i+1 < len(e.fields); i += 2 {
		name, err := resp.Parse(e.fields[i])
		if err != nil {
			return e, false
		}
		v := e.fields[i+1]
		switch string(name.Str) {
		case "count":
			c, ok := resp.Int(v)
			if !ok {
				return e, false
			}
			e.count, e.countAt = c, i+1
		case "age-seconds":
			p, err := resp.Parse(v)
			if err != nil {
				return e, false
			}
			if e.age, err = strconv.ParseFloat(string(p.Str), 64); err != nil {
				return e, false
			}
			ageSeen = true
		case "reason", "context", "object", "username":
			p, err := resp.Parse(v)
			if err != nil {
				return e, false
			}
			switch string(name.Str) {
			case "reason":
				reason = p.Str
			case "context":
				context = p.Str
			case "object":
				object = p.Str
			default:
				username = p.Str
			}
		}
	}
	if e.countAt < 0 || !ageSeen {
		return e, false
	}
	e.key = strconv.Quote(string(reason)) + strconv.Quote(string(context)) + strconv.Quote(string(object)) + strconv.Quote(string(username))
	if string(reason) == "command" {
		_, e.everyMaster = fanOutCommands[string(bytes.ToLower(object))]
	}
	return e, true
}

// appendWithCount appends the entry with count as its count.
func (e *aclLogEntry) appendWithCount(dst []byte, count int64) []byte {
	n := len(e.fields)
	if e.kind == '%' {
		n /= 2
	}
	dst = appendAggregate(dst, e.kind, n)
	for i, f := range e.fields {
		if i == e.countAt {
			dst = resp.AppendInt(dst, count)
			continue
		}
		dst = append(dst, f...)
	}
	return dst
}
