package proxy

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/resp"
)

// slowlogCount is the entries SLOWLOG GET asks for: its count, 10 without
// one (Redis's default), negative for all. A count Redis refuses is
// passed on as 10: each master then answers with the refusal.
func slowlogCount(args [][]byte) int {
	if len(args) < 3 {
		return 10
	}
	n, err := strconv.Atoi(string(args[2]))
	if err != nil {
		return 10
	}
	return n
}

// slowlogEntry is one SLOWLOG GET entry and what it is ordered by.
type slowlogEntry struct {
	raw    []byte
	at, id int64
}

// slowlog joins the masters' SLOWLOG GET replies into one server's log:
// every master's entries, newest first (by time, then by id), cut to the
// count asked for. Each master numbers its own entries, so two may share
// an id.
func (m *merge) slowlog(replies [][]byte) []byte {
	var entries []slowlogEntry
	for i := range m.parts {
		elems, err := arrayElements(replies[i])
		if err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
		for _, e := range elems {
			v, err := resp.Parse(e)
			if err != nil || len(v.Elems) < 2 || v.Elems[0].Kind != ':' || v.Elems[1].Kind != ':' {
				return resp.AppendError(nil, "ERR rproxy: unexpected SLOWLOG entry from a cluster node: "+strconv.Quote(string(e)))
			}
			entries = append(entries, slowlogEntry{raw: e, id: v.Elems[0].Int, at: v.Elems[1].Int})
		}
	}
	slices.SortStableFunc(entries, func(a, b slowlogEntry) int {
		return cmp.Or(cmp.Compare(b.at, a.at), cmp.Compare(b.id, a.id))
	})
	if m.limit >= 0 && len(entries) > m.limit {
		entries = entries[:m.limit]
	}
	out := appendAggregate(nil, '*', len(entries))
	for _, e := range entries {
		out = append(out, e.raw...)
	}
	return out
}
