package proxy

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// A pinned session's commands can meet a MOVED or an ASK that movePin
// cannot follow, its pin holding a WATCH or an open transaction from
// before: the key moved to another node between the WATCH or the MULTI
// and the command (a reshard). Rather than answer the client TRYAGAIN,
// which a client of one Redis does not expect, rproxy answers as one Redis
// would have (followPinnedRedirects):
//
//   - a command outside a transaction runs on the shared connections,
//     which follow the redirect (a GET between the WATCH and the MULTI);
//   - a command queued in the transaction is answered +QUEUED, as it
//     would have been where its key now is, and Redis discards the
//     transaction at EXEC (EXECABORT, or the EXEC's own redirect). Then,
//     under a WATCH, the EXEC is answered with a null array, as when a
//     watched key changed: the key moved, which changed it on the node
//     watching it (MIGRATE deletes it there); if it did not exist, the
//     client only retries once more, as it does for any failed watch.
//     Without one, the transaction runs again whole on the shared
//     connections, which follow the redirect, and its EXEC's reply is the
//     client's.
//
// Not while the session tracks keys on its pin (reads elsewhere would not
// be tracked), nor for a blocking command, nor once a queued command got
// another error (the EXEC's EXECABORT is the client's answer then).

// maxPinSlots bounds the slots a pin remembers its keys in (pinSlots).
const maxPinSlots = 64

// notePinSlot notes that the session's pin ran a command of slot's keys.
func (ss *session) notePinSlot(slot int) {
	if len(ss.pinSlots) < maxPinSlots && !ss.pinServed(slot) {
		ss.pinSlots = append(ss.pinSlots, slot)
	}
}

// pinServed reports whether the session's pin ran a command of slot's
// keys: a command of it that routing now finds elsewhere is for a slot
// that moved since, and goes to the pin all the same.
func (ss *session) pinServed(slot int) bool { return slices.Contains(ss.pinSlots, slot) }

// maxPinnedTxLog bounds the copies of an open transaction's queued
// commands a session keeps to run it again; past it, a redirect inside
// that transaction is answered TRYAGAIN, as before.
const maxPinnedTxLog = 1 << 20

// pinnedTx follows a pinned session's open transaction on a cluster.
type pinnedTx struct {
	cmds  [][]byte // copies of the commands queued so far
	size  int
	moved bool // a queued command was redirected and answered +QUEUED
	slot  int  // the slot the last redirect named
	lost  bool // a queued command got an error, or cmds overflowed: no replay
}

func (tx *pinnedTx) reset() {
	clear(tx.cmds)
	tx.cmds, tx.size, tx.moved, tx.lost = tx.cmds[:0], 0, false, false
}

// queue notes cmd, queued in the transaction; false once the log is full.
func (tx *pinnedTx) queue(cmd []byte) bool {
	if tx.lost || tx.size+len(cmd) > maxPinnedTxLog {
		tx.lost = true
		return false
	}
	tx.cmds = append(tx.cmds, append([]byte(nil), cmd...))
	tx.size += len(cmd)
	return true
}

var (
	queuedReply   = []byte("+QUEUED\r\n")
	execAbortPref = []byte("-EXECABORT")
)

// followPinnedRedirects answers the redirects of the batch just run on the
// session's pin as the comment above says; the others stay for
// HideRedirects. What runs elsewhere runs when its reply's turn comes in
// the client's order (runInTurn), after what the commands before it do
// elsewhere (a FLUSHALL under a WATCH flushes the other masters then:
// clustertx.go).
func (s *Server) followPinnedRedirects(ss *session, rt *upstream.Router) {
	n := ss.batch.Len()
	if len(ss.track) != n || ss.tracking.pinTracked {
		return
	}
	table := s.table.Load()
	in, watching := ss.inMulti, ss.watching
	var answers map[int][]byte // replies to replace now
	answer := func(i int, r []byte) {
		if answers == nil {
			answers = map[int][]byte{}
		}
		answers[i] = r
	}
	for i, t := range ss.track {
		r := ss.batch.Reply(i)
		slot, redirected := upstream.RedirectSlot(r)
		switch {
		case t.kind == trackMulti && !in:
			if string(r) == "+OK\r\n" {
				in = true
				ss.pinTx.reset()
			}
		case t.kind == trackExec && in:
			in = false
			tx := &ss.pinTx
			isExec := bytes.EqualFold(rawCommandName(ss.batch.Command(i)), []byte("exec"))
			if isExec && (tx.moved || redirected) && !tx.lost && (redirected || bytes.HasPrefix(r, execAbortPref)) {
				if watching {
					answer(i, nullArray(ss.proto))
				} else if txSlot := tx.slotOf(slot); txSlot >= 0 {
					cmds := tx.cmds
					tx.cmds = nil // kept by the run
					ss.runInTurn(i, func() []byte { return runTransaction(rt, cmds, txSlot) })
				}
			}
			watching = false
			tx.reset()
		case in:
			switch {
			case bytes.Equal(r, queuedReply):
				ss.pinTx.queue(ss.batch.Command(i))
			case redirected:
				if ss.pinTx.queue(ss.batch.Command(i)) {
					ss.pinTx.moved, ss.pinTx.slot = true, slotNumber(slot)
					answer(i, queuedReply)
				}
			case len(r) > 0 && r[0] == '-':
				ss.pinTx.lost = true
			}
		case t.kind == trackWatch:
			watching = watching || string(r) == "+OK\r\n"
		case t.kind == trackUnwatch:
			watching = false
		case redirected && t.kind == trackNone:
			if info := table.Lookup(rawCommandName(ss.batch.Command(i))); info != nil && info.Handling == command.Forward {
				raw, cmdSlot := bytes.Clone(ss.batch.Command(i)), ss.batch.Slot(i)
				ss.runInTurn(i, func() []byte { return runAlone(rt, raw, cmdSlot) })
			}
		}
	}
	if answers != nil {
		ss.batch.Rewrite(func(i int, _ []byte) []byte { return answers[i] })
	}
}

// runInTurn makes the client's reply to the batch's command i with run,
// called when that reply's turn comes in flush, instead of Redis's (a
// redirect). A reply already made from several (a merge) is left as it is.
func (ss *session) runInTurn(i int, run func() []byte) {
	up := 0
	for j, o := range ss.order {
		switch o.from {
		case fromUpstream:
			if up == i {
				ss.queueMergeAt(j, merge{kind: mergeRedone, parts: 1, made: run})
				return
			}
			up++
		case fromDiscard:
			up++
		case fromMerge:
			up += ss.route.merges[o.idx].parts
		}
		if up > i {
			return
		}
	}
}

// slotOf is the slot the transaction runs again in: the one the EXEC's
// redirect names (execSlot, "" if it was no redirect), else the last one
// a queued command's named; -1 if none.
func (tx *pinnedTx) slotOf(execSlot string) int {
	slot := tx.slot
	if execSlot != "" {
		slot = slotNumber(execSlot)
	}
	if slot < 0 || slot >= upstream.Slots {
		return -1
	}
	return slot
}

// runAlone runs raw, a command of slot, on the shared connections (which
// follow redirects) and returns its reply.
func runAlone(rt *upstream.Router, raw []byte, slot int) []byte {
	b := upstream.NewBatch()
	b.AddSlot(raw, slot)
	rt.Do(b)
	return bytes.Clone(b.Reply(0))
}

// runTransaction runs cmds as a transaction of slot on the shared
// connections (marked as one, so the Router sends it again whole after a
// redirect) and returns its EXEC's reply.
func runTransaction(rt *upstream.Router, cmds [][]byte, slot int) []byte {
	tx := upstream.InTransaction | slot
	b := upstream.NewBatch()
	b.AddSlot(multiCmd, tx|upstream.TransactionStart)
	for _, c := range cmds {
		b.AddSlot(c, tx)
	}
	b.AddSlot(execCmd, tx)
	rt.Do(b)
	return bytes.Clone(b.Reply(b.Len() - 1))
}

var (
	multiCmd = resp.AppendCommandString(nil, "MULTI")
	execCmd  = resp.AppendCommandString(nil, "EXEC")
)

// slotNumber reads a redirect's slot (-1 if it names none: not a number,
// or out of a cluster's 16,384).
func slotNumber(slot string) int {
	n, err := strconv.Atoi(slot)
	if err != nil || n < 0 || n >= 1<<14 {
		return -1
	}
	return n
}

// nullArray is Redis's null array in protocol proto (a failed watch's EXEC).
func nullArray(proto int) []byte {
	if proto == 3 {
		return []byte("_\r\n")
	}
	return []byte("*-1\r\n")
}
