package proxy

import (
	"bytes"
	"strconv"

	"github.com/rproxy/rproxy/upstream"
)

// Server-wide commands on a pinned session of a cluster upstream. Outside
// a transaction a command of fanOutCommands (FLUSHALL, DBSIZE, SCRIPT
// LOAD, CONFIG SET...) goes to every master and the replies merge. A
// transaction, or a WATCH, holds one master's connection, and such a
// command sent there ran on that master alone: MULTI, FLUSHALL, EXEC
// emptied a third of the data, DBSIZE counted a third of the keys. Now it
// runs on the pin, in its place among the transaction's commands, and once
// the pin has answered (the transaction ran: EXEC's reply is an array) on
// every other master, in the client's order, on the shared connections;
// its reply in EXEC's array is the merge of all of them. A transaction
// that did not run (EXECABORT, a WATCH that failed) runs nothing
// elsewhere. The other masters hold none of the transaction's keys (those
// are all on the pin's master, or EXEC answers CROSSSLOT), so running
// their part after it is what one server would have done, but for what
// other clients do in between, as for any command sent to every master.
// INFO (rewritten by infoAt) and SLOWLOG LEN (sent as SLOWLOG GET -1) stay
// the pin's master's.

// pinnedFanOut is a command of fanOutCommands sent on a pinned session.
type pinnedFanOut struct {
	pos  int // its index in EXEC's reply
	kind mergeKind
	raw  []byte   // a copy of what every master is sent
	args [][]byte // copies of its arguments, for fanOutMerge
}

// fansOutWhenPinned reports whether a command merged as kind also goes to
// every master when the session is pinned.
func fansOutWhenPinned(kind mergeKind) bool {
	return kind != mergeInfo && kind != mergeSlowlogLen
}

// countQueued follows the commands a transaction queues, so that a
// server-wide one's place in EXEC's reply is known: every command in a
// transaction but MULTI, EXEC, DISCARD and WATCH (which Redis runs or
// refuses, and does not queue); a command Redis refuses at queue time
// makes EXEC answer EXECABORT, where nothing is merged.
func (r *routing) countQueued(ss *session, name string) {
	switch name {
	case "multi":
		if !ss.inTransaction() {
			ss.route.txQueued, ss.route.txFanOut = 0, nil
		}
	case "exec", "discard", "watch":
	default:
		if ss.inTransaction() {
			ss.route.txQueued++
		}
	}
}

// fanOutOnPin handles a command of fanOutCommands on a pinned session
// (not in stream mode), and reports whether it queued it itself: in a
// transaction it is noted and goes on to the pin, to be run elsewhere
// after EXEC (execFanOut); outside one (a WATCH holds the pin) it is sent
// on the pin and its reply merged with every other master's.
func (r *routing) fanOutOnPin(ss *session, kind mergeKind, raw []byte, args [][]byte) bool {
	if !fansOutWhenPinned(kind) || len(ss.pools[ss.proto].Shards()) < 2 || ss.pin == nil && !ss.inTransaction() {
		return false
	}
	q := newPinnedFanOut(ss.route.txQueued-1, kind, raw, args)
	if ss.inTransaction() {
		ss.route.txFanOut = append(ss.route.txFanOut, q)
		return false
	}
	be, proto, pinAddr := ss.pools[ss.proto], ss.proto, ss.pinPool.Address()
	ss.batch.AddSlot(q.raw, upstream.SlotAny)
	ss.track = append(ss.track, track{})
	ss.queueMerge(merge{kind: mergeAfterPin, parts: 1, afterPin: func(reply []byte) []byte {
		replies := r.runOnOthers(be, pinAddr, []pinnedFanOut{q})
		return r.mergeWithOthers(q, proto, reply, replies, 0, 1)
	}})
	return true
}

// newPinnedFanOut notes a command of fanOutCommands, queued at pos in a
// transaction (or sent under a WATCH), as every master is sent it.
func newPinnedFanOut(pos int, kind mergeKind, raw []byte, args [][]byte) pinnedFanOut {
	kind, raw = fanOutSent(kind, args, raw)
	q := pinnedFanOut{pos: pos, kind: kind, raw: bytes.Clone(raw), args: make([][]byte, len(args))}
	for i, a := range args {
		q.args[i] = bytes.Clone(a) // args point into the read buffer
	}
	return q
}

// execFanOut queues the session's EXEC, of a transaction that queued
// commands of fanOutCommands (ss.route.txFanOut), with its reply made by
// execReply, and reports whether it did.
func (r *routing) execFanOut(ss *session, raw []byte) bool {
	queued, count := ss.route.txFanOut, ss.route.txQueued
	ss.route.txFanOut, ss.route.txQueued = nil, 0
	if len(queued) == 0 || ss.pin == nil || ss.stream {
		return false
	}
	be, proto, pinAddr := ss.pools[ss.proto], ss.proto, ss.pinPool.Address()
	ss.batch.AddSlot(raw, upstream.SlotAny)
	ss.track = append(ss.track, transactionTrack("exec"))
	ss.queueMerge(merge{kind: mergeAfterPin, parts: 1, afterPin: func(reply []byte) []byte {
		return r.execReply(be, proto, pinAddr, queued, count, reply, nil)
	}})
	ss.noteTransaction("exec")
	return true
}

// execReply is EXEC's reply with each queued server-wide command's reply
// merged with the other masters': they run there now, only if the
// transaction ran (its reply is an array of every queued command's), and
// then after before (if not nil).
func (r *routing) execReply(be backend, proto int, pinAddr string, queued []pinnedFanOut, count int, reply []byte, before func()) []byte {
	elems, err := arrayElements(reply)
	if err != nil || len(elems) != count {
		return reply // EXECABORT, a nil (WATCH), or not what was queued
	}
	if before != nil {
		before()
	}
	replies := r.runOnOthers(be, pinAddr, queued)
	out := append(strconv.AppendInt([]byte{'*'}, int64(len(elems)), 10), '\r', '\n')
	next := 0
	for i, e := range elems {
		if next < len(queued) && queued[next].pos == i {
			e = r.mergeWithOthers(queued[next], proto, e, replies, next, len(queued))
			next++
		}
		out = append(out, e...)
	}
	return out
}

// runOnOthers sends cmds, in order, to every master but the one at
// pinAddr, on the shared connections be, and returns the replies: those
// of the k-th other master at k*len(cmds) on.
func (r *routing) runOnOthers(be backend, pinAddr string, cmds []pinnedFanOut) *upstream.Batch {
	b := upstream.NewBatch()
	for _, slot := range be.Shards() {
		if r.cluster.MasterAddr(slot) == pinAddr {
			continue
		}
		for _, q := range cmds {
			b.AddSlot(q.raw, slot)
		}
	}
	if b.Len() > 0 {
		be.Do(b)
	}
	return b
}

// mergeWithOthers merges q's reply from the pin with the other masters'
// (runOnOthers' batch b, which sent each stride commands, q the i-th).
func (r *routing) mergeWithOthers(q pinnedFanOut, proto int, pinReply []byte, b *upstream.Batch, i, stride int) []byte {
	parts := [][]byte{pinReply}
	for at := i; at < b.Len(); at += stride {
		parts = append(parts, b.Reply(at))
	}
	m := r.fanOutMerge(q.kind, len(parts), q.args, proto)
	return m.reply(parts)
}
