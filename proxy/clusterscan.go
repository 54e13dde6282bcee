package proxy

import (
	"bytes"
	"math"
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/upstream"
)

// SCAN on a cluster upstream walks the masters one after the other, in
// the order of their lowest slots (Router.Shards). The cursor a client
// gets carries, in its top scanSlotBits bits, the lowest slot of the
// master being walked when the cursor was made, and in the rest that
// master's own cursor. A cursor names its master by a slot rather than by
// a position, so after a failover it goes on with the master that now
// holds those slots; that master orders its table by its own hash seed,
// so the walk of it may miss or repeat keys, as a cluster client's walk
// of each node would. A master that gets lower slots while a SCAN is on
// may be walked again, which SCAN allows (an element may come twice).
const (
	scanSlotBits = 14 // upstream.Slots is 1 << 14
	scanNodeBits = 64 - scanSlotBits
	scanNodeMask = 1<<scanNodeBits - 1
)

// scan queues a SCAN for the master its cursor names, with that master's
// own cursor, and the merge that makes the client's cursor from the reply.
func (r *routing) scan(ss *session, args [][]byte) {
	slot, raw, m, ok := r.scanPart(ss.pools[ss.proto].Shards(), args)
	if !ok {
		ss.reply(resp.AppendError(nil, "ERR invalid cursor")) // Redis's words for a cursor it cannot parse
		return
	}
	ss.batch.AddSlot(raw, slot)
	ss.queueMerge(m)
}

// scanPart reads a SCAN's cursor (args[1]) for a cluster whose masters'
// lowest slots are shards: the slot that names the master to send raw to
// (the SCAN with that master's own cursor), and the merge of its reply.
// ok is false for a cursor Redis would call invalid.
func (r *routing) scanPart(shards []int, args [][]byte) (slot int, raw []byte, m merge, ok bool) {
	cursor, valid := parseScanCursor(args[1])
	slot = int(cursor >> scanNodeBits)
	if !valid || len(shards) == 0 || slot >= upstream.Slots {
		return 0, nil, merge{}, false
	}
	if cursor == 0 {
		slot = shards[0]
	}
	// The master after this one: the next lowest slot above the cursor's.
	next := -1
	if i, _ := slices.BinarySearch(shards, slot+1); i < len(shards) {
		next = shards[i]
	}
	node := make([][]byte, len(args))
	copy(node, args)
	node[1] = strconv.AppendUint(nil, cursor&scanNodeMask, 10)
	m = merge{kind: mergeScan, parts: 1, scanSlot: slot, scanNext: next, hideCopies: r.salting != nil}
	return slot, resp.AppendCommand(nil, node...), m, true
}

// parseScanCursor reads a SCAN cursor as Redis 7.0 does (strtoul, then
// its checks): an optional sign and decimal digits, nothing else; no
// digits at all is 0, and a '-' negates in unsigned arithmetic. A leading
// space, a sign alone, another byte or an overflow is invalid.
func parseScanCursor(b []byte) (cursor uint64, valid bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg = b[0] == '-'
		b = b[1:]
		if len(b) == 0 {
			return 0, false // strtoul parsed nothing: the sign is left over
		}
	}
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		if cursor > (math.MaxUint64-uint64(d-'0'))/10 {
			return 0, false // ERANGE
		}
		cursor = cursor*10 + uint64(d-'0')
	}
	if neg {
		cursor = -cursor
	}
	return cursor, true
}

// scanReply is the client's SCAN reply made from the master's: its cursor
// made as scan describes (0 once the last master is done), and its keys,
// without the salted copies rproxy keeps of hot keys (hideCopies).
func (m *merge) scanReply(reply []byte) []byte {
	elems, err := arrayElements(reply)
	if err != nil || len(elems) != 2 {
		return resp.AppendError(nil, "ERR rproxy: unexpected SCAN reply from a cluster node: "+strconv.Quote(string(reply)))
	}
	v, err := resp.Parse(elems[0])
	node, perr := strconv.ParseUint(string(v.Str), 10, 64)
	if err != nil || perr != nil || node > scanNodeMask {
		return resp.AppendError(nil, "ERR rproxy: a cluster node's SCAN cursor cannot be carried: "+strconv.Quote(string(elems[0])))
	}
	var cursor uint64
	switch {
	case node != 0:
		cursor = uint64(m.scanSlot)<<scanNodeBits | node
	case m.scanNext >= 0:
		cursor = uint64(m.scanNext) << scanNodeBits
	}
	keys := elems[1]
	if m.hideCopies {
		if keys, err = withoutCopies(keys); err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected SCAN reply from a cluster node: "+err.Error())
		}
	}
	out := appendAggregate(nil, '*', 2)
	out = resp.AppendBulk(out, strconv.AppendUint(nil, cursor, 10))
	return append(out, keys...)
}

// withoutCopies is the SCAN reply's array of keys without salted copies.
func withoutCopies(keys []byte) ([]byte, error) {
	elems, err := arrayElements(keys)
	if err != nil {
		return nil, err
	}
	kept := appendKeys(nil, elems, true)
	if len(kept) == len(elems) {
		return keys, nil
	}
	return appendArray(nil, keys[0], kept), nil
}

// keys joins the masters' KEYS replies: every master's keys, without
// salted copies (hideCopies). Each master holds its own slots' keys, so
// none comes twice.
func (m *merge) keys(replies [][]byte) []byte {
	var all [][]byte
	for i := range m.parts {
		elems, err := arrayElements(replies[i])
		if err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected KEYS reply from a cluster node: "+err.Error())
		}
		all = appendKeys(all, elems, m.hideCopies)
	}
	return appendArray(nil, '*', all)
}

// appendKeys appends the keys of elems (bulk strings) to dst, without the
// salted copies' names when hideCopies.
func appendKeys(dst, elems [][]byte, hideCopies bool) [][]byte {
	for _, e := range elems {
		if !hideCopies || !isCopyElement(e) {
			dst = append(dst, e)
		}
	}
	return dst
}

// randomKey picks, with randN, one of the masters' RANDOMKEY replies
// that is a key (not nil, not a salted copy when hideCopies); nil when none
// is. Not uniform over the keys as one server's is: each master's key is
// as likely, whatever the master holds.
func (m *merge) randomKey(replies [][]byte) []byte {
	var keys [][]byte
	for i := range m.parts {
		r := replies[i]
		if len(r) == 0 || r[0] != '$' || bytes.HasPrefix(r, []byte("$-1")) || m.hideCopies && isCopyElement(r) {
			continue
		}
		keys = append(keys, r)
	}
	if len(keys) == 0 {
		return resp.AppendNullBulk(nil, m.proto)
	}
	return keys[m.randN(len(keys))]
}

// isCopyElement reports whether e, a bulk string, names a salted copy.
func isCopyElement(e []byte) bool {
	v, err := resp.Parse(e)
	return err == nil && salt.IsCopyName(v.Str)
}
