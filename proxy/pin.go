package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// trackKind is the connection state a command may change, judged from its
// reply once the batch has run on the pinned connection.
type trackKind uint8

const (
	trackNone trackKind = iota
	trackMulti
	trackExec // EXEC and DISCARD: end the transaction and the watch
	trackWatch
	trackUnwatch
	trackSelect
)

// keptPin is a connection that tracked keys for the session (pinTracked),
// kept by it between pins, with the pool it came from.
type keptPin struct {
	pool *upstream.Pool
	d    *upstream.Dedicated
}

// takeKept returns the connection the session kept from pool, if it is
// still open, or nil. Kept ones whose pool broke them (a new master) are
// given back on the way.
func (ss *session) takeKept(pool *upstream.Pool) *upstream.Dedicated {
	var found *upstream.Dedicated
	ss.kept = slices.DeleteFunc(ss.kept, func(k keptPin) bool {
		switch {
		case k.d.Broken():
			k.pool.Discard(k.d)
			return true
		case found == nil && k.pool == pool:
			found = k.d
			return true
		}
		return false
	})
	if found != nil && !pool.StillOpen(found) {
		return nil
	}
	return found
}

// dropKept closes the connections the session kept (its client left).
func (ss *session) dropKept() {
	for _, k := range ss.kept {
		k.pool.Discard(k.d)
	}
	ss.kept = nil
}

type track struct {
	kind trackKind
	db   int // for trackSelect
}

// queuedSelect is a SELECT queued in the session's open transaction: its
// place among the queued commands (EXEC's array) and its database.
type queuedSelect struct{ at, db int }

// pinnedState is the connection state that Redis's replies to a pinned
// session's tracked commands settle (settle): doPinned after each batch,
// and a CLIENT INFO made after the replies of the commands before it
// (replyClientText). The session embeds it.
type pinnedState struct {
	inMulti   bool // Redis answered MULTI; set from replies, after the batch
	watching  bool
	dbUnknown bool // a SELECT ran inside a transaction: keep the pin
	db        int  // database selected on the pin
	// queued counts the open transaction's +QUEUED replies, and selects
	// holds its SELECTs (selectedInTransaction).
	queued  int
	selects []queuedSelect
}

// settle applies Redis's reply r to a tracked command t.
func (st *pinnedState) settle(t track, reply []byte) {
	r := string(reply)
	queuedAt := -1
	if st.inMulti && r == "+QUEUED\r\n" {
		queuedAt, st.queued = st.queued, st.queued+1
	}
	switch t.kind {
	case trackMulti:
		if r == "+OK\r\n" {
			st.inMulti = true
			st.queued, st.selects = 0, st.selects[:0]
		}
	case trackExec:
		if st.inMulti {
			st.inMulti, st.watching = false, false
			st.selectedInTransaction(reply)
		}
	case trackWatch:
		if !st.inMulti && r == "+OK\r\n" {
			st.watching = true
		}
	case trackUnwatch:
		if !st.inMulti {
			st.watching = false
		}
	case trackSelect:
		if !st.inMulti && r == "+OK\r\n" {
			st.db = t.db
		} else if queuedAt >= 0 {
			st.dbUnknown = true
			st.selects = append(st.selects, queuedSelect{at: queuedAt, db: t.db})
		}
	}
}

// selectedInTransaction sets the database from EXEC's reply, an array of
// the queued commands' replies, by the last SELECT queued that ran:
// CLIENT LIST shows it, as Redis's does (the pin is kept all the same:
// dbUnknown).
func (st *pinnedState) selectedInTransaction(execReply []byte) {
	if len(st.selects) == 0 {
		return
	}
	elems, err := arrayElements(execReply)
	for _, q := range st.selects {
		if err == nil && q.at < len(elems) && string(elems[q.at]) == "+OK\r\n" {
			st.db = q.db
		}
	}
	st.selects = st.selects[:0]
}

func transactionTrack(name string) track {
	switch name {
	case "multi":
		return track{kind: trackMulti}
	case "exec", "discard":
		return track{kind: trackExec}
	case "watch":
		return track{kind: trackWatch}
	case "unwatch":
		return track{kind: trackUnwatch}
	}
	return track{}
}

// pinSession sends what is queued on the shared connections, then lends the
// session a dedicated connection. If none can be had, the command that asked
// gets the upstream error and false is returned.
//
// On a cluster the connection goes to the master of slot, the slot of the
// command that asked (upstream.SlotAny: any master).
func (s *Server) pinSession(ss *session, slot int) bool {
	s.flush(ss)
	pool := ss.pools[ss.proto].PinPool(slot)
	d := ss.takeKept(pool)
	if d != nil {
		ss.tracking.pinTracked = true // its keys are still tracked
	} else {
		var err error
		if d, err = pool.Acquire(context.Background()); err != nil {
			ss.reply(resp.AppendError(nil, "ERR upstream unavailable: "+err.Error()))
			return false
		}
	}
	ss.pin, ss.pinPool = d, pool
	ss.pinRef.Store(d)
	ss.inMulti, ss.multiSent, ss.watching, ss.db, ss.dbUnknown = false, false, false, 0, false
	if slot >= 0 {
		ss.notePinSlot(slot & (upstream.Slots - 1))
	}
	return true
}

// doPinned runs the batch on the pinned connection, then updates the
// session's state from the replies, in order.
func (s *Server) doPinned(ss *session) {
	if ss.pin.ClosedWhileIdle(pinIdleCheck) {
		// Redis closed the pin while the client sent nothing (its timeout
		// on idle clients, a CLIENT KILL, a restart): it closed the
		// client's connection, so rproxy closes the client's, before
		// anything of this batch ran. The client then sees the end it
		// would see directly, which its library reconnects and retries
		// on, not errors.
		s.log.Info("client closed: Redis closed its pinned connection while the client was idle",
			zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.String("command", batchCommand(ss.batch)))
		ss.pin.Do(ss.batch, 0) // broken: every command gets an error, unsent
		ss.quit = true
		s.metrics.rejected.WithLabelValues("upstream_lost").Inc()
		ss.conn.NetConn().Close() // so none of them reaches the client
		s.unpin(ss, false)
		return
	}
	timeout := s.cfg.Upstream.Timeout
	var stop func()
	if ss.blocking {
		// A blocking command waits as long as the client asked (Redis times
		// it out). Meanwhile a client that leaves must release the
		// connection, as Redis unblocks a client that disconnects.
		timeout = 0
		if lc, ok := ss.conn.NetConn().(*limitedConn); ok {
			stop = lc.watch(ss.pin.Interrupt)
		}
	}
	// The connection state the session holds, or asks for in this batch:
	// losing it must not go unnoticed.
	held := ss.inMulti || ss.multiSent || ss.watching || ss.db != 0 || ss.dbUnknown
	// Before this batch (movePin): Redis's state, not the client's view,
	// which counts a MULTI sent in this batch.
	heldBefore := ss.inMulti || ss.watching || ss.db != 0 || ss.dbUnknown || ss.pinDirty || ss.tracking.pinTracked
	for _, t := range ss.track {
		held = held || t.kind != trackNone
	}
	if ss.blocking {
		s.publishBlocked(ss) // CLIENT LIST's b flag and cmd, for other sessions
	}
	if !ss.pinDirty {
		// A command that may change the connection's state beyond what
		// the session tracks has it reset when released.
		table := s.table.Load()
		for i := 0; i < ss.batch.Len() && !ss.pinDirty; i++ {
			ss.pinDirty = !leavesConnectionAsFound(table.Lookup(rawCommandName(ss.batch.Command(i))))
		}
	}
	var sentAt time.Time // a blocking batch's send (lowerBlockingTimeouts)
	if ss.blocking {
		sentAt = time.Now() // not the coarse clock, which may lag behind by more than Redis's 1 ms
	}
	ss.runPinned(timeout)
	rt, cluster := ss.pools[ss.proto].(*upstream.Router)
	for moves, waits := 0, 0; cluster && !heldBefore && moves < maxPinMoves; {
		if s.movePin(ss, rt) {
			moves++
		} else if ss.refusedWhole() && rt.PauseAfterClusterDown(waits) {
			waits++
		} else {
			break
		}
		if ss.blocking {
			// Redis may have held it a while before refusing it
			// (blockretry.go): it waits only what is left.
			sentAt = sentAt.Add(ss.lowerBlockingTimeouts(s.table.Load(), time.Since(sentAt)))
		}
		if stop != nil {
			stop() // the client's leaving interrupts the new pin's wait
			stop = ss.conn.NetConn().(*limitedConn).watch(ss.pin.Interrupt)
		}
		ss.runPinned(timeout)
	}
	ss.blockedNow.Store(false)
	if stop != nil {
		stop()
	}
	if cluster {
		s.followPinnedRedirects(ss, rt) // a key moved under a WATCH or a transaction (pinmoved.go)
		rt.HideRedirects(ss.batch)      // clients see one node (facade.go)
	}
	ss.blocking, ss.blockingCmd = false, ""
	for i, t := range ss.track {
		ss.settle(t, ss.batch.Reply(i))
	}
	ss.track = ss.track[:0]
	// Redis's answers settle what the client's commands began: a MULTI
	// that failed opened no transaction.
	ss.multiSent = ss.inMulti
	if ss.pin.Broken() {
		// The connection and its state are gone. A session that held state
		// (a database, a transaction, a watch) is closed after these
		// replies, as a direct client's connection would drop: continuing
		// on a fresh connection would run its next commands in db 0 or
		// outside its transaction. One that held none goes on.
		fields := []zap.Field{zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
			zap.String("command", batchCommand(ss.batch))}
		if held {
			ss.quit = true
			s.metrics.rejected.WithLabelValues("upstream_lost").Inc()
			s.log.Warn("client closed: its pinned upstream connection was lost while it held connection state", fields...)
		} else {
			s.log.Info("pinned upstream connection lost", fields...)
		}
		s.unpin(ss, false)
	}
}

// pinIdleCheck: a pin its session left unused this long is checked
// before its next batch (ClosedWhileIdle). Redis's timeout on idle
// clients counts whole seconds.
const pinIdleCheck = time.Second

// maxPinMoves bounds the masters one pinned batch follows a redirect to.
const maxPinMoves = 3

// runPinned runs the batch on the pin, after ASKING where the pin needs it
// (pinAsking).
func (ss *session) runPinned(timeout time.Duration) {
	if ss.pinAsking {
		ss.pin.DoAsking(ss.batch, timeout, ss.askingQueued())
	} else {
		ss.pin.Do(ss.batch, timeout)
	}
}

// askingQueued reports, for each command of the batch, whether it runs
// inside a transaction on the pin (from the state Redis's replies settled
// and the batch's MULTI, EXEC and DISCARD): Redis keeps an ASKING flag
// through a transaction, and would queue an ASKING sent inside one.
func (ss *session) askingQueued() []bool {
	in := ss.inMulti
	queued := make([]bool, len(ss.track))
	for i, t := range ss.track {
		queued[i] = in
		switch t.kind {
		case trackMulti:
			in = true
		case trackExec:
			in = false
		}
	}
	return queued
}

// movePin moves the session's pin to the node that redirects name, when
// every reply of the batch just run on it is a MOVED there, or every one
// an ASK there: nothing of the batch ran, and (the caller checks) the pin
// held nothing from before it, so the batch can run on a connection to
// that node as the client sent it, as a cluster client retries it (a
// WATCH, a blocking command or a transaction's first command on a slot
// that moved since rproxy read the map, or whose key already moved in a
// migration). A transaction the batch opened is the exception: its MULTI
// answered +OK, and its EXEC EXECABORT (Redis discarded it for the
// redirects) or its DISCARD +OK. It reports whether it moved the pin; the
// caller runs the batch again. A MOVED corrects the slot map first. After
// an ASK the pin stays on a node that serves the slot only after ASKING,
// so every batch on it from then on runs after ASKING (pinAsking): the
// session's WATCH and transaction follow the key through the migration.
func (s *Server) movePin(ss *session, rt *upstream.Router) bool {
	n := ss.batch.Len()
	if n == 0 || ss.pin.Broken() || len(ss.track) != n {
		return false
	}
	var pool *upstream.Pool
	ask, redirected, inMulti, slot := false, false, false, ""
	for i := range n {
		r := ss.batch.Reply(i)
		if txControlRanNothing(ss.track[i].kind, &inMulti, r) {
			continue
		}
		p, a, ok := rt.RedirectPool(r)
		if !ok || redirected && (p != pool || a != ask) {
			return false
		}
		pool, ask, redirected = p, a, true
		slot, _ = upstream.RedirectSlot(r)
	}
	if !redirected || pool == ss.pinPool {
		return false
	}
	d, err := pool.Acquire(context.Background())
	if err != nil {
		return false
	}
	if inMulti {
		ss.pinPool.Release(ss.pin) // its transaction, which ran nothing, is reset
	} else {
		ss.pinPool.ReleaseClean(ss.pin) // nothing ran on it: every command was redirected
	}
	ss.pin, ss.pinPool = d, pool
	ss.pinRef.Store(d)
	ss.pinAsking = ask
	ss.pinAskSlot = int32(slotNumber(slot))
	return true
}

// refusedWhole reports whether the node refused every command of the
// batch just run on the pin with CLUSTERDOWN (it saw the cluster down),
// but a transaction's MULTI and the EXEC or DISCARD that closed it
// (txControlRanNothing): nothing ran and no state is left on the
// connection, so the batch can run there again, as a cluster client
// retries a CLUSTERDOWN.
func (ss *session) refusedWhole() bool {
	n := ss.batch.Len()
	if n == 0 || ss.pin.Broken() || len(ss.track) != n {
		return false
	}
	refused, inMulti := false, false
	for i := range n {
		r := ss.batch.Reply(i)
		switch {
		case txControlRanNothing(ss.track[i].kind, &inMulti, r):
		case upstream.IsClusterDown(r):
			refused = true
		default:
			return false
		}
	}
	return refused && !inMulti
}

// txControlRanNothing reports whether r, the reply to a command of kind k
// in a batch whose other commands ran nothing, is a transaction's control
// reply that leaves nothing run either: its MULTI's +OK (inMulti becomes
// true), or, closing it, its EXEC's EXECABORT or its DISCARD's +OK.
func txControlRanNothing(k trackKind, inMulti *bool, r []byte) bool {
	switch {
	case k == trackMulti && !*inMulti && string(r) == "+OK\r\n":
		*inMulti = true
	case k == trackExec && *inMulti && (bytes.HasPrefix(r, []byte("-EXECABORT")) || string(r) == "+OK\r\n"):
		*inMulti = false
	default:
		return false
	}
	return true
}

// leavesConnectionAsFound reports whether a command run on a pinned
// connection leaves no state there that the session does not track, so a
// pin used only for such commands goes back to the pool without the RESET
// round trip (which SLOWLOG and MONITOR would show the client). Data
// commands, scripts (a script's SELECT stays in the script) and blocking
// commands qualify; so do the transaction commands, whose state the session
// tracks (unpin resets a connection still in a transaction or a watch).
// CLIENT, HELLO, SELECT, the cluster's READONLY, READWRITE and ASKING, the
// streams and commands the table does not know (a module's) do not.
func leavesConnectionAsFound(info *command.Info) bool {
	if info == nil {
		return false
	}
	switch info.Handling {
	case command.Forward, command.BlockingCmd:
		switch info.Name {
		case "readonly", "readwrite", "asking":
			return false
		}
		return true
	case command.Transaction:
		return true
	}
	return false
}

// inTransaction reports whether the client has opened a transaction, as it
// has sent its commands: from the MULTI on, not from Redis's reply to it.
// Nothing rproxy adds may land inside it.
func (ss *session) inTransaction() bool { return ss.multiSent || ss.route.multiPending }

// pinNoLongerNeeded reports whether the session holds no connection state.
func (ss *session) pinNoLongerNeeded() bool {
	return !ss.inMulti && ss.pinHoldsAtMostATransaction()
}

// pinHoldsAtMostATransaction reports whether the session's pin holds no
// state but, perhaps, an open transaction: once that ends, the pin goes
// back (moveTransaction relies on it).
func (ss *session) pinHoldsAtMostATransaction() bool {
	return !ss.watching && ss.db == 0 && !ss.dbUnknown && !ss.blocking
}

// unpin returns the dedicated connection: kept as it is when nothing ran on
// it that a RESET would clear, reset for reuse otherwise, or closed when
// the client has left (clientGone) and a reset would be needed: Redis then
// sees the client's connection end, not a RESET in SLOWLOG and MONITOR
// after the client is gone. One that tracked keys stays the session's
// (trackingState.pinTracked).
func (s *Server) unpin(ss *session, clientGone bool) {
	if ss.pin == nil {
		return
	}
	if ss.stream {
		ss.pin.Interrupt() // ends the stream goroutine; never reused
	}
	ss.pinRef.Store(nil)
	needsReset := ss.pinDirty || !ss.pinNoLongerNeeded()
	switch {
	case ss.stream:
		ss.pinPool.Release(ss.pin) // interrupted above: closed, not reused
	case (needsReset || ss.tracking.pinTracked) && clientGone:
		ss.pinPool.Discard(ss.pin)
	case ss.tracking.pinTracked:
		if !needsReset || ss.pinPool.ResetLent(ss.pin) {
			ss.kept = append(ss.kept, keptPin{pool: ss.pinPool, d: ss.pin})
		}
	case needsReset:
		ss.pinPool.Release(ss.pin)
	default:
		ss.pinPool.ReleaseClean(ss.pin) // nothing ran on it that a RESET would clear
	}
	ss.pin, ss.pinDirty, ss.tracking.pinTracked, ss.pinAsking = nil, false, false, false
	ss.pinTx.reset()
	ss.pinSlots = ss.pinSlots[:0]
	ss.inMulti, ss.multiSent, ss.watching, ss.db, ss.dbUnknown, ss.blocking = false, false, false, 0, false, false
	ss.blockingCmd = ""
	ss.track = ss.track[:0]
	ss.route.crossSlotTx = false
}

// startStream puts the session in stream mode (pub/sub) on its pinned
// connection: replies so far are written, then a goroutine copies what Redis
// sends to the client, and raw is the first command sent.
func (s *Server) startStream(ss *session, raw []byte) {
	// The replies so far first: their flush may release a pin whose state
	// ended (EXEC in the same read) or lose it, and then a fresh one is taken.
	s.flush(ss)
	slot := ss.slot
	if name := rawCommandName(raw); s.cfg.Cluster != nil && !bytes.EqualFold(name, []byte("ssubscribe")) && !bytes.EqualFold(name, []byte("sunsubscribe")) {
		// On a cluster the pub/sub master, whatever the session's last key
		// was (client tracking, CLIENT REPLY, MONITOR...): the session's
		// SUBSCRIBEs and PUBLISHes then go there, as any other session's,
		// and PUBLISH's count and PUBSUB NUMSUB count every subscriber, as
		// one Redis does (pubsubSlot). Shard channels are their slot's.
		slot = pubsubSlot
	}
	if ss.pin == nil && !s.pinSession(ss, slot) {
		return
	}
	if err := ss.conn.Flush(); err != nil {
		return
	}
	ss.stream, ss.tracking.cachingSent = true, false
	// A WATCH the pin holds from before is stream mode's to follow now
	// (noteTransaction): an UNSUBSCRIBE of nothing must not leave the mode
	// and reset the connection under it (TestStreamModeKeepsAWatchFromBefore).
	ss.streamWatch, ss.watching = ss.streamWatch || ss.watching, false
	pin, nc, id, addr := ss.pin, ss.conn.NetConn(), ss.id, ss.conn.RemoteAddr()
	if lc, ok := nc.(*limitedConn); ok {
		lc.exemptIdle() // Redis never closes an idle subscriber
	}
	w := &deadlineWriter{nc: nc, limits: &s.limits, clock: s.clock, wd: ss.writeDeadline}
	relay, ended := newStreamRelay(w, s.cfg.Cluster != nil), make(chan bool, 1)
	relay.hideLine = newMonitorLines(s).hide
	relay.monitoring.Store(ss.role == 'O')
	relay.shards.pinAddr = pin.Address()
	relay.redirect.Store(ss.tracking.redirect)
	s.stream.startShardMoves(ss, relay)
	ss.relay, ss.streamEnded = relay, ended
	go func() {
		err := pin.StreamTo(relay)
		if errors.Is(err, errStreamReset) {
			ended <- true // the session takes the client back (leaveStream)
			return
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			ss.writeTimedOut.Store(true)
		}
		s.log.Debug("pub/sub stream ended", zap.String("client", addr), zap.Int64("id", id), zap.Error(err))
		// Redis closed (QUIT, or an output buffer limit) or the client left.
		nc.Close()
		ended <- false
	}()
	ss.streamCmds = append(ss.streamCmds, raw)
}

// leaveStream ends stream mode after the client's RESET, which is the last
// of ss.streamCmds: the copy ends at Redis's answer to an end marker sent
// after it (streamEnd), Redis's +RESET is queued as the batch's reply, the
// connection goes back to its pool (one that tracked keys stays the
// session's: trackingState.pinTracked), and the session goes on as a new one,
// on the shared connections (as the RESET left it on Redis: no
// subscriptions, no tracking, no MONITOR, RESP2, database 0, and in auth
// modes proxy and passthrough, not logged in). Staying on the pinned
// connection would leave the client logged out of Redis as the RESET
// leaves it, when rproxy authenticates upstream. If the copy ended
// otherwise (Redis or the client went), Redis refused the RESET (no
// +RESET before the marker's answer, where CLIENT REPLY SKIP did not
// silence it), or no answer came within upstream.timeout, the client is
// closed instead.
func (s *Server) leaveStream(ss *session) {
	end, ended := s.endCopy(ss)
	// end.reset is set before the copy ended. After CLIENT REPLY SKIP
	// Redis answers the RESET with nothing, as it would the client.
	if !ended || end.reset == nil && !ss.replySkipped {
		ss.quit = true // the rest of the batch is not run
		ss.conn.NetConn().Close()
		return
	}
	// Redis has reset the connection, and the copy ended at the marker's
	// answer, after which Redis sends nothing: the connection goes back to
	// its pool, which resets it and logs it in again as after any pinned
	// session (a pipeline of SUBSCRIBE and RESET costs Redis no connection
	// per pair). One that tracked keys is reset the same way and kept by
	// the session instead (trackingState.pinTracked).
	s.backToShared(ss)
	s.resetSession(ss)
	ss.tracking.redirect, ss.tracking.trackBcast, ss.tracking.trackPrefixes, ss.role = -1, false, nil, 0
	ss.tracking.trackingArgs, ss.cstream().lastCaching = nil, nil // a later stream's branches must not track
	ss.replyOff, ss.skipNext, ss.replySkipped = false, false, false
	clear(ss.subscribed)
	// Redis's +RESET, held back by the relay: the client reads it once the
	// session has left stream mode (CLIENT LIST no longer shows it as a
	// subscriber or a monitor).
	if end.reset != nil {
		ss.queueLocal(end.reset, false)
	}
}

// leaveStreamUnsubscribed ends stream mode after an unsubscription that
// left the session as an ordinary connection on Redis (leavesStream): no
// subscriptions, no tracking, no MONITOR, replies on, database 0, no
// transaction or WATCH. The copy ends at the end marker's answer, as after
// a RESET, and the session goes on on the shared connections (on a
// cluster, its commands routed again: a CONFIG SET to every master, a key
// to its own), its state kept: Redis's connection held none beyond what
// the session holds. If the copy ended otherwise, or no answer came within
// upstream.timeout, the client is closed, as after a RESET.
func (s *Server) leaveStreamUnsubscribed(ss *session) {
	if _, ended := s.endCopy(ss); !ended {
		ss.quit = true
		ss.conn.NetConn().Close()
		return
	}
	s.backToShared(ss)
}

// leavesStream reports whether the session, in stream mode, is now an
// ordinary connection on Redis that rproxy can serve outside it
// (leaveStreamUnsubscribed).
func (ss *session) leavesStream() bool {
	return ss.stream && ss.role == 0 && ss.tracking.redirect == -1 && !ss.tracking.trackBcast && ss.tracking.trackingArgs == nil &&
		len(ss.subscribed['c'])+len(ss.subscribed['p'])+len(ss.subscribed['s']) == 0 &&
		ss.streamAnswered() && !ss.inTransaction() && !ss.streamWatch && ss.cstream().watchPool == nil && ss.cstream().branchTx == nil &&
		ss.db == 0 && !ss.dbUnknown && !ss.streamHeld
}

// endCopy sends an end marker (streamEnd) after the stream-mode batch so
// far and waits, up to upstream.timeout, for the copy to end at Redis's
// answer to it: ended reports that it did. The copy has then shown every
// reply sent before, the branches' too: they go either way.
func (s *Server) endCopy(ss *session) (end *streamEnd, ended bool) {
	end = newStreamEnd([]byte("rproxy-end-" + rand.Text()))
	ss.relay.endAfterReset(end)
	s.sendWithHelper(ss, end.command())
	timer := time.NewTimer(s.cfg.Upstream.Timeout)
	defer timer.Stop()
	select {
	case ended = <-ss.streamEnded:
	case <-timer.C:
	}
	ss.dropBranches()
	ss.streamWatch, ss.streamHeld = false, false
	return end, ended
}

// backToShared takes the session, whose copy has ended, out of stream
// mode: its connection goes back to its pool, which resets it.
func (s *Server) backToShared(ss *session) {
	ss.stream, ss.pinDirty = false, true
	ss.selectSeq++ // no SELECT of the stream settles the database again (unpin: 0)
	s.unpin(ss, false)
	ss.relay, ss.streamEnded, ss.streamTx = nil, nil, nil
	if lc, ok := ss.conn.NetConn().(*limitedConn); ok {
		lc.restoreIdle()
	}
	ss.subscribedSure = false
}

// sendWithHelper sends the stream-mode batch so far, and after it cmd, a
// command of rproxy's own that the relay waits for (not the client's).
func (s *Server) sendWithHelper(ss *session, cmd []byte) {
	ss.streamCmds = append(ss.streamCmds, cmd)
	ss.streamHelpers++
	s.sendStreamBatch(ss)
}

// redisSubscribed asks Redis whether the session's connection is in
// RESP2's subscribed mode (a modeProbe, sent with the batch so far), and
// waits for the answer, up to upstream.timeout. If none comes (the stream
// ended, or Redis is busy with a script), the client is closed: ok false.
func (s *Server) redisSubscribed(ss *session) (subscribed, ok bool) {
	p := newModeProbe([]byte("rproxy-probe-" + rand.Text()))
	ss.relay.probe(p)
	s.sendWithHelper(ss, p.command())
	timer := time.NewTimer(s.cfg.Upstream.Timeout)
	defer timer.Stop()
	select {
	case subscribed = <-p.result:
		return subscribed, true
	case <-ss.streamEnded: // Redis or the client went: the client is closed
	case <-timer.C:
		s.log.Info("closing a subscriber: no answer from Redis to the subscribed-mode probe",
			zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.Duration("waited_seconds", s.cfg.Upstream.Timeout))
		ss.conn.NetConn().Close()
	}
	ss.quit = true
	return false, false
}

// sendStream writes the batch's commands to the pinned connection.
func (s *Server) sendStream(ss *session) {
	ss.tracking.cachingSent = cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds)
	ss.pinSent += len(ss.streamCmds)
	if err := ss.pin.Send(ss.streamCmds); err != nil {
		s.log.Info("pub/sub upstream write failed", zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
			zap.String("command", commandName(ss.streamCmds[0])), zap.Error(err))
		ss.conn.NetConn().Close()
	}
	clear(ss.streamCmds)
	ss.streamCmds = ss.streamCmds[:0]
}

// deadlineWriter bounds writes to a streaming client with the current
// limits.client_write_timeout: a subscriber that stops reading is closed
// instead of holding its goroutine and pinned connection for good.
type deadlineWriter struct {
	nc     net.Conn
	limits *atomic.Pointer[Limits]
	clock  func() time.Time
	wd     writeDeadline
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.wd.arm(w.nc, w.clock(), w.limits.Load().ClientWriteTimeout)
	return w.nc.Write(p)
}

// batchCommand names the first command of b for a log line (never its
// arguments): "" for an empty batch.
func batchCommand(b *upstream.Batch) string {
	if b.Len() == 0 {
		return ""
	}
	return commandName(b.Command(0))
}

// commandName returns the lower-case name of a RESP command array, or "?".
func commandName(raw []byte) string {
	name := rawCommandName(raw)
	if name == nil {
		return "?"
	}
	return strings.ToLower(string(name))
}

// rawCommandName returns the name of a RESP command array as sent, within
// raw (nil if raw is not one).
func rawCommandName(raw []byte) []byte {
	// *<n>\r\n$<len>\r\n<name>\r\n
	i := bytes.IndexByte(raw, '\n')
	if i < 0 {
		return nil
	}
	name, _ := rawShortBulk(raw[i+1:])
	return name
}

// rawSubcommand returns the argument after the name of a RESP command
// array as sent (nil if there is none, or it is longer than 64 bytes).
func rawSubcommand(raw []byte) []byte {
	i := bytes.IndexByte(raw, '\n')
	if i < 0 {
		return nil
	}
	if _, rest := rawShortBulk(raw[i+1:]); rest != nil {
		sub, _ := rawShortBulk(rest)
		return sub
	}
	return nil
}

// rawShortBulk reads the bulk string b starts with, if it is at most 64
// bytes: its payload and what follows it (nil, nil otherwise).
func rawShortBulk(b []byte) (payload, rest []byte) {
	// $<len>\r\n<payload>\r\n
	if len(b) == 0 || b[0] != '$' {
		return nil, nil
	}
	j := bytes.IndexByte(b, '\n')
	if j < 0 {
		return nil, nil
	}
	n, err := strconv.Atoi(string(bytes.TrimSuffix(b[1:j], []byte("\r"))))
	if err != nil || n < 0 || j+1+n > len(b) || n > 64 {
		return nil, nil
	}
	end := min(j+1+n+2, len(b))
	return b[j+1 : j+1+n], b[end:]
}

// streamSelect sends, in stream mode, a SELECT of a database number: the
// session takes it as selected at once when Redis's default configuration
// has it (CLIENT INFO and CLIENT LIST in the same read show it, as Redis's
// would), and the relay, which sees Redis's
// answer, undoes that if Redis refused it (out of range, or RESP2's
// subscribed mode, or a cluster's nonzero database): settleSelect. It
// reports whether it sent the command. Inside a transaction SELECT goes
// as any command, and CLIENT LIST's db stays.
func (ss *session) streamSelect(cmd resp.Command) bool {
	if len(cmd.Args) != 2 || ss.inTransaction() {
		return false
	}
	n, ok := resp.ParseInt(cmd.Args[1])
	if !ok || n != int64(int32(n)) {
		return false
	}
	ss.selectSeq++
	if !ss.streamAnswered() {
		// After CLIENT REPLY OFF or SKIP nobody sees Redis's answer: the
		// database is taken as selected if Redis's default configuration
		// has it (a server with more databases is not asked).
		if n >= 0 && n < defaultDatabases {
			ss.db = int(n)
		}
		return false
	}
	seq, before := ss.selectSeq, ss.db
	if n >= 0 && n < defaultDatabases {
		// Taken at once only where Redis's default configuration has the
		// database: an answer made before the relay sees Redis's (a CLIENT
		// INFO right after a CLIENT CACHING: answerClientText) would
		// otherwise show a database Redis refused (SELECT 99).
		ss.db = int(n)
	}
	done := &ss.selectDone
	ss.joinInStream(cmd.Raw, func(r []byte) []byte {
		// The relay runs this for each SELECT in turn: the last one
		// answered (seq-1) left the database a refusal leaves.
		db := uint32(int32(n))
		if len(r) == 0 || r[0] == '-' || r[0] == '!' {
			db = uint32(int32(before))
			if last := done.Load(); last != 0 && uint32(last>>32) == seq-1 {
				db = uint32(last)
			}
		}
		done.Store(uint64(seq)<<32 | uint64(db))
		return r
	})
	return true
}

// selectSettled reports whether every stream-mode SELECT sent has been
// answered (settleSelect has what it needs).
func (ss *session) selectSettled() bool {
	return ss.selectSeq == 0 || uint32(ss.selectDone.Load()>>32) == ss.selectSeq
}

// defaultDatabases is Redis's default number of databases (databases in
// redis.conf).
const defaultDatabases = 16

// settleSelect sets the session's database to the one Redis left the pin
// in, once every stream-mode SELECT sent has been answered.
func (ss *session) settleSelect() {
	if ss.selectSeq == 0 {
		return
	}
	if last := ss.selectDone.Load(); last != 0 && uint32(last>>32) == ss.selectSeq {
		ss.db = int(int32(uint32(last)))
	}
}
