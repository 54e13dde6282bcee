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
	"go.uber.org/zap"
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
//
// A session's SSUBSCRIBE or SUNSUBSCRIBE of another master's shard
// channels goes to its branch there too, in RESP2's subscribed mode as
// well (streamshard.go).

// streamBranch is a session's connection to one master other than its
// pin's, in stream mode.
type streamBranch struct {
	pool    *upstream.Pool
	d       *upstream.Dedicated
	dropped atomic.Bool // closed by the session: the client stays
	tracks  bool        // made with tracking on (a flush invalidates its client)
	// dropNulls counts the flush invalidations to come on the branch that
	// are not shown: a FLUSHALL or FLUSHDB the session sent every master
	// invalidates its every tracking connection, and one Redis sends one
	// (streamfanout.go).
	dropNulls atomic.Int32

	mu      sync.Mutex
	waiting []*branchReply // replies to come, in order; nil: dropped
	err     error          // the copy ended: every reply from now on is this

	// The copy goroutine's own state.
	relay  *streamRelay
	frames frames
	last   *branchReply // the last reply come that the relay shows
}

// branchReply is a reply that comes on a branch, for the relay to show in
// its command's place.
type branchReply struct {
	done  chan struct{}
	reply []byte
	// follow, for a plain command, runs it where a redirect says and
	// makes its reply (streamasked.go); nil: rproxy's error instead. It is
	// run by the relay in the reply's turn (redirected: the slot the
	// redirect named, the reply Redis's redirect until then).
	follow     func(slot int) []byte
	redirected bool
	slot       int

	// shard: for an SSUBSCRIBE or SUNSUBSCRIBE (streamshard.go), the
	// branch's master, whose confirmations make the reply: shardLeft more
	// of them, or with shardAll every one until the branch's count is 0.
	// unshown: not shown to the client (CLIENT REPLY OFF).
	shard     string
	shardLeft int
	shardAll  bool
	unshown   bool

	// The pushes Redis sent after it on the branch before the relay
	// showed it, to show after it: Redis sends an invalidation its own
	// command caused after that command's reply.
	mu    sync.Mutex
	shown bool
	after []byte
}

// wait returns the reply once it has come.
func (r *branchReply) wait() []byte {
	<-r.done
	return r.reply
}

// followInTurn runs, once the reply has come, the command Redis redirected
// where the redirect says (follow), for the relay when the reply's turn
// comes: after everything the session's commands before it did, on every
// master.
func (r *branchReply) followInTurn() {
	<-r.done
	if r.redirected {
		r.reply, r.redirected = r.follow(r.slot), false
	}
}

// holdPush keeps push to show after the reply, reporting false if the
// reply has been shown (push then goes as it comes).
func (r *branchReply) holdPush(push []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shown {
		return false
	}
	r.after = append(r.after, push...)
	return true
}

// show returns the reply and the pushes held after it, now to be written;
// later pushes go as they come.
func (r *branchReply) show() []byte {
	reply, after := r.showApart()
	if len(after) == 0 {
		return reply
	}
	return append(slices.Clip(reply), after...)
}

// showApart is show, the reply and the pushes apart.
func (r *branchReply) showApart() (reply, after []byte) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shown = true
	return r.reply, r.after
}

// send writes cmds to the branch; want says, per command, whether its reply
// is shown to the client (a branchReply) or dropped (nil).
func (b *streamBranch) send(cmds [][]byte, want []bool) []*branchReply {
	return b.sendFollowed(cmds, want, nil)
}

// sendFollowed is send, with follow making the last command's reply if
// Redis redirects it (streamasked.go).
func (b *streamBranch) sendFollowed(cmds [][]byte, want []bool, follow func(slot int) []byte) []*branchReply {
	replies := make([]*branchReply, len(cmds))
	b.mu.Lock()
	for i := range cmds {
		if want[i] {
			replies[i] = &branchReply{done: make(chan struct{})}
			if i == len(cmds)-1 {
				replies[i].follow = follow
			}
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

// sendShard writes raw, an SSUBSCRIBE or SUNSUBSCRIBE, to the branch:
// its reply is its frames confirmations (0: every one until the branch's
// count is 0), or Redis's error; shown says whether the relay shows it.
func (b *streamBranch) sendShard(raw []byte, frames int, shown bool) *branchReply {
	w := &branchReply{done: make(chan struct{}), shard: b.pool.Address(), shardLeft: frames, shardAll: frames == 0, unshown: !shown}
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		w.reply = branchError(b.err)
		close(w.done)
		return w
	}
	b.waiting = append(b.waiting, w)
	b.mu.Unlock()
	if err := b.d.Send([][]byte{raw}); err != nil {
		b.fail(err)
	}
	return w
}

// push passes frame, which no command waits for, to the client: after the
// last reply taken if the relay has not shown it yet.
func (b *streamBranch) push(frame []byte) error {
	if b.last != nil && b.last.holdPush(frame) {
		return nil
	}
	return b.relay.writeFrame(frame)
}

// shardFrame takes frame, a shard channel's confirmation or an smessage
// (streamshard.go), reporting whether it did: an sunsubscribe of a
// channel the session still wants (Redis unsubscribes a channel whose slot
// moved) to be subscribed again where it now is (shardmove.go), another
// confirmation to the SSUBSCRIBE or SUNSUBSCRIBE waited for, or, when
// none is, to the client with the session's count; an smessage, which
// comes only while no other reply is waited for, to the client.
func (b *streamBranch) shardFrame(frame []byte, kind byte) (bool, error) {
	if kind != '*' && kind != '>' {
		return false, nil
	}
	_, n, confirmation := shardConfirmation(frame)
	message := kind == '*' && isShardMessage(frame)
	if !confirmation && !message {
		return false, nil // a reply, or another push
	}
	if confirmation && b.relay.shards.takeUnasked(b.pool.Address(), frame) {
		return true, nil // the channel's slot moved: subscribed again where it is (shardmove.go)
	}
	b.mu.Lock()
	waiting := len(b.waiting) > 0
	var w *branchReply
	if waiting {
		w = b.waiting[0]
	}
	shardWaits := w != nil && w.shard != ""
	if confirmation && shardWaits {
		// Taken off the queue under the lock, as fail takes the queue.
		w.reply = append(w.reply, frame...)
		w.shardLeft--
		done := w.shardAll && n == 0 || !w.shardAll && w.shardLeft == 0
		if done {
			b.waiting[0] = nil
			b.waiting = b.waiting[1:]
		}
		b.mu.Unlock()
		if done {
			close(w.done)
			if !w.unshown {
				b.last = w
			}
		}
		if w.unshown {
			b.relay.shards.note(b.pool.Address(), n) // shown or not, later confirmations count it
		}
		return true, nil
	}
	b.mu.Unlock()
	switch {
	case confirmation && (!waiting || kind == '>'):
		return true, b.push(b.relay.shards.rewrite(b.pool.Address(), frame))
	case message && (!waiting || shardWaits):
		return true, b.push(frame)
	}
	return false, nil
}

// Write is the copy goroutine's: pushes go to the client as they come,
// replies to their waiters, in order.
func (b *streamBranch) Write(p []byte) (int, error) {
	err := b.frames.each(p, func(reply []byte, kind byte) error {
		if took, err := b.shardFrame(reply, kind); took || err != nil {
			return err
		}
		if kind == '>' {
			if b.dropNulls.Load() > 0 && bytes.Equal(reply, nullInvalidation) {
				b.dropNulls.Add(-1)
				return nil
			}
			return b.push(b.relay.redirBroken(reply))
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
		if slot, redirect := upstream.RedirectSlot(reply); redirect {
			// Moved since the branch was chosen: run where it now is, in
			// its turn (followInTurn), or the client gets rproxy's error.
			b.relay.movedSeen(reply)
			if w != nil && w.follow != nil {
				w.redirected, w.slot = true, slotNumber(slot)
			} else {
				reply = streamRedirectError(slot)
			}
		}
		if w != nil {
			w.reply = reply
			close(w.done)
			if !w.unshown {
				b.last = w
			}
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
	var refusal branchRefusal
	if errors.As(err, &refusal) {
		return refusal
	}
	return resp.AppendError(nil, "ERR upstream unavailable: "+err.Error())
}

// branchRefusal is why a branch cannot be made, as the error reply the
// command that needed it gets.
type branchRefusal []byte

func (r branchRefusal) Error() string { return string(bytes.TrimSpace(r)) }

// branching reports whether the session's commands may go to branches: a
// cluster upstream, a session that is not MONITOR or a replica, not
// subscribed in RESP2 (a subscribed connection runs no other command;
// one that unsubscribed from everything, or sent an UNSUBSCRIBE first,
// runs any: Redis runs them there, so rproxy must too), and not tracking,
// or tracking as a branch can be told to (trackingArgs: keys with or
// without REDIRECT, or BCAST). After CLIENT REPLY OFF commands still go
// where their keys are, their replies dropped (sendOnBranch): on the pin
// they would not run at all.
func (cs *clusterStream) branching(ss *session) bool {
	if !cs.on || ss.role != 0 || ss.pinPool == nil {
		return false
	}
	if ss.resp2Subscribed() {
		return false
	}
	return ss.tracking.redirect == -1 || ss.tracking.trackingArgs != nil
}

// commandKeys is what masterOf found of a command's keys.
type commandKeys uint8

const (
	keysNone     commandKeys = iota // none
	keysOneSlot                     // all in one slot
	keysNotPlain                    // across slots (Redis's CROSSSLOT, from the pin), or not a plain command
)

// masterOf returns the pool of the master a plain command's keys are on
// (Handling Forward, or a blocking command, which blocks the branch as it
// would the client's connection; INFO is rewritten), when they are all in
// one slot.
func (cs *clusterStream) masterOf(ss *session, info *command.Info, args [][]byte) (*upstream.Pool, commandKeys) {
	if info == nil || info.Handling != command.Forward && info.Handling != command.BlockingCmd || info.Name == "info" {
		return nil, keysNotPlain
	}
	return cs.keysMaster(ss, info, args)
}

// keysMaster is masterOf for any command with keys (WATCH too).
func (cs *clusterStream) keysMaster(ss *session, info *command.Info, args [][]byte) (*upstream.Pool, commandKeys) {
	slot, keys := cs.keysSlot(ss, info, args)
	if keys != keysOneSlot {
		return nil, keys
	}
	return ss.pools[ss.proto].PinPool(slot), keysOneSlot
}

// keysSlot is keysMaster's slot: that of the command's keys, when they are
// all in one.
func (cs *clusterStream) keysSlot(ss *session, info *command.Info, args [][]byte) (int, commandKeys) {
	keys, _ := command.Keys(keyInfo(cs.table.Load(), info, args), args, ss.route.keys[:0])
	defer func() {
		clear(keys)
		ss.route.keys = keys[:0]
	}()
	if len(keys) == 0 {
		return 0, keysNone
	}
	slot := upstream.Slot(keys[0])
	for _, k := range keys[1:] {
		if upstream.Slot(k) != slot {
			return 0, keysNotPlain
		}
	}
	return slot, keysOneSlot
}

// branchTransaction returns the branch pool a MULTI starting now goes to:
// one whose transaction ends (EXEC or DISCARD) in the same read, with only
// plain commands (masterOf), keyless ones or keys of one master other
// than the pin's (client libraries send a cached read as CLIENT CACHING
// YES, MULTI, PTTL, GET, EXEC). nil: on the pin, as before. open reports
// that the read ends before the transaction does.
func (cs *clusterStream) branchTransaction(ss *session) (pool *upstream.Pool, open bool) {
	if ss.streamWatch || ss.watching {
		return nil, false // a WATCH holds on the pin's master: the transaction goes there
	}
	table := cs.table.Load()
	for _, c := range ss.route.rest[ss.route.restAt:] {
		info := table.Lookup(c.Args[0])
		if info != nil && (info.Name == "exec" || info.Name == "discard") {
			return pool, false
		}
		p, keys := cs.masterOf(ss, info, c.Args)
		switch {
		case keys == keysNotPlain:
			return nil, false
		case keys == keysNone:
		case samePool(p, ss.pinPool) || pool != nil && !samePool(p, pool):
			return nil, false
		default:
			pool = p
		}
	}
	return nil, true
}

// deferStreamMulti answers, in stream mode, a MULTI whose transaction
// goes on in a later read (a client that waits for each reply, as
// redis-cli or Redis's test client, or a pipeline longer than a read)
// without sending it anywhere yet: its first command decides where it runs
// (startDeferredStreamMulti), as outside stream mode (deferMulti). Sent to
// the pin, a first command of another master's key could only fail. A
// CLIENT CACHING flag Redis holds stays on the pin meanwhile
// (clientErrorCmd) and goes with the transaction. It reports whether it
// deferred.
func (cs *clusterStream) deferStreamMulti(ss *session, raw []byte) bool {
	if !ss.streamAnswered() || ss.skipNext {
		return false // Redis's own handling of the reply is kept
	}
	ss.route.multiRaw = bytes.Clone(raw) // sent later as the client spelled it (deferMulti)
	ss.route.txQueued, ss.route.txFanOut = 0, nil
	ss.noteTransaction("multi")
	ss.cstream().multiDeferred = true
	ss.cstream().multiCaching = cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds)
	ss.relay.substitute([]byte("+OK\r\n"))
	ss.streamCmds = append(ss.streamCmds, markerKeeping(ss.cstream().multiCaching))
	ss.streamHelpers++
	return true
}

// markerKeeping is the errorCmd to send in stream mode where Redis holds a
// CLIENT CACHING flag that must stay (clientErrorCmd) or not.
func markerKeeping(caching bool) []byte {
	if caching {
		return clientErrorCmd
	}
	return errorCmd
}

// startDeferredStreamMulti sends the MULTI deferStreamMulti answered, its
// reply hidden, to where c, the transaction's first command, goes: the
// branch of its keys' master, or else the pin.
func (cs *clusterStream) startDeferredStreamMulti(ss *session, c *call) {
	caching := ss.cstream().multiCaching
	ss.cstream().multiDeferred, ss.cstream().multiCaching = false, false
	if cs.branching(ss) {
		pool, keys := cs.masterOf(ss, c.info, c.cmd.Args)
		if keys == keysOneSlot && !samePool(pool, ss.pinPool) {
			if b, err := cs.branch(ss, pool); err == nil {
				cmds := [][]byte{ss.route.multiRaw}
				if caching && ss.cstream().lastCaching != nil {
					// The flag goes with the transaction, and the pin
					// drops it, as its MULTI would have taken it.
					cmds = [][]byte{ss.cstream().lastCaching, ss.route.multiRaw}
					ss.relay.queue(relayAnswer{})
					ss.streamCmds = append(ss.streamCmds, errorCmd)
					ss.streamHelpers++
				}
				b.send(cmds, make([]bool, len(cmds)))
				ss.cstream().branchTx = pool
				return
			}
		}
		// Keyless: it starts on the pin, and moves to the first key's
		// master if that is another (keylessStreamTx).
		ss.route.keylessTx = keys == keysNone || c.info == nil // an unknown command: Redis's queue-time error
	}
	drop := relayAnswer{rewrite: func([]byte) []byte { return nil }}
	if cs.routing != nil {
		cs.armStreamTx(ss, drop, markerKeeping(caching)) // its errorCmd, which the transaction's EXEC may need (streamfanout.go)
	} else {
		ss.relay.queue(drop)
		ss.streamCmds = append(ss.streamCmds, markerKeeping(caching))
		ss.streamHelpers++
	}
	ss.streamCmds = append(ss.streamCmds, ss.route.multiRaw)
}

// streamMulti is the stream chain's first stage: a MULTI deferred
// (deferStreamMulti) is sent before its first command passes the other
// stages, which may queue their answers in the transaction.
type streamMulti struct{ cs *clusterStream }

func (st streamMulti) command(ss *session, c *call) bool {
	if ss.cstream().multiDeferred {
		st.cs.startDeferredStreamMulti(ss, c)
	}
	return false
}

func (streamMulti) replies(*session) {}

// onBranch sends c on a branch when it belongs there, reporting true: the
// rest of a transaction sent on one, a WATCH of another master's keys (and
// the transaction after it, and its UNWATCH), a transaction of another
// master's keys (branchTransaction), or a plain command of another
// master's keys (masterOf).
func (cs *clusterStream) onBranch(ss *session, c *call) bool {
	info := c.info
	if ss.cstream().divertedTx != nil {
		cs.divertedCommand(ss, c) // a transaction of a migrating slot (streamasked.go)
		return true
	}
	if ss.route.keylessTx {
		cs.keylessStreamTx(ss, c) // may move the transaction to a branch
	}
	if pool := ss.cstream().branchTx; pool != nil {
		if info != nil && (info.Handling == command.Reset || info.Handling == command.Quit) {
			return false // run at once, inside MULTI too, as on Redis: RESET drops the branches
		}
		if info != nil && info.Handling != command.Forward && info.Handling != command.Transaction {
			// Answered or acted on by rproxy on the session's own
			// connection (CLIENT, HELLO, SUBSCRIBE...): not inside another
			// master's transaction. The refusal aborts it (EXECABORT).
			cs.refuseMsg(ss, strings.ToUpper(commandLabel(info, c.cmd.Args))+" inside a transaction on another cluster master than this connection's is not supported through rproxy; send it before MULTI or after EXEC")
			return true
		}
		if info != nil && info.Name == "exec" && cs.branchExecFanOut(ss, c, pool) {
			return true // merged with every master's (streamfanout.go)
		}
		if info != nil && info.Handling == command.Transaction {
			ss.noteTransaction(info.Name)
			if !ss.multiSent { // EXEC or DISCARD: the WATCH ends too
				ss.cstream().branchTx, ss.cstream().watchPool = nil, nil
				ss.route.txQueued, ss.route.txFanOut = 0, nil
			}
		} else if cs.streamQueue(ss, c) {
			return true // refused
		}
		cs.sendOnBranch(ss, c, pool)
		return true
	}
	// A WATCH on a branch keeps its transaction there even if the session
	// may no longer branch (HELLO 2): on the pin, EXEC would run unwatched.
	branching := cs.branching(ss)
	if info == nil || ss.inTransaction() || ss.cstream().watchPool == nil && !branching {
		return false
	}
	switch info.Name {
	case "multi":
		if cs.divertTransaction(ss, c) {
			return true
		}
		pool := ss.cstream().watchPool // a WATCH holds there: the transaction goes there whole
		if pool == nil {
			var open bool
			if pool, open = cs.branchTransaction(ss); open && branching && !ss.streamWatch && !ss.watching {
				return cs.deferStreamMulti(ss, c.cmd.Raw)
			}
		}
		if pool == nil || !cs.hasBranch(ss, pool) {
			return false
		}
		ss.route.txQueued, ss.route.txFanOut = 0, nil
		ss.noteTransaction(info.Name)
		ss.cstream().branchTx = pool
		cs.sendOnBranch(ss, c, pool)
		return true
	case "watch":
		pool := ss.cstream().watchPool // later WATCHes go where the first went (other masters' keys: an error there)
		if pool == nil && branching && !ss.streamWatch && !ss.watching {
			if p, keys := cs.keysMaster(ss, info, c.cmd.Args); keys == keysOneSlot && !samePool(p, ss.pinPool) && cs.hasBranch(ss, p) {
				pool = p
			}
		}
		if pool == nil {
			return false
		}
		ss.cstream().watchPool = pool
		cs.sendOnBranch(ss, c, pool)
		return true
	case "unwatch":
		pool := ss.cstream().watchPool
		if pool == nil {
			return false
		}
		ss.cstream().watchPool = nil
		cs.sendOnBranch(ss, c, pool)
		return true
	}
	if !branching {
		return false
	}
	// A plain command (not the connection's own business) whose keys are
	// all in one slot of another master than the pin's: tracked there; or
	// of a slot rproxy met an ASK for: diverted (streamasked.go).
	// Anything else goes to the pin as before.
	if info.Handling == command.Forward && cs.routing != nil && cs.routing.cluster.AnyMigrating() {
		if slot, keys := cs.keysSlot(ss, info, c.cmd.Args); keys == keysOneSlot && cs.divertAsked(ss, c, slot) {
			return true
		}
	}
	if pool, keys := cs.masterOf(ss, info, c.cmd.Args); keys == keysOneSlot && !samePool(pool, ss.pinPool) {
		cs.sendOnBranchFollowed(ss, c, pool, cs.streamFollow(ss, c))
		return true
	}
	return false
}

// keylessStreamTx follows, in stream mode, a transaction the session
// typed command by command whose commands so far are all keyless (its
// MULTI deferred, then sent to the pin with the first: keylessTx), as
// moveTransaction does outside stream mode: while they are, it keeps their
// copies; at the first key of another master than the pin's it moves the
// transaction there: the pin's is discarded, and MULTI and those commands
// are queued again on the session's branch to that master (replies not
// shown: the client has had the pin's), where c and the rest go
// (ss.cstream().branchTx). Before, that key's command failed on the pin and EXEC
// answered EXECABORT. A key of the pin's master, a command rproxy acts on
// (masterOf: keysNotPlain), or the end of the transaction leaves it on
// the pin.
func (cs *clusterStream) keylessStreamTx(ss *session, c *call) {
	if !ss.inTransaction() || ss.cstream().branchTx != nil || !cs.branching(ss) {
		cs.routing.endKeyless(ss)
		return
	}
	// A command Redis does not know (no info) is kept as keyless: queued
	// again on the branch, it fails there as on the pin.
	var pool *upstream.Pool
	keys := keysNone
	if c.info != nil {
		pool, keys = cs.masterOf(ss, c.info, c.cmd.Args) // keysNotPlain for what rproxy acts on: it stays
	}
	switch {
	case keys == keysNone:
		if ss.route.keylessBytes += len(c.cmd.Raw); ss.route.keylessBytes > maxKeylessBytes {
			cs.routing.endKeyless(ss)
			return
		}
		ss.route.keyless = append(ss.route.keyless, bytes.Clone(c.cmd.Raw))
		return
	case keys != keysOneSlot || samePool(pool, ss.pinPool) || !ss.streamAnswered() || ss.skipNext ||
		cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds):
		cs.routing.endKeyless(ss) // stays on the pin
		return
	}
	b, err := cs.branch(ss, pool)
	queued := ss.route.keyless
	cs.routing.endKeyless(ss)
	if err != nil {
		return // stays on the pin, where c fails as before
	}
	// The pin's DISCARD, its reply not shown: the relay finds it by count
	// when it follows the transaction (streamTx), else after an errorCmd
	// (which Redis refuses inside MULTI, a transaction discarded anyway).
	if t := ss.streamTx; t != nil {
		ss.streamTx = nil
		t.f = func([]byte) []byte { return nil }
		t.execAt.Store(int64(ss.pinSent + len(ss.streamCmds) - t.multiAt + 1))
		ss.streamCmds = append(ss.streamCmds, discardCmd)
		ss.streamHelpers++
	} else {
		ss.relay.queue(relayAnswer{rewrite: func([]byte) []byte { return nil }, join: true})
		ss.streamCmds = append(ss.streamCmds, errorCmd, discardCmd)
		ss.streamHelpers += 2
	}
	cmds := append([][]byte{ss.route.multiRaw}, queued...)
	b.send(cmds, make([]bool, len(cmds)))
	ss.cstream().branchTx = pool
}

// sendOnBranch sends c on the session's branch to pool (made on first use)
// and queues, in the pin's stream, the place its reply is shown in. A
// CLIENT CACHING flag the pin holds for the client's next command goes to
// the branch first, as the command does.
func (cs *clusterStream) sendOnBranch(ss *session, c *call, pool *upstream.Pool) {
	cs.sendOnBranchFollowed(ss, c, pool, nil)
}

// sendOnBranchFollowed is sendOnBranch, with follow making c's reply if
// Redis redirects it (streamFollow).
func (cs *clusterStream) sendOnBranchFollowed(ss *session, c *call, pool *upstream.Pool, follow func(slot int) []byte) {
	b, err := cs.branch(ss, pool)
	if err != nil {
		ss.errorInStream(branchError(err))
		return
	}
	// After CLIENT REPLY OFF or SKIP the client gets no reply: the
	// branch's is dropped, and the pin answers nothing.
	answered := ss.streamAnswered()
	cmds, want := [][]byte{c.cmd.Raw}, []bool{answered}
	if ss.cstream().lastCaching != nil && cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds) {
		cmds, want = [][]byte{ss.cstream().lastCaching, c.cmd.Raw}, []bool{false, answered}
	}
	replies := b.sendFollowed(cmds, want, follow)
	if answered {
		a := relayAnswer{later: replies[len(replies)-1]}
		if waitsInStream(ss, c) {
			n, on, d := &ss.blockedInStream, &ss.blockedBranch, b.d
			n.Add(1)
			on.Store(d)
			a.then = func(r []byte) []byte {
				on.CompareAndSwap(d, nil)
				n.Add(-1)
				return r
			}
		}
		// A write of salted keys: its copies are deleted before the client
		// sees its reply (streamsalt.go).
		a.then = endingFirst(ss.takeStreamWrites(cs.routing.salting), a.then)
		ss.relay.queue(a)
	}
	// errorCmd drops the pin's CLIENT CACHING flag, as the command does.
	ss.streamCmds = append(ss.streamCmds, errorCmd)
}

// branch returns the session's branch to pool, making it: a dedicated
// connection of the pool (in the session's protocol, as its user), with
// tracking turned on as the client last turned it on, if it is on.
func (cs *clusterStream) branch(ss *session, pool *upstream.Pool) (*streamBranch, error) {
	return cs.branchTracking(ss, pool, ss.tracking.trackingArgs)
}

// branchTracking is branch, a new branch tracking as the CLIENT TRACKING
// tracking says (nil: off).
func (cs *clusterStream) branchTracking(ss *session, pool *upstream.Pool, tracking [][]byte) (*streamBranch, error) {
	if b := ss.branchTo(pool); b != nil {
		return b, nil
	}
	var cmd []byte
	if tracking != nil {
		var errReply []byte
		if cmd, errReply = cs.trackingOnServer(tracking, pool.Address()); errReply != nil {
			return nil, branchRefusal(errReply)
		}
	}
	d, err := pool.Acquire(context.Background())
	if err != nil {
		return nil, err
	}
	if cmd != nil {
		batch := &upstream.Batch{}
		batch.Add(cmd)
		d.Do(batch, cs.timeout)
		if r := batch.Reply(0); !bytes.Equal(r, []byte("+OK\r\n")) {
			pool.Discard(d)
			return nil, &trackingRefused{reply: bytes.Clone(r)}
		}
	}
	b := &streamBranch{pool: pool, d: d, relay: ss.relay, tracks: tracking != nil}
	ss.cstream().branches = append(ss.cstream().branches, b)
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

// trackingRefused is Redis's answer, other than +OK, to the CLIENT
// TRACKING that was to turn tracking on on a new branch.
type trackingRefused struct{ reply []byte }

func (e *trackingRefused) Error() string {
	return "tracking refused on another master: " + string(bytes.TrimSpace(e.reply))
}

// bcastEverywhere gives a session on a cluster that turns tracking on in
// BCAST mode (args) a branch to every master, made with tracking on as
// args say: Redis sends BCAST invalidations to the connections tracking on
// the node whose key changed, and the client is owed those of every key
// under its prefixes, whether it read any on that node or not. It returns
// Redis's refusal of args on a new branch (the session's own connection
// refuses them too, and the client gets that), nil if none. A branch that
// cannot be made otherwise closes the client, as one that fails does.
func (cs *clusterStream) bcastEverywhere(ss *session, args [][]byte) []byte {
	if !bcastOn(args) || !cs.on || ss.role != 0 || ss.pinPool == nil || ss.resp2Subscribed() {
		return nil
	}
	backend := ss.pools[ss.proto]
	for _, slot := range backend.Shards() {
		pool := backend.PinPool(slot)
		if samePool(pool, ss.pinPool) {
			continue
		}
		_, err := cs.branchTracking(ss, pool, args)
		var refused *trackingRefused
		switch {
		case errors.As(err, &refused):
			return refused.reply
		case err != nil:
			cs.log.Info("closing a client tracking in BCAST mode: no connection to every master",
				zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.Error(err))
			ss.conn.NetConn().Close()
			return nil
		}
	}
	return nil
}

// bcastOn reports whether args, a CLIENT TRACKING, turn it on in BCAST
// mode.
func bcastOn(args [][]byte) bool {
	return trackingOn(args) != nil && slices.ContainsFunc(args[3:], func(a []byte) bool { return bytes.EqualFold(a, []byte("bcast")) })
}

// bcastRedirectReaches checks, before a CLIENT TRACKING ON BCAST with
// REDIRECT on a cluster runs, that the target can be redirected to on
// every master (bcastEverywhere): else the error to reply.
func (cs *clusterStream) bcastRedirectReaches(ss *session, args [][]byte) []byte {
	if !cs.on || ss.role != 0 || !bcastOn(args) {
		return nil
	}
	backend := ss.pools[ss.proto]
	for _, slot := range backend.Shards() {
		if _, errReply := cs.trackingOnServer(args, backend.PinPool(slot).Address()); errReply != nil {
			return errReply
		}
	}
	return nil
}

// samePool reports whether a and b make connections to the same server:
// the pools of either protocol are one master's, and a HELLO that switches
// the session's protocol switches its pin's and its branches' too.
func samePool(a, b *upstream.Pool) bool {
	return a == b || a != nil && b != nil && a.Address() == b.Address()
}

// branchTo returns the session's branch to pool, nil if it has none.
func (ss *session) branchTo(pool *upstream.Pool) *streamBranch {
	for _, b := range ss.cstream().branches {
		if samePool(b.pool, pool) {
			return b
		}
	}
	return nil
}

// hasBranch reports whether the session has, or can make, a branch to
// pool.
func (cs *clusterStream) hasBranch(ss *session, pool *upstream.Pool) bool {
	_, err := cs.branch(ss, pool)
	return err == nil
}

// toBranches sends cmd to every branch and notify branch, its replies
// dropped: a HELLO the client sent, which switches the protocol of the
// client's connection, and so of what Redis sends it there (a notify
// branch left in RESP3 got a RESP2 client's invalidations as RESP3
// pushes). A notify branch that cannot send closes the client, as in
// notifyEverywhere.
func (ss *session) toBranches(cmd []byte) {
	for _, b := range ss.cstream().branches {
		b.send([][]byte{cmd}, []bool{false})
	}
	for _, b := range ss.cstream().notifyBranches {
		if err := b.d.Send([][]byte{cmd}); err != nil {
			ss.conn.NetConn().Close()
			return
		}
	}
}

// dropBranches closes the session's branches (RESET, or the client left),
// and with them a transaction or WATCH sent on one.
func (ss *session) dropBranches() {
	ss.dropNotifyBranches()
	for _, b := range ss.cstream().branches {
		b.dropped.Store(true)
		b.pool.Discard(b.d)
	}
	ss.cstream().branches, ss.cstream().branchTx, ss.cstream().watchPool = nil, nil, nil
	ss.cstream().shardBranched = false
}

// noteCaching remembers a CLIENT CACHING the client sent, for the branch
// its next command may go to.
func (ss *session) noteCaching(args [][]byte, raw []byte) {
	if len(args) > 1 && bytes.EqualFold(args[1], []byte("caching")) {
		ss.cstream().lastCaching = bytes.Clone(raw)
	}
}

// branchTrackingArgs returns the arguments of a CLIENT TRACKING that turns
// tracking on as args leave it, for a new branch (nil: args turn it off):
// in BCAST mode with every prefix Redis holds for the session
// (ss.tracking.trackPrefixes, updated from args before), not only args' own.
func (ss *session) branchTrackingArgs(args [][]byte) [][]byte {
	out := trackingOn(args)
	if out == nil || !ss.tracking.trackBcast {
		return out
	}
	kept := append(make([][]byte, 0, len(out)+2*len(ss.tracking.trackPrefixes)), out[:3]...)
	for j := 3; j < len(out); j++ {
		switch {
		case bytes.EqualFold(out[j], []byte("prefix")) && j+1 < len(out):
			j++
		case bytes.EqualFold(out[j], []byte("redirect")) && j+1 < len(out):
			kept = append(kept, out[j], out[j+1])
			j++
		default:
			kept = append(kept, out[j])
		}
	}
	for _, p := range ss.tracking.trackPrefixes {
		if len(p) > 0 {
			kept = append(kept, []byte("PREFIX"), bytes.Clone(p))
		}
	}
	return kept
}

// trackingOn returns the arguments of a CLIENT TRACKING that turns
// tracking on, for a branch (nil: args turn it off).
func trackingOn(args [][]byte) [][]byte {
	if len(args) < 3 || !bytes.EqualFold(args[2], []byte("on")) {
		return nil
	}
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = bytes.Clone(a)
	}
	return out
}
