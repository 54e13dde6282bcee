package proxy

import (
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/resp"
)

// commandHistogram is one command's part of a LATENCY HISTOGRAM reply:
// its calls, and per bucket (an upper bound in microseconds) the calls
// that took at most that long, cumulative, as Redis reports them.
type commandHistogram struct {
	calls   int64
	buckets []int64 // bucket bounds, ascending
	counts  []int64 // cumulative calls at each bound
}

// at is the cumulative count at bound: that of the greatest bucket up to
// it, 0 below the first.
func (h *commandHistogram) at(bound int64) int64 {
	i, found := slices.BinarySearch(h.buckets, bound)
	if found {
		return h.counts[i]
	}
	if i == 0 {
		return 0
	}
	return h.counts[i-1]
}

// joinHistograms joins the masters' LATENCY HISTOGRAM replies (RESP2
// arrays or RESP3 maps of command name to calls and cumulative buckets)
// into one server's: each command once, in the order first seen, its calls
// added, and at each bucket any master reports the sum of every master's
// cumulative count there; a command rproxy sends to every master
// (ranOnEveryMaster) is the master's that counted the most calls. A reply of another shape (an error) is
// returned as the first master's.
func joinHistograms(replies [][]byte) []byte {
	first := replies[0]
	var names []string
	byName := map[string]*commandHistogram{}
	var kind byte
	for _, r := range replies {
		v, err := resp.Parse(r)
		if err != nil || (v.Kind != '*' && v.Kind != '%') || len(v.Elems)%2 != 0 || kind != 0 && v.Kind != kind {
			return first
		}
		kind = v.Kind
		for i := 0; i < len(v.Elems); i += 2 {
			name := string(v.Elems[i].Str)
			h := readHistogram(v.Elems[i+1])
			if h == nil {
				return first
			}
			sum := byName[name]
			if sum == nil {
				byName[name] = h
				names = append(names, name)
				continue
			}
			if ranOnEveryMaster(name) {
				// One call through rproxy, one on each master.
				if h.calls > sum.calls {
					byName[name] = h
				}
				continue
			}
			byName[name] = addHistograms(sum, h)
		}
	}
	n := len(names)
	if kind == '*' {
		n *= 2
	}
	out := appendAggregate(nil, kind, n)
	for _, name := range names {
		h := byName[name]
		out = resp.AppendBulk(out, []byte(name))
		if kind == '*' {
			out = appendAggregate(out, kind, 4)
		} else {
			out = appendAggregate(out, kind, 2)
		}
		out = resp.AppendBulk(out, []byte("calls"))
		out = resp.AppendInt(out, h.calls)
		out = resp.AppendBulk(out, []byte("histogram_usec"))
		n := len(h.buckets)
		if kind == '*' {
			n *= 2
		}
		out = appendAggregate(out, kind, n)
		for i, b := range h.buckets {
			out = resp.AppendInt(out, b)
			out = resp.AppendInt(out, h.counts[i])
		}
	}
	return out
}

// readHistogram reads one command's calls and buckets, nil if v is not
// their shape.
func readHistogram(v resp.Value) *commandHistogram {
	if len(v.Elems) != 4 || string(v.Elems[0].Str) != "calls" || v.Elems[1].Kind != ':' || string(v.Elems[2].Str) != "histogram_usec" {
		return nil
	}
	h := &commandHistogram{calls: v.Elems[1].Int}
	buckets := v.Elems[3].Elems
	if len(buckets)%2 != 0 {
		return nil
	}
	for i := 0; i < len(buckets); i += 2 {
		if buckets[i].Kind != ':' || buckets[i+1].Kind != ':' || len(h.buckets) > 0 && buckets[i].Int <= h.buckets[len(h.buckets)-1] {
			return nil
		}
		h.buckets = append(h.buckets, buckets[i].Int)
		h.counts = append(h.counts, buckets[i+1].Int)
	}
	return h
}

// addHistograms returns a and b's sum: calls added, and at every bucket of
// either the sum of both cumulative counts there.
func addHistograms(a, b *commandHistogram) *commandHistogram {
	sum := &commandHistogram{calls: a.calls + b.calls}
	sum.buckets = append(slices.Clone(a.buckets), b.buckets...)
	slices.Sort(sum.buckets)
	sum.buckets = slices.Compact(sum.buckets)
	for _, bound := range sum.buckets {
		sum.counts = append(sum.counts, a.at(bound)+b.at(bound))
	}
	return sum
}

// appendAggregate appends an array ('*') or map ('%') header of n
// elements (a map's n is its pairs).
func appendAggregate(dst []byte, kind byte, n int) []byte {
	dst = append(dst, kind)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// appendArray appends an aggregate of kind ('*' for an array) made of
// elems, each a whole reply.
func appendArray(dst []byte, kind byte, elems [][]byte) []byte {
	dst = appendAggregate(dst, kind, len(elems))
	for _, e := range elems {
		dst = append(dst, e...)
	}
	return dst
}
