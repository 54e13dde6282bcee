package proxy

import (
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/upstream"
)

// A transaction a client sends whole in one write (MULTI, its commands,
// EXEC: what go-redis's TxPipelined, redis-py's default pipeline and
// ioredis's multi().exec() send) goes on the shared connections, in the
// session's batch, instead of taking a connection of its own: a batch is
// written to one shared connection in one piece (upstream.Pool.Send), so
// no other client's command lands between its MULTI and its EXEC, and
// Redis runs it as it would on the client's own connection. Pinning it
// cost a dedicated connection's round trip per transaction, which no other
// client's commands share (bench/results/2026-11-29/shared-tx.md).
//
// Only a transaction whose every command rproxy forwards as it comes and
// that leaves the connection as it found it qualifies; nothing in it may
// make the session send its batch early (a blocking command, a SELECT, a
// command rproxy answers, a WATCH or a nested MULTI), and no policy rule
// may name any of its commands. Anything else, and a transaction whose
// EXEC comes in a later read, pins as before.

// maxSharedTransaction bounds the commands of a transaction sent on the
// shared connections: its replies are kept whole in the batch (boundReplies
// does not split it), as a pinned transaction's EXEC reply is.
const maxSharedTransaction = 1024

// sharedTransaction reports whether the MULTI being dispatched opens a
// transaction that may go on the shared connections: its EXEC or DISCARD
// comes later in the same read, and only plain forwarded commands lie
// between. On a cluster their keys must all be in one slot, whose
// master's connections it goes on (the slot is returned; SlotAny
// elsewhere); a transaction without a key pins there, as before, and so
// does every one while salted copies are on (their writes' bookkeeping is
// routing's).
func (s *Server) sharedTransaction(ss *session) (int, bool) {
	slot := upstream.SlotAny
	if ss.pin != nil || ss.stream || s.pauses.active() || ss.route.restAt > len(ss.route.rest) ||
		s.routing != nil && (s.salting != nil || ss.route.multiPending) {
		return slot, false
	}
	// A command a policy rule names pins the transaction: the rule could
	// refuse its EXEC (leaving it open) or rewrite a command into one that
	// sends the batch early.
	pol := s.policing.current.Load()
	if pol != nil && pol.Names("multi") {
		return slot, false
	}
	table := s.table.Load()
	var keys [][]byte
	for i, cmd := range ss.route.rest[ss.route.restAt:] {
		if i >= maxSharedTransaction {
			return slot, false
		}
		info := table.Lookup(cmd.Args[0])
		if info == nil || pol != nil && pol.Names(info.Name) {
			return slot, false
		}
		switch info.Handling {
		case command.Transaction:
			// One with arguments is refused, and leaves the transaction open.
			ends := (info.Name == "exec" || info.Name == "discard") && len(cmd.Args) == 1
			return slot, ends && (s.routing == nil || slot != upstream.SlotAny)
		case command.Forward:
			if !leavesConnectionAsFound(info) || info.Name == "script" && startsScriptDebugging(cmd.Args) {
				return slot, false
			}
			if s.routing != nil {
				var fits bool
				if keys, fits = s.routing.sharedTransactionFits(table, info, cmd.Args, &slot, keys); !fits {
					return slot, false
				}
			}
		default:
			return slot, false
		}
	}
	return slot, false
}

// openSharedTransaction notes, on a cluster, the slot of a transaction
// sharedTransaction let go on the shared connections: its MULTI and every
// command up to its EXEC go to that slot's master (routing).
func (s *Server) openSharedTransaction(ss *session, slot int) {
	if s.routing == nil {
		return
	}
	ss.route.sharedTx, ss.route.sharedTxSlot = true, slot
	ss.slot = slot | upstream.InTransaction | upstream.TransactionStart
}

// sharedTxSlot is the slot a command rproxy adds to the session's open
// transaction goes with (a poison command, a DISCARD): on a cluster, when
// the transaction is on the shared connections, its master's, marked
// upstream.InTransaction; otherwise SlotAny (the pin takes it).
func (ss *session) sharedTxSlot() int {
	if ss.route.sharedTx {
		return ss.route.sharedTxSlot | upstream.InTransaction
	}
	return upstream.SlotAny
}

// sharedTransactionOpen reports whether the session has a transaction open
// on the shared connections (sharedTransaction): nothing may send its batch
// before the EXEC is queued.
func (s *Server) sharedTransactionOpen(ss *session) bool {
	// On a cluster a MULTI typed alone is answered, not yet sent (deferMulti),
	// with no pin either: routing knows which is which.
	return ss.multiSent && ss.pin == nil && !ss.stream && (s.routing == nil || ss.route.sharedTx)
}

// closeSharedTransaction ends a transaction still open on the shared
// connections when the read's commands are done, which sharedTransaction
// rules out: a DISCARD goes after it, its reply not shown, so that no
// other client's commands are queued in it. The client, whose EXEC was
// refused here, is told at its next EXEC or DISCARD by Redis's error.
func (s *Server) closeSharedTransaction(ss *session) {
	s.log.Warn("a transaction sent on a shared connection was still open after its read: discarded",
		zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id))
	ss.batch.AddSlot(discardCmd, ss.sharedTxSlot())
	ss.route.sharedTx = false
	ss.order = append(ss.order, replySource{from: fromDiscard})
	ss.multiSent = false
}
