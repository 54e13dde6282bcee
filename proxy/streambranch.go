package proxy

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// Client tracking (and RESP3 pub/sub) across a cluster's masters. A
// session in stream mode runs on one master's connection (its pin). A
// client that tracks keys (CLIENT TRACKING ON, RESP3, no REDIRECT) reads
// keys of every master, and Redis tracks a key only on the node that holds
// it, for the connection that read it. So a RESP3 stream session's command
// for another master's key goes to a connection of the session's own on
// that master (a branch), on which tracking is turned on as on the pin;
// the branch's invalidation pushes are passed to the client as they come,
// between whole replies, and its replies are put in their place among the
// pin's: the pin is sent errorCmd in the command's place, and the relay
// shows the branch's reply for Redis's answer to it, once the reply has
// come (relayAnswer.later). A RESP3 subscriber's reads of other masters'
// keys go the same way.
//
// A branch that fails closes the client: the invalidations of the keys
// read through it would be lost, and a client's cache is only dropped when
// its connection is (as when its own connection to Redis ends).

// streamBranch is a session's connection to one master other than its
// pin's, in stream mode.
type streamBranch struct {
	pool    *upstream.Pool
	d       *upstream.Dedicated
	dropped atomic.Bool // closed by the session: the client stays

	mu      sync.Mutex
	waiting []*branchReply // replies to come, in order; nil: dropped
	err     error          // the copy ended: every reply from now on is this

	// The copy goroutine's own state.
	relay  *streamRelay
	frames frames
}

// branchReply is a reply that comes on a branch, for the relay to show in
// its command's place.
type branchReply struct {
	done  chan struct{}
	reply []byte
}

// wait returns the reply once it has come.
func (r *branchReply) wait() []byte {
	<-r.done
	return r.reply
}

// send writes cmds to the branch; want says, per command, whether its reply
// is shown to the client (a branchReply) or dropped (nil).
func (b *streamBranch) send(cmds [][]byte, want []bool) []*branchReply {
	replies := make([]*branchReply, len(cmds))
	b.mu.Lock()
	for i := range cmds {
		if want[i] {
			replies[i] = &branchReply{done: make(chan struct{})}
		}
		if b.err != nil {
			if replies[i] != nil {
				replies[i].reply = branchError(b.err)
				close(replies[i].done)
			}
			continue
		}
		b.waiting = append(b.waiting, replies[i])
	}
	failed := b.err != nil
	b.mu.Unlock()
	if !failed {
		if err := b.d.Send(cmds); err != nil {
			b.fail(err) // the copy ends too, and fails what is left
		}
	}
	return replies
}

// Write is the copy goroutine's: pushes go to the client as they come,
// replies to their waiters, in order.
func (b *streamBranch) Write(p []byte) (int, error) {
	err := b.frames.each(p, func(reply []byte, kind byte) error {
		if kind == '>' {
			return b.relay.writeFrame(reply)
		}
		if slot, redirect := upstream.RedirectSlot(reply); redirect {
			reply = streamRedirectError(slot) // moved since the branch was chosen
		}
		b.mu.Lock()
		if len(b.waiting) == 0 {
			b.mu.Unlock()
			return errors.New("a reply on a tracking branch that no command asked for")
		}
		w := b.waiting[0]
		b.waiting[0] = nil
		b.waiting = b.waiting[1:]
		b.mu.Unlock()
		if w != nil {
			w.reply = reply
			close(w.done)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// frames cuts a connection's stream into whole RESP frames, across the
// writes of its copy goroutine.
type frames struct {
	fr  resp.Framer
	cur []byte // the frame being read
}

// each calls f with every frame p completes, in order, and its type byte.
func (fs *frames) each(p []byte, f func(frame []byte, kind byte) error) error {
	for i := 0; i < len(p); {
		k, done, err := fs.fr.Next(p[i:])
		if err != nil {
			return err
		}
		fs.cur = append(fs.cur, p[i:i+k]...)
		i += k
		if !done {
			continue
		}
		frame := fs.cur
		fs.cur = nil
		if err := f(frame, fs.fr.Kind()); err != nil {
			return err
		}
	}
	return nil
}

// fail ends the branch: replies still to come and later ones are err.
func (b *streamBranch) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	waiting := b.waiting
	b.waiting = nil
	b.mu.Unlock()
	for _, w := range waiting {
		if w != nil {
			w.reply = branchError(err)
			close(w.done)
		}
	}
}

func branchError(err error) []byte {
	return resp.AppendError(nil, "ERR upstream unavailable: "+err.Error())
}

// branching reports whether the session's commands may go to branches: a
// cluster upstream, a session that is not MONITOR or a replica, and either
// RESP3 (tracking keys without REDIRECT, or not tracking: pub/sub, or
// tracking turned off) or RESP2 neither tracking nor subscribed (it
// unsubscribed from everything, or sent an UNSUBSCRIBE first: Redis runs
// any command there, so rproxy must too). Tracking with REDIRECT sends
// invalidations to a connection on one node only; in RESP2 a subscribed
// connection runs no other command. After CLIENT REPLY OFF commands still
// go where their keys are, their replies dropped (sendOnBranch): on the
// pin they would not run at all.
func (s *Server) branching(ss *session) bool {
	if s.cfg.Cluster == nil || ss.role != 0 || ss.pinPool == nil {
		return false
	}
	if ss.proto == 2 {
		return ss.redirect == -1 && !ss.resp2Subscribed()
	}
	return ss.redirect == -1 || ss.redirect == 0 && ss.trackingCmd != nil
}

// commandKeys is what masterOf found of a command's keys.
type commandKeys uint8

const (
	keysNone     commandKeys = iota // none
	keysOneSlot                     // all in one slot
	keysNotPlain                    // across slots (Redis's CROSSSLOT, from the pin), or not a plain command
)

// masterOf returns the pool of the master a plain command's keys are on
// (Handling Forward; INFO is rewritten), when they are all in one slot.
func (s *Server) masterOf(ss *session, info *command.Info, args [][]byte) (*upstream.Pool, commandKeys) {
	if info == nil || info.Handling != command.Forward || info.Name == "info" {
		return nil, keysNotPlain
	}
	return s.keysMaster(ss, info, args)
}

// keysMaster is masterOf for any command with keys (WATCH too).
func (s *Server) keysMaster(ss *session, info *command.Info, args [][]byte) (*upstream.Pool, commandKeys) {
	keys, _ := command.Keys(keyInfo(s.table.Load(), info, args), args, ss.route.keys[:0])
	defer func() {
		clear(keys)
		ss.route.keys = keys[:0]
	}()
	if len(keys) == 0 {
		return nil, keysNone
	}
	slot := upstream.Slot(keys[0])
	for _, k := range keys[1:] {
		if upstream.Slot(k) != slot {
			return nil, keysNotPlain
		}
	}
	return ss.pools[ss.proto].PinPool(slot), keysOneSlot
}

// branchTransaction returns the branch pool a MULTI starting now goes to:
// one whose transaction ends (EXEC or DISCARD) in the same read, with only
// plain commands (masterOf), keyless ones or keys of one master other
// than the pin's (client libraries send a cached read as CLIENT CACHING
// YES, MULTI, PTTL, GET, EXEC). nil: on the pin, as before.
func (s *Server) branchTransaction(ss *session) *upstream.Pool {
	if ss.streamWatch || ss.watching {
		return nil // a WATCH holds on the pin's master: the transaction goes there
	}
	table := s.table.Load()
	var pool *upstream.Pool
	for _, c := range ss.route.rest[ss.route.restAt:] {
		info := table.Lookup(c.Args[0])
		if info != nil && (info.Name == "exec" || info.Name == "discard") {
			return pool
		}
		p, keys := s.masterOf(ss, info, c.Args)
		switch {
		case keys == keysNotPlain:
			return nil
		case keys == keysNone:
		case p == ss.pinPool || pool != nil && p != pool:
			return nil
		default:
			pool = p
		}
	}
	return nil
}

// onBranch sends c on a branch when it belongs there, reporting true: the
// rest of a transaction sent on one, a WATCH of another master's keys (and
// the transaction after it, and its UNWATCH), a transaction of another
// master's keys (branchTransaction), or a plain command of another
// master's keys (masterOf).
func (s *Server) onBranch(ss *session, c *call) bool {
	info := c.info
	if pool := ss.branchTx; pool != nil {
		if info != nil && (info.Handling == command.Reset || info.Handling == command.Quit) {
			return false // run at once, inside MULTI too, as on Redis: RESET drops the branches
		}
		if info != nil && info.Handling != command.Forward && info.Handling != command.Transaction {
			// Answered or acted on by rproxy on the session's own
			// connection (CLIENT, HELLO, SUBSCRIBE...): not inside another
			// master's transaction. The refusal aborts it (EXECABORT).
			s.refuseMsg(ss, strings.ToUpper(commandLabel(info, c.cmd.Args))+" inside a transaction on another cluster master than this connection's is not supported through rproxy; send it before MULTI or after EXEC")
			return true
		}
		if info != nil && info.Handling == command.Transaction {
			ss.noteTransaction(info.Name)
			if !ss.multiSent { // EXEC or DISCARD: the WATCH ends too
				ss.branchTx, ss.watchPool = nil, nil
			}
		}
		s.sendOnBranch(ss, c, pool)
		return true
	}
	// A WATCH on a branch keeps its transaction there even if the session
	// may no longer branch (HELLO 2): on the pin, EXEC would run unwatched.
	branching := s.branching(ss)
	if info == nil || ss.inTransaction() || ss.watchPool == nil && !branching {
		return false
	}
	switch info.Name {
	case "multi":
		pool := ss.watchPool // a WATCH holds there: the transaction goes there whole
		if pool == nil {
			pool = s.branchTransaction(ss)
		}
		if pool == nil || !s.hasBranch(ss, pool) {
			return false
		}
		ss.noteTransaction(info.Name)
		ss.branchTx = pool
		s.sendOnBranch(ss, c, pool)
		return true
	case "watch":
		pool := ss.watchPool // later WATCHes go where the first went (other masters' keys: an error there)
		if pool == nil && branching && !ss.streamWatch && !ss.watching {
			if p, keys := s.keysMaster(ss, info, c.cmd.Args); keys == keysOneSlot && p != ss.pinPool && s.hasBranch(ss, p) {
				pool = p
			}
		}
		if pool == nil {
			return false
		}
		ss.watchPool = pool
		s.sendOnBranch(ss, c, pool)
		return true
	case "unwatch":
		pool := ss.watchPool
		if pool == nil {
			return false
		}
		ss.watchPool = nil
		s.sendOnBranch(ss, c, pool)
		return true
	}
	if !branching {
		return false
	}
	// A plain command (not the connection's own business) whose keys are
	// all in one slot of another master than the pin's: tracked there.
	// Anything else goes to the pin as before.
	if pool, keys := s.masterOf(ss, info, c.cmd.Args); keys == keysOneSlot && pool != ss.pinPool {
		s.sendOnBranch(ss, c, pool)
		return true
	}
	return false
}

// sendOnBranch sends c on the session's branch to pool (made on first use)
// and queues, in the pin's stream, the place its reply is shown in. A
// CLIENT CACHING flag the pin holds for the client's next command goes to
// the branch first, as the command does.
func (s *Server) sendOnBranch(ss *session, c *call, pool *upstream.Pool) {
	b, err := s.branch(ss, pool)
	if err != nil {
		r := branchError(err)
		ss.answerInStream(r, func() []byte { return scriptError(r) })
		return
	}
	// After CLIENT REPLY OFF or SKIP the client gets no reply: the
	// branch's is dropped, and the pin answers nothing.
	answered := ss.streamAnswered()
	cmds, want := [][]byte{c.cmd.Raw}, []bool{answered}
	if ss.lastCaching != nil && cachingHeldAfter(ss.cachingSent, ss.streamCmds) {
		cmds, want = [][]byte{ss.lastCaching, c.cmd.Raw}, []bool{false, answered}
	}
	replies := b.send(cmds, want)
	if answered {
		ss.relay.queue(relayAnswer{later: replies[len(replies)-1]})
	}
	// errorCmd drops the pin's CLIENT CACHING flag, as the command does.
	ss.streamCmds = append(ss.streamCmds, errorCmd)
}

// branch returns the session's branch to pool, making it: a dedicated
// connection of the pool (in the session's protocol, as its user), with
// tracking turned on as the client last turned it on, if it is on.
func (s *Server) branch(ss *session, pool *upstream.Pool) (*streamBranch, error) {
	if b := ss.branchTo(pool); b != nil {
		return b, nil
	}
	d, err := pool.Acquire(context.Background())
	if err != nil {
		return nil, err
	}
	if ss.trackingCmd != nil {
		batch := &upstream.Batch{}
		batch.Add(ss.trackingCmd)
		d.Do(batch, s.cfg.Upstream.Timeout)
		if r := batch.Reply(0); !bytes.Equal(r, []byte("+OK\r\n")) {
			pool.Discard(d)
			return nil, errors.New("tracking refused on another master: " + string(bytes.TrimSpace(r)))
		}
	}
	b := &streamBranch{pool: pool, d: d, relay: ss.relay}
	ss.branches = append(ss.branches, b)
	nc := ss.conn.NetConn()
	go func() {
		err := d.StreamTo(b)
		b.fail(err)
		if !b.dropped.Load() {
			nc.Close() // its keys' invalidations are lost: the client drops its cache
		}
	}()
	return b, nil
}

// branchTo returns the session's branch to pool, nil if it has none.
func (ss *session) branchTo(pool *upstream.Pool) *streamBranch {
	for _, b := range ss.branches {
		if b.pool == pool {
			return b
		}
	}
	return nil
}

// hasBranch reports whether the session has, or can make, a branch to
// pool.
func (s *Server) hasBranch(ss *session, pool *upstream.Pool) bool {
	_, err := s.branch(ss, pool)
	return err == nil
}

// toBranches sends cmd to every branch, its replies dropped: a CLIENT
// TRACKING, CACHING or HELLO the client sent, which Redis applies to the
// client's connection.
func (ss *session) toBranches(cmd []byte) {
	for _, b := range ss.branches {
		b.send([][]byte{cmd}, []bool{false})
	}
}

// dropBranches closes the session's branches (RESET, or the client left),
// and with them a transaction or WATCH sent on one.
func (ss *session) dropBranches() {
	ss.dropNotifyBranches()
	for _, b := range ss.branches {
		b.dropped.Store(true)
		b.pool.Discard(b.d)
	}
	ss.branches, ss.branchTx, ss.watchPool = nil, nil, nil
}

// noteCaching remembers a CLIENT CACHING the client sent, for the branch
// its next command may go to.
func (ss *session) noteCaching(args [][]byte, raw []byte) {
	if len(args) > 1 && bytes.EqualFold(args[1], []byte("caching")) {
		ss.lastCaching = bytes.Clone(raw)
	}
}

// trackingOn returns the command that turns tracking on as args does, for
// a branch (nil: args turn it off, or redirect).
func trackingOn(args [][]byte) []byte {
	if len(args) < 3 || !bytes.EqualFold(args[2], []byte("on")) {
		return nil
	}
	if slices.ContainsFunc(args[3:], func(a []byte) bool { return bytes.EqualFold(a, []byte("redirect")) }) {
		return nil
	}
	return resp.AppendCommand(nil, args...)
}
