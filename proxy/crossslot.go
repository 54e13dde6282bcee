package proxy

import (
	"bytes"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// Transactions across masters on a cluster upstream. The facade shows
// clients one node owning every slot, and on such a node a transaction
// whose keys are in different slots is queued (+QUEUED for each command)
// and EXEC answers CROSSSLOT, discarding it. A pinned transaction lives on
// one master's connection: a command for another master's key would get
// that master's MOVED (and EXEC then EXECABORT), which a client cannot act
// on. So rproxy answers such a command +QUEUED itself, without sending it,
// and at EXEC sends DISCARD instead and answers CROSSSLOT. Keys of
// different slots on the pinned master are Redis's own CROSSSLOT at EXEC.

// crossSlotReply is Redis's error for keys of different slots.
var crossSlotReply = []byte("-CROSSSLOT Keys in request don't hash to the same slot\r\n")

var discardCmd = resp.AppendCommandString(nil, "DISCARD")

// crossSlotCommand handles a command of a pinned session (ss.slot set)
// whose key belongs to a master other than the pinned one, and reports
// whether it did: inside a transaction it is answered +QUEUED and the
// transaction marked. It leaves to the pin a command of a slot the pin's
// keys were in (the slot moved since: the pin's node redirects it, and
// followPinnedRedirects answers as one Redis would), and, while watching
// keys (WATCH pins to their master) outside a transaction, a command
// other than a blocking one: redirected there, it runs on the shared
// connections. A blocking one gets CROSSSLOT, as the watched connection
// cannot wait elsewhere.
func (r *routing) crossSlotCommand(ss *session, info *command.Info) bool {
	if !ss.multiSent && !ss.watching {
		return false
	}
	// By address: the pin may be of the other protocol's pool (HELLO
	// while pinned switches the connection, not the pool it came from).
	// A pin that followed an ASK serves the slot it asks for.
	slot := ss.slot & (upstream.Slots - 1)
	if ss.pinPool.Address() == r.cluster.MasterAddr(slot) || ss.pinAsking && slot == int(ss.pinAskSlot) {
		r.endKeyless(ss) // the transaction's first key is here: it stays
		ss.notePinSlot(slot)
		return false
	}
	if ss.pinServed(slot) || !ss.multiSent && info.Handling == command.Forward {
		return false
	}
	if ss.multiSent && ss.route.keylessTx && ss.pinHoldsAtMostATransaction() {
		return r.moveTransaction(ss)
	}
	ss.slot = upstream.SlotAny
	if ss.multiSent {
		ss.route.crossSlotTx = true
		ss.reply([]byte("+QUEUED\r\n"))
		return true
	}
	ss.reply(crossSlotReply)
	return true
}

// crossSlotEnd ends a transaction marked by crossSlotCommand: EXEC is sent
// as DISCARD (its reply dropped) and answered CROSSSLOT; DISCARD clears
// the mark and goes on. It reports whether it answered the command.
func (r *routing) crossSlotEnd(ss *session, info *command.Info) bool {
	if !ss.route.crossSlotTx {
		return false
	}
	switch info.Name {
	case "discard":
		ss.route.crossSlotTx = false
	case "exec":
		ss.route.crossSlotTx = false
		ss.batch.AddSlot(discardCmd, upstream.SlotAny)
		ss.order = append(ss.order, replySource{from: fromDiscard})
		ss.track = append(ss.track, track{kind: trackExec})
		ss.multiSent = false
		ss.reply(crossSlotReply)
		return true
	}
	return false
}

// A transaction typed command by command (redis-cli, Redis's own test
// client) whose first commands have no key (MULTI, PING, SET k v, EXEC)
// was sent to any master with the first of them, and the first key, on
// another master, then made EXEC fail with CROSSSLOT, where one node
// runs it. While every command queued is keyless, which master runs them
// makes no difference (each master has the same commands and settings),
// so the transaction moves: it is discarded where it is and queued again,
// those commands first, on the first key's master.

// maxKeylessBytes bounds the commands kept for a move; past it a
// transaction stays where it is (CROSSSLOT at EXEC as before).
const maxKeylessBytes = 64 << 10

// noteKeyless keeps a copy of c, a keyless command queued in a
// transaction that may still move (keylessTx), and ends that state with
// the transaction.
func (r *routing) noteKeyless(ss *session, c *call) {
	if !ss.route.keylessTx {
		return
	}
	if !ss.inTransaction() || c.info != nil && (c.info.Name == "exec" || c.info.Name == "discard") {
		r.endKeyless(ss)
		return
	}
	if !ss.route.noKeys {
		return
	}
	if ss.route.keylessBytes += len(c.cmd.Raw); ss.route.keylessBytes > maxKeylessBytes {
		r.endKeyless(ss)
		return
	}
	ss.route.keyless = append(ss.route.keyless, bytes.Clone(c.cmd.Raw))
}

// endKeyless ends keylessTx: the transaction stays on its master.
func (r *routing) endKeyless(ss *session) {
	ss.route.keylessTx, ss.route.keyless, ss.route.keylessBytes = false, nil, 0
}

// moveTransaction moves the open transaction, all of whose commands so
// far are keyless, to the master of the command being routed (ss.slot):
// DISCARD where it is, then MULTI and those commands again on a
// connection to that master, their replies dropped (the client has had
// the first ones). It reports whether it answered the command itself (no
// connection to that master: the error).
func (r *routing) moveTransaction(ss *session) bool {
	slot, queued := ss.slot, ss.route.keyless
	r.endKeyless(ss)
	ss.batch.AddSlot(discardCmd, upstream.SlotAny)
	ss.order = append(ss.order, replySource{from: fromDiscard})
	ss.track = append(ss.track, track{kind: trackExec})
	r.flush(ss) // the pin, holding nothing else (crossSlotCommand), goes back
	if !r.pin(ss, slot) {
		return true // its error is the command's reply; EXEC finds no transaction
	}
	ss.slot = slot
	ss.batch.AddSlot(ss.route.multiRaw, slot)
	ss.order = append(ss.order, replySource{from: fromDiscard})
	ss.track = append(ss.track, track{kind: trackMulti})
	for _, raw := range queued {
		ss.batch.AddSlot(raw, slot)
		ss.order = append(ss.order, replySource{from: fromDiscard})
		ss.track = append(ss.track, track{})
	}
	ss.multiSent = true
	return false
}
