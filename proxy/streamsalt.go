package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/salt"
)

// streamSaltWrites is salting's write bookkeeping in stream mode (client
// tracking, RESP3 pub/sub), where the session's commands go to Redis as
// they come and its replies are copied to the client by the relay: a
// write to a key that has salted copies begins before it is sent, as
// outside stream mode (salting.noteWrites), and ends, deleting the
// copies, before the client sees its reply. The relay holds that reply
// (the pin's: a marker before the command, as joinInStream; a branch's:
// its relayAnswer's then) and ends the writes when it is complete. A
// command whose reply is made elsewhere (a write sent to every master, an
// EXEC merged with other masters') ends its writes at a marker after it,
// and one whose reply the client turned off (CLIENT REPLY OFF or SKIP)
// ends them once sent: the copies are then deleted just after the client
// may have read the reply, and client tracking covers the rest.
//
// Only keys salted when the write is sent are begun (no pending bucket as
// outside stream mode): a key salted while such a write is under way has
// its copies filled from a read of the origin on the tier's tracking
// connection, whose push of the write deletes them.
type streamSaltWrites struct{ sa *salting }

func (st streamSaltWrites) command(ss *session, c *call) bool {
	st.sa.beginStreamWrites(ss, c)
	return false
}

func (streamSaltWrites) replies(*session) {}

// streamSaltState is a stream-mode session's salted writes: begun for the
// command going through the chain (next), and those sent whose replies
// have not come (open), which the session ends if it goes first.
type streamSaltState struct {
	next []salt.Write
	mu   sync.Mutex
	open map[*openSaltWrites]struct{}
}

// openSaltWrites is one command's salted writes, ended once.
type openSaltWrites struct {
	ended  atomic.Bool
	writes []salt.Write
}

// beginStreamWrites begins the writes of c's salted keys (a flush's of
// every key), or inside a transaction holds them until its EXEC, whose
// reply then ends them.
func (sa *salting) beginStreamWrites(ss *session, c *call) {
	info, args := c.info, c.cmd.Args
	if info == nil {
		return // a module's command: tracking follows what it writes
	}
	tx := ss.inTransaction()
	switch {
	case tx && info.Handling == command.Transaction && (info.Name == "exec" || info.Name == "discard"):
		ss.streamSalt.next = ss.route.txSalted.Take(ss.streamSalt.next)
	case info.Invalidates == command.InvalidatesAll:
		if tx {
			sa.engine.HoldFlush(&ss.route.txSalted)
		} else {
			ss.streamSalt.next = append(ss.streamSalt.next, sa.engine.BeginFlush())
		}
	case info.Invalidates == command.InvalidatesKeys || info.Invalidates == command.InvalidatesUnknown:
		keys, _ := command.Keys(keyInfo(c.table, info, args), args, ss.route.keys[:0])
		for _, k := range keys {
			if sa.engine.Lookup(k) == nil {
				continue
			}
			if tx {
				sa.engine.Hold(&ss.route.txSalted, k)
			} else {
				ss.streamSalt.next = append(ss.streamSalt.next, sa.engine.BeginWrite(k))
			}
		}
		clear(keys)
		ss.route.keys = keys[:0]
	}
}

// writesSalted reports whether the command writes a key that has salted
// copies (sa nil: salting is off).
func (sa *salting) writesSalted(table *command.Table, info *command.Info, args [][]byte) bool {
	if sa == nil || info.Invalidates != command.InvalidatesKeys && info.Invalidates != command.InvalidatesUnknown {
		return false
	}
	var buf [4][]byte
	keys, _ := command.Keys(keyInfo(table, info, args), args, buf[:0])
	for _, k := range keys {
		if sa.engine.Lookup(k) != nil {
			return true
		}
	}
	return false
}

// takeStreamWrites returns what ends the writes begun for the command
// being sent (nil: none), to be called once its reply is complete.
func (ss *session) takeStreamWrites(sa *salting) func() {
	st := &ss.streamSalt
	if len(st.next) == 0 {
		return nil
	}
	o := &openSaltWrites{writes: st.next}
	st.next = nil
	st.mu.Lock()
	if st.open == nil {
		st.open = make(map[*openSaltWrites]struct{})
	}
	st.open[o] = struct{}{}
	st.mu.Unlock()
	return func() { ss.endSaltWrites(sa, o) }
}

// endingFirst returns a reply rewrite that calls end (from
// takeStreamWrites) and then rewrite: rewrite itself when end is nil, and
// the reply as it is when rewrite is nil.
func endingFirst(end func(), rewrite func([]byte) []byte) func([]byte) []byte {
	if end == nil {
		return rewrite
	}
	return func(r []byte) []byte {
		end()
		if rewrite != nil {
			return rewrite(r)
		}
		return r
	}
}

// writesEndBeforeReply ties the writes begun for the command about to be
// sent on the pin to its reply, which the relay holds until they end (a
// marker before it, as joinInStream). Not an EXEC's or a DISCARD's (of a
// transaction the relay does not follow: streamTxEnd ties those): a marker
// before it would be queued in the transaction and abort it, so they end
// at one after it (Server.endStreamWritesAfter).
func (ss *session) writesEndBeforeReply(sa *salting, info *command.Info) {
	if info != nil && info.Handling == command.Transaction {
		return
	}
	end := ss.takeStreamWrites(sa)
	switch {
	case end == nil:
	case ss.streamAnswered():
		ss.relay.queue(relayAnswer{rewrite: endingFirst(end, nil), join: true})
		ss.streamCmds = append(ss.streamCmds, markerKeeping(cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds)))
		ss.streamHelpers++
	default:
		end() // no reply to hold (CLIENT REPLY OFF or SKIP)
	}
}

// endSaltWrites ends o's writes unless they have been.
func (ss *session) endSaltWrites(sa *salting, o *openSaltWrites) {
	if !o.ended.CompareAndSwap(false, true) {
		return
	}
	sa.engine.EndWrites(o.writes)
	ss.streamSalt.mu.Lock()
	delete(ss.streamSalt.open, o)
	ss.streamSalt.mu.Unlock()
}

// endStreamWritesAfter ends the writes the command just sent began, if no
// stage tied them to its reply: at a marker after it, or now if the client
// gets no reply.
func (s *Server) endStreamWritesAfter(ss *session) {
	end := ss.takeStreamWrites(s.salting)
	if end == nil {
		return
	}
	if !ss.streamAnswered() || ss.relay == nil {
		end()
		return
	}
	ss.relay.queue(relayAnswer{made: func() []byte { end(); return nil }})
	ss.streamCmds = append(ss.streamCmds, markerKeeping(cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds)))
	ss.streamHelpers++
}

// streamWritesGone ends the writes whose replies never came (the session
// or its stream is gone).
func (sa *salting) streamWritesGone(ss *session) {
	st := &ss.streamSalt
	if len(st.next) > 0 {
		sa.engine.EndWrites(st.next)
		st.next = nil
	}
	st.mu.Lock()
	open := make([]*openSaltWrites, 0, len(st.open))
	for o := range st.open {
		open = append(open, o)
	}
	st.mu.Unlock()
	for _, o := range open {
		ss.endSaltWrites(sa, o)
	}
}
