package proxy

import (
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
// transaction marked; while watching keys (WATCH pins to their master)
// it gets CROSSSLOT, as a watched connection cannot run it elsewhere.
func (r *routing) crossSlotCommand(ss *session) bool {
	if !ss.multiSent && !ss.watching {
		return false
	}
	// By address: the pin may be of the other protocol's pool (HELLO
	// while pinned switches the connection, not the pool it came from).
	if ss.pinPool.Address() == r.cluster.MasterAddr(ss.slot&(upstream.Slots-1)) {
		return false
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
