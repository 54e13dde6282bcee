package upstream

import (
	"sync/atomic"

	"github.com/rproxy/rproxy/resp"
)

// maxRetained bounds the buffers a Batch keeps between uses, so one huge
// request or reply does not pin its memory for the life of the session.
const maxRetained = 1 << 20

// Batch is the unit of work a session sends upstream: a group of commands that
// go to one connection back to back, and their replies, in order.
//
// A Batch is owned by one session and reused; between Send and the return of
// Wait it belongs to the connection's reader and must not be touched.
type Batch struct {
	// cmds are the commands' raw RESP bytes, referenced, not copied: they
	// are copied once, into the connection's write buffer, inside Pool.Do.
	cmds [][]byte
	// slots[i] is the cluster hash slot of command i (SlotAny: no key),
	// with ReplicaRead, InTransaction or TransactionStart or'ed in; only a
	// cluster Router (and a Sentinel's replica router) reads it.
	slots []int32

	replies   []byte // replies, back to back, exactly as Redis sent them
	replyEnds []int  // replyEnds[i] is the end offset of reply i in replies

	done chan struct{}

	// sent is set when the batch's bytes are handed to the socket (shared
	// connections); coalescing stops taking joiners for it then.
	sent    atomic.Bool
	sentSeq atomic.Uint64 // the send sequence it left with
	// stalled: the batch (or one of its parts) waited on a connection the
	// pool's watcher marked stalled (Config.StallDivert); it stays set
	// until the batch is reused.
	stalled atomic.Bool
	// parent is the batch a cluster Router split this part from: it is
	// marked stalled with its part.
	parent *Batch
	// size is what the batch counts for in its connection's backlog
	// (conn.send), and out again when it leaves it: its commands' bytes
	// and, for the replies it will get, the bytes of the replies of its
	// previous use (lastReplies). A session reuses its batch, so a client
	// that reads large values is expected to go on reading large values.
	size        int
	lastReplies int
}

// SentSeq is the send sequence number the batch's bytes left with (valid
// once Sent): sends are numbered in order across all pools sharing
// Config.SendSeq.
func (b *Batch) SentSeq() uint64 { return b.sentSeq.Load() }

// Sent reports whether the batch's commands have been written upstream.
func (b *Batch) Sent() bool { return b.sent.Load() }

// Stalled reports whether the batch waited on a connection marked stalled
// (Config.StallDivert): its replies may be long in coming, as behind a
// paused write, while other batches go around it.
func (b *Batch) Stalled() bool { return b.stalled.Load() }

// expectedBytes is the size of the batch's commands and of the replies
// its previous use got.
func (b *Batch) expectedBytes() int {
	n := b.lastReplies
	for _, cmd := range b.cmds {
		n += len(cmd)
	}
	return n
}

// NewBatch returns an empty batch.
func NewBatch() *Batch {
	return &Batch{done: make(chan struct{}, 1)}
}

// Reset empties the batch for reuse.
func (b *Batch) Reset() {
	b.ResetKeep()
	b.Shrink()
}

// ResetKeep empties the batch for reuse and keeps its reply buffer however
// large, for a session sending one client's long pipeline in parts: each
// part's replies then fill the same memory. Shrink gives it back after.
func (b *Batch) ResetKeep() {
	b.sent.Store(false)
	b.stalled.Store(false)
	b.parent = nil
	if len(b.cmds) > 0 {
		b.lastReplies = len(b.replies)
	}
	clear(b.cmds) // drop the references so the commands can be collected
	b.replies = b.replies[:0]
	b.replyEnds = b.replyEnds[:0]
	b.cmds = b.cmds[:0]
	b.slots = b.slots[:0]
}

// Shrink drops a reply buffer above maxRetained, so one huge reply does not
// pin its memory for the life of the session.
func (b *Batch) Shrink() { b.ShrinkTo(0) }

// ShrinkTo drops a reply buffer above maxRetained unless recent use (used
// bytes) needed a good part of it: a session in a burst of large replies
// keeps its buffer from one client read to the next, and gives it back
// after the first read that used little of it.
func (b *Batch) ShrinkTo(used int) {
	if cap(b.replies) > maxRetained && used < cap(b.replies)/4 {
		b.replies = nil
	}
}

// Add appends one command, already encoded as RESP. raw must stay unchanged
// until Pool.Do returns.
func (b *Batch) Add(raw []byte) {
	b.AddSlot(raw, SlotAny)
}

// AddSlot appends one command whose key hashes to slot (SlotAny: no key),
// so that a cluster Router sends it to the slot's master.
func (b *Batch) AddSlot(raw []byte, slot int) {
	b.cmds = append(b.cmds, raw)
	b.slots = append(b.slots, int32(slot))
}

// Slot returns the slot command i was added with.
func (b *Batch) Slot(i int) int { return int(b.slots[i]) }

// markSent marks the batch as sent with send sequence seq, for a batch that
// is split into other batches (Router): seq is read before any part is
// sent, so the batch claims an earlier send than any of its parts made,
// which keeps coalescing's windows conservative.
func (b *Batch) markSent(seq uint64) {
	b.sentSeq.Store(seq)
	b.sent.Store(true)
}

// appendReply appends the next command's reply (a Router assembling the
// replies of a batch it split).
func (b *Batch) appendReply(r []byte) {
	b.replies = append(b.replies, r...)
	b.replyEnds = append(b.replyEnds, len(b.replies))
}

// ReplyBytes is the size of the replies received so far.
func (b *Batch) ReplyBytes() int { return len(b.replies) }

// Len is the number of commands in the batch.
func (b *Batch) Len() int { return len(b.cmds) }

// Command returns command i as queued (a RESP array), for logging its name.
func (b *Batch) Command(i int) []byte { return b.cmds[i] }

// SetCommand replaces command i (same slot) before the batch is sent
// again; raw must stay unchanged until Pool.Do returns, as Add's.
func (b *Batch) SetCommand(i int, raw []byte) { b.cmds[i] = raw }

// Reply returns reply i. Valid after Wait returns, until Reset.
func (b *Batch) Reply(i int) []byte {
	start := 0
	if i > 0 {
		start = b.replyEnds[i-1]
	}
	return b.replies[start:b.replyEnds[i]]
}

// Rewrite replaces each reply for which f returns a new one (not nil),
// keeping the others; f sees the replies in order. Valid once every reply
// is in.
func (b *Batch) Rewrite(f func(i int, reply []byte) []byte) {
	var old []byte // the replies as they were, once one is replaced
	var ends []int
	n := len(b.replyEnds)
	for i := range n {
		var cur []byte
		if old == nil {
			cur = b.Reply(i)
		} else {
			cur = oldReply(old, ends, i)
		}
		r := f(i, cur)
		switch {
		case r == nil && old == nil:
			continue
		case r == nil:
			r = cur
		case old == nil: // the first one replaced: the rest are rebuilt
			old, ends = append([]byte(nil), b.replies...), append([]int(nil), b.replyEnds...)
			start := 0
			if i > 0 {
				start = ends[i-1]
			}
			b.replies, b.replyEnds = b.replies[:start], b.replyEnds[:i]
		}
		b.appendReply(r)
	}
}

func oldReply(replies []byte, ends []int, i int) []byte {
	start := 0
	if i > 0 {
		start = ends[i-1]
	}
	return replies[start:ends[i]]
}

// Wait blocks until every command has a reply (from Redis, or the error that
// failed its connection). It always returns: connections fail their waiting
// batches within the configured timeout.
func (b *Batch) Wait() { <-b.done }

// complete reports whether every command has its reply.
func (b *Batch) complete() bool { return len(b.replyEnds) == len(b.cmds) }

// fail gives every command still without a reply the error line, then
// signals completion. Only the batch's current owner may call it.
func (b *Batch) fail(errLine []byte) {
	b.fillErrors(errLine)
	b.done <- struct{}{}
}

// fillErrors gives every command still without a reply the error line.
func (b *Batch) fillErrors(errLine []byte) {
	b.truncateToComplete()
	for !b.complete() {
		b.replies = append(b.replies, errLine...)
		b.replyEnds = append(b.replyEnds, len(b.replies))
	}
}

// unavailable renders the error every failed command receives.
func unavailable(reason string) []byte {
	return resp.AppendError(nil, "ERR upstream unavailable: "+reason)
}
