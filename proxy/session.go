package proxy

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// directWriteMin is the reply size above which a reply skips the client's
// write buffer and goes straight to the socket, so a 100 MB value is not copied
// twice.
const directWriteMin = 64 << 10

// directWriteChunk is the piece of a large reply written under one write
// deadline.
const directWriteChunk = 1 << 20

// replySource says where the reply to one of a batch's commands comes
// from, in the client's order (session.order).
type replySource struct {
	from replyFrom
	idx  int32 // fromLocal: local reply; fromFlight: joined flight; fromMerge: merge
}

type replyFrom uint8

const (
	fromUpstream replyFrom = iota // the batch's next upstream reply
	fromLocal                     // a reply made here (refusal, proxy answer, tier hit)
	fromFlight                    // a coalesced flight this session joined
	fromMerge                     // made from the replies of a split command's parts (cluster.go)
	fromDiscard                   // the batch's next upstream reply, not for the client (a deferred MULTI, a poison command)
)

// Session states, for draining on shutdown.
const (
	stateIdle int32 = iota
	stateBusy
	stateClosing
)

// session is one client connection's state.
type session struct {
	id    int64
	conn  *clientConn
	addr  netip.Addr // the client's address, for policy rules
	state atomic.Int32
	// The session's flags, together (a session is allocated per client:
	// each field's padding counts 10,000 times).
	authed    bool // true once AUTH succeeded, or when clients need not authenticate
	quit      bool
	multiSent bool // the client sent MULTI and no EXEC or DISCARD yet: its view, as it sends
	timed     bool // this batch is being timed (metrics.sampler)

	proto int      // 2 or 3, as set by HELLO
	pools *poolSet // shared connections: the server's, or those of the upstream user it AUTHed as
	// poolsRef is pools, for other goroutines (closing a deleted user's sessions).
	poolsRef atomic.Pointer[poolSet]
	user     string // the rproxy user it authenticated as
	name     string // CLIENT SETNAME
	libName  string // CLIENT SETINFO LIB-NAME
	libVer   string // CLIENT SETINFO LIB-VER

	// The batch being built from one read of pipelined commands: commands for
	// the upstream go into batch; the rest is in batchWork.
	batch *upstream.Batch
	// The working state of a batch, taken for each batch by a session that
	// parked since the last (releaseIdle): its fields are the session's.
	*batchWork

	// slot is the slot of the command being queued (set by cluster
	// routing or replica reads, taken by forwardTracked).
	slot int

	// Per-stage state that lasts from batch to batch: cluster routing
	// (cluster.go), and for coalescing (coalescing.go) the send sequence when the
	// session's last write was acknowledged; the rest is in batchWork.
	route        routeState
	lastWriteSeq uint64

	// Pinning: while the session holds connection state, its commands run on
	// a dedicated upstream connection (pin.go).
	pinning
	// Stream mode: pub/sub, MONITOR, tracking, replication (pin.go).
	streamMode

	killed        atomic.Bool // CLIENT KILL closed it: gone for CLIENT LIST and KILL at once
	blockedNow    atomic.Bool // waiting in a blocking command (CLIENT LIST's b flag)
	writeTimedOut atomic.Bool // a large reply's or a stream's write hit the deadline
	// blockedInStream counts the blocking commands a stream-mode session
	// sent whose replies have not come (CLIENT LIST's b flag there).
	blockedInStream atomic.Int32
	// blockedBranch is, on a cluster, the branch to another master a
	// stream-mode session's blocking command waits on (CLIENT UNBLOCK).
	blockedBranch atomic.Pointer[upstream.Dedicated]
	// pinnedState: db, dbUnknown, inMulti, watching and the open
	// transaction's queued SELECTs, as Redis's replies settle them.
	pinnedState
	// The state of stream mode beyond the pin on a cluster (clusterStream),
	// made at its first use (cstream): most sessions never need it.
	cs *clusterStreamState
	// notifyRef is cstream().notifyBranches as published for other
	// sessions (TRACKING REDIRECT), which must not make cs.
	notifyRef atomic.Pointer[[]*notifyBranch]
	// CLIENT TRACKING as the session set it up (trackingState).
	tracking trackingState
	// A CLIENT PAUSE or UNPAUSE queued in the open transaction, followed
	// from its EXEC (pausewatch.go).
	queuedPause [][]byte

	writeDeadline writeDeadline // the client socket's write deadline (ClientWriteTimeout)

	// lastCmd is the name of the last command read, for error logs and
	// CLIENT LIST.
	lastCmd string

	view clientView // what PROXY CLIENTS shows (publishView)

	// txClient: the CLIENT and AUTH commands queued in the open
	// transaction, which rproxy answers inside EXEC's reply (txclient.go).
	txClient txClient
}

// pinning is a session's dedicated upstream connection, held while the
// session holds connection state (a database, a transaction, a watch, a
// blocking command, stream mode). track holds, for each command in the
// batch while pinned, the state it may change; the replies decide.
type pinning struct {
	pin      *upstream.Dedicated
	pinPool  *upstream.Pool                     // the pool the pin came from
	pinRef   atomic.Pointer[upstream.Dedicated] // pin, for other sessions (CLIENT UNBLOCK, TRACKING REDIRECT)
	pinDirty bool                               // a command other than a blocking one ran on pin: it is reset when released
	blocking bool                               // batch holds a blocking command: no timeout, watch the client
	// pinAsking: the pin followed an ASK to the node importing slot
	// pinAskSlot (movePin), which serves the slot only to commands after
	// ASKING: each batch on it runs with ASKING before it (askingQueued).
	pinAsking  bool
	pinAskSlot int32    // a slot fits, and beside pinAsking it takes no room of its own
	pinTx      pinnedTx // the open transaction on a cluster's pin (pinmoved.go)
	pinSlots   []int    // the slots of the keys the pin ran commands of, on a cluster (pinServed)
	// blockingCmd is the batch's first blocking command's name, as
	// CLIENT LIST shows it while the session waits.
	blockingCmd string
	track       []track
	kept        []keptPin // pins kept for the session's next (a tracked connection, per protocol and user)
}

// streamMode is a session's state in stream mode: after a (un)subscribe,
// MONITOR, tracking or a replication handshake the session is in stream
// mode until it leaves or sends RESET: commands go to the pin as they
// come, and a goroutine copies everything Redis sends back to the client
// (the write buffer is not used meanwhile).
type streamMode struct {
	stream      bool
	streamCmds  [][]byte
	pinSent     int          // commands sent on the pin in stream mode (sendStream), for streamTx
	streamTx    *streamTx    // the transaction open on the pin, followed for the relay (streamfanout.go)
	relay       *streamRelay // what the copy goroutine writes through (stream mode)
	streamEnded chan bool    // the copy ended: true after a RESET (leaveStream)
	// streamHelpers counts the batch's commands sent only to help the relay
	// (the errorCmd before a HELLO): not the client's.
	streamHelpers int
	// streamSalt: writes of salted keys sent in stream mode whose replies
	// have not been shown (streamsalt.go).
	streamSalt streamSaltState
	// The channels, patterns and shard channels subscribed, by kind
	// ('c', 'p', 's'), as the client asked: for CLIENT LIST's sub, psub, ssub.
	subscribed map[byte]map[string]struct{}
	// selectSeq numbers the stream-mode SELECTs sent (streamSelect), and
	// selectDone is the last one answered, as seq<<32 | the database the
	// connection is in after it: set by the relay, read by settleSelect.
	selectSeq  uint32
	selectDone atomic.Uint64
	// CLIENT REPLY in stream mode: Redis answers nothing while replyOff,
	// nor the command after a SKIP (replySkipped while it runs): no relay
	// answer may wait for such a command's reply.
	replyOff, skipNext, replySkipped bool
	role                             byte // 'S' after SYNC or PSYNC, 'O' after MONITOR (CLIENT LIST's flags and TYPE)
	streamWatch                      bool // a WATCH sent in stream mode to the pin, no UNWATCH, EXEC or DISCARD since
	// streamHeld: the pin holds state the session does not follow (a
	// SELECT sent in stream mode, CLIENT NO-EVICT or NO-TOUCH), so stream
	// mode lasts until RESET (leavesStream).
	streamHeld bool
	noEvict    bool // CLIENT NO-EVICT ON sent (CLIENT LIST's e flag)
	// subscribedSure: a modeProbe found Redis in RESP2's subscribed mode,
	// and no unsubscribe went since, so no other probe is needed.
	subscribedSure bool
}

// batchWork is what a session needs while it serves a batch and keeps
// between batches only for speed (capacity, a cache): replies made here go
// into local; order says, for each command in client order, where its reply
// comes from; the stages keep their per-batch state: coalescing
// (coalescing.go), salted fan-out (salting.go), the local tier's writes and
// miss collapsing (tiering.go), policy (policy.go), the slow log and
// request log (slowlog.go). A parked client drops it (releaseIdle): not to a pool,
// where a collection would keep it alive once more.
type batchWork struct {
	local     []byte
	localEnds []int
	localRefs [][]byte // per local reply: a large shared reply (a tier entry) kept by reference, or nil
	order     []replySource

	call      call // the command passing the chain (chain.go), reused
	lookup    lastLookup
	flights   coalesceState
	copies    saltState
	hotWrites hotWriteState
	pol       policyState
	slowlog   slowLogState
	reqlog    reqLogState

	infoAt []infoAt // the batch's INFO commands, whose replies infoReply rewrites
	// unknownAt: the batch indexes of commands not in the command table
	// (commandTable.noteReplies).
	unknownAt []int

	// Outcome counts of the batch, added to the metrics once per batch:
	// per-command atomic adds on shared counters cost more than the rest of
	// the bookkeeping.
	localCount, refusedCount int

	replyAvg int // average upstream reply size in bytes, smoothed over batches (boundReplies)
	// The most reply and local bytes one flush of this client read held,
	// to decide whether to keep the buffers for the next read.
	replyHigh, localHigh int
}

func newSession(id int64, c *clientConn, pools *poolSet, authed bool) *session {
	ss := &session{id: id, conn: c, proto: 2, pools: pools, authed: authed, slot: upstream.SlotAny, tracking: trackingState{redirect: -1}}
	ss.view.created = time.Now()
	ss.poolsRef.Store(pools)
	if ap, err := netip.ParseAddrPort(c.RemoteAddr()); err == nil {
		ss.addr = ap.Addr().Unmap()
	}
	return ss
}

// releaseIdle gives back what the session keeps from one batch to the next
// for speed (the upstream batch, the batchWork, the scratch slices of the
// lasting stage state; all empty between batches): a parked client holds
// none of it, and its next batch takes them again.
func (ss *session) releaseIdle() {
	ss.batch, ss.batchWork = nil, nil
	ss.route.rest, ss.route.merges, ss.route.keys = nil, nil, nil
	if ss.pin == nil {
		ss.track = nil
	}
}

// resetBatchNames forgets the batch's command names (slow log, request log).
func (ss *session) resetBatchNames() {
	if ss.slowlog.count > 0 {
		clear(ss.slowlog.names)
		ss.slowlog.names, ss.slowlog.count = ss.slowlog.names[:0], 0
	}
	ss.slowlog.skip = false
}

// writeDeadline keeps a client socket's write deadline at the current
// limits.client_write_timeout t: re-armed when less than half of it is left
// (so a write blocked on a client that stopped reading ends within
// [t/2, t], and a deadline costs a timer update only now and then) or more
// than t (a reload lowered it), and cleared when t is 0.
type writeDeadline struct{ at time.Time }

func (w *writeDeadline) arm(nc net.Conn, now time.Time, t time.Duration) {
	left := w.at.Sub(now)
	switch {
	case t <= 0:
		if !w.at.IsZero() {
			w.at = time.Time{}
			nc.SetWriteDeadline(w.at)
		}
	case left < t/2 || left > t:
		w.reset(nc, now, t)
	}
}

// reset gives the next write a whole t.
func (w *writeDeadline) reset(nc net.Conn, now time.Time, t time.Duration) {
	w.at = now.Add(t)
	nc.SetWriteDeadline(w.at)
}

// closeIfIdle closes the connection unless a batch is being served; a busy
// session closes itself when its replies are written (see handle).
func (ss *session) closeIfIdle() {
	if ss.state.CompareAndSwap(stateIdle, stateClosing) {
		ss.conn.NetConn().Close()
	}
}

// handle serves one read batch of commands (at least one), so the whole
// client pipeline goes upstream together; the read loop flushes the replies
// in one write.
func (s *Server) handle(c *clientConn, cmds []resp.Command) {
	ss := c.ss
	if !ss.state.CompareAndSwap(stateIdle, stateBusy) {
		return // closing for shutdown
	}
	if ss.batch == nil {
		// Given back while parked (releaseIdle), or never taken.
		ss.batch, ss.batchWork = upstream.NewBatch(), new(batchWork)
	}
	if !ss.stream { // in stream mode the stream's writer keeps it
		ss.writeDeadline.arm(c.NetConn(), s.clock(), s.limits.Load().ClientWriteTimeout)
	}
	var slowStart time.Time
	if s.slow != nil {
		slowStart = s.clock() // millisecond clock: cheap enough for every batch
	}
	// One atomic load per batch when request logging is off; nothing is
	// measured for lines the log level would drop.
	if ss.reqlog.on = s.reqLog.Load() && s.log.Core().Enabled(zapcore.DebugLevel); ss.reqlog.on {
		ss.reqlog.start = time.Now()
	}
	var start time.Time
	if ss.timed = !ss.stream && s.metrics.sampler.sample(s.clock().UnixMilli()); ss.timed {
		start = time.Now()
	}
	cmd, rest := cmds[0], cmds[1:]
	ss.route.rest, ss.route.restAt = rest, 0
	s.exec(ss, cmd)
	for i := 0; i < len(rest) && !ss.quit; i++ {
		s.boundReplies(ss)
		ss.route.restAt = i + 1
		s.exec(ss, rest[i])
	}
	ss.route.rest = nil
	if s.sharedTransactionOpen(ss) {
		s.closeSharedTransaction(ss)
	}
	s.metrics.batchCommands.Observe(float64(1 + len(rest)))
	ss.flights.wrote = false
	if ss.stream {
		// The view first: Redis's replies reach the client from the copy
		// goroutine, and a CLIENT LIST after one must see what it did.
		s.publishView(ss)
		s.sendStreamBatch(ss)
		ss.resetBatchNames()
		if ss.quit {
			// It killed itself along with other clients (CLIENT KILL ...
			// SKIPME no): closed now, its reply likely not delivered.
			ss.state.Store(stateClosing)
			c.Close()
			return
		}
		ss.state.Store(stateIdle)
		return
	}
	s.flush(ss)
	// After a burst of large replies, give the memory back: at the first
	// read that used little of it (a burst spans many reads).
	if cap(ss.local) > maxLocalRetained && ss.localHigh < cap(ss.local)/4 {
		ss.local = nil
	}
	ss.batch.ShrinkTo(ss.replyHigh)
	ss.localHigh, ss.replyHigh = 0, 0
	if ss.timed {
		s.metrics.observeBatch(s.table.Load(), start, cmd, rest)
		ss.timed = false
	}
	if s.slow != nil {
		if took := s.clock().Sub(slowStart); took >= s.cfg.SlowLogThreshold && !ss.slowlog.skip {
			s.slow.note(ss, took)
		}
	}
	if ss.reqlog.on {
		s.logBatch(ss, "")
	}
	s.publishView(ss)
	ss.resetBatchNames()
	if ss.quit || s.draining.Load() {
		ss.state.Store(stateClosing)
		c.Close()
		return
	}
	ss.state.Store(stateIdle)
}

// maxLocalRetained bounds the buffer of replies made here that a session
// keeps between batches.
const maxLocalRetained = 1 << 20

// firstPart is how many commands of a client's read go upstream together
// before the size of their replies is known.
const firstPart = 64

// boundReplies sends the commands queued so far, and writes their replies
// to the client, once their replies could pass limits.max_reply_buffer
// (judged from the average reply the session has had): so a pipeline of
// 6,000 GETs of 100 KB values holds a few megabytes at a time, not 600 MB,
// and a client that reads slowly is not read from until its replies are
// written (as Redis's client-output-buffer-limit bounds what it holds).
//
// Replies made here (the local tier's, refusals) count by their size.
func (s *Server) boundReplies(ss *session) {
	n := ss.batch.Len()
	if len(ss.order) == 0 || ss.stream || s.sharedTransactionOpen(ss) {
		return
	}
	limit := s.limits.Load().MaxReplyBuffer
	if limit <= 0 {
		return
	}
	part := firstPart
	if ss.replyAvg > 0 {
		part = int(max(limit/int64(ss.replyAvg), 1))
	}
	if n >= part || int64(len(ss.local)) >= limit {
		s.flush(ss)
	}
}

// resetSession is what RESET does to a session once it holds no pinned
// connection: as a new one, logged out where rproxy or Redis checks
// passwords, on the default shared connections.
func (s *Server) resetSession(ss *session) {
	ss.route.multiPending = false
	ss.route.keylessTx, ss.route.keyless, ss.route.keylessBytes = false, nil, 0
	if s.salting != nil {
		s.salting.transactionGone(ss)
	}
	ss.txClient.forget()
	s.resetClientState(ss)
	if s.cfg.Users != nil {
		ss.authed, ss.user = false, "" // RESET deauthenticates, as on Redis
	}
	if s.cfg.AuthPassthrough {
		ss.setPools(&s.pools)
	}
}

// resetClientState forgets what RESET clears on Redis that the session
// keeps itself: protocol, name, library, and a passthrough login (Redis
// logs the connection out as default).
func (s *Server) resetClientState(ss *session) {
	ss.proto, ss.name, ss.libName, ss.libVer = 2, "", "", ""
	if s.cfg.AuthPassthrough {
		ss.user = ""
	}
}

// killOutOfBand sends SCRIPT KILL or FUNCTION KILL on a connection of its
// own: on the shared connection it would wait behind the very script it is
// to stop. On a cluster it goes to every master, and the reply is the
// first that is not NOTBUSY.
func (s *Server) killOutOfBand(ss *session, raw []byte) {
	if len(ss.order) == 0 {
		ss.reply(s.killOnEveryMaster(ss, raw))
		return
	}
	// The commands before it may wait on their connection behind the very
	// script it stops, which Redis answers only once the script ends: the
	// kill goes first, and its reply after theirs. A script of the
	// client's own among them Redis runs before a kill sent after it on
	// one connection, which then finds none; here it finds none too.
	r := s.killOnEveryMaster(ss, raw)
	s.flush(ss)
	ss.reply(r)
}

// killOnEveryMaster is killOutOfBand's kill, and its reply.
func (s *Server) killOnEveryMaster(ss *session, raw []byte) []byte {
	backend := ss.pools[ss.proto]
	var reply []byte
	for _, slot := range backend.Shards() {
		pool := backend.PinPool(slot)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Upstream.Timeout)
		d, err := pool.Acquire(ctx)
		cancel()
		if err != nil {
			if reply == nil {
				reply = resp.AppendError(nil, "ERR upstream unavailable: "+err.Error())
			}
			continue
		}
		b := upstream.NewBatch()
		b.Add(raw)
		d.Do(b, s.cfg.Upstream.Timeout)
		r := b.Reply(0)
		pool.Release(d)
		if reply == nil || bytes.HasPrefix(reply, []byte("-ERR upstream")) || !bytes.HasPrefix(r, []byte("-NOTBUSY")) {
			reply = r
		}
	}
	return reply
}

// answeredByProxy reports whether rproxy answers the command for the
// session itself (or starts stream mode for it) rather than forwarding it.
func answeredByProxy(info *command.Info, args [][]byte) bool {
	if isAuth(args[0]) {
		return true
	}
	if info == nil {
		return bytes.EqualFold(args[0], []byte("proxy"))
	}
	switch info.Handling {
	case command.Hello, command.Subscribe:
		return true
	case command.Client:
		if len(args) < 2 {
			return false
		}
		switch string(bytes.ToLower(args[1])) {
		case "id", "getname", "setname", "setinfo", "kill", "list", "info", "unblock", "tracking", "reply", "caching", "no-evict", "no-touch":
			return true
		}
	}
	return false
}

// commandLabel names a command for a message: its name, with the
// subcommand for a container command such as CLIENT.
func commandLabel(info *command.Info, args [][]byte) string {
	if info != nil && info.Handling == command.Client && len(args) > 1 {
		return string(args[0]) + " " + string(args[1])
	}
	return string(args[0])
}

// isNonBlockingRead reports whether an XREAD/XREADGROUP has no BLOCK option,
// so it returns at once and can share a connection.
func isNonBlockingRead(info *command.Info, args [][]byte) bool {
	if info.Name != "xread" && info.Name != "xreadgroup" {
		return false
	}
	_, block := xreadBlock(args)
	return !block
}

// xreadBlock returns the index in args, an XREAD or XREADGROUP, of its
// BLOCK option's value, reading the options as Redis does up to STREAMS
// (so a group or consumer named "block" is not taken for it); ok is false
// without one, or with a syntax error Redis gives at once.
func xreadBlock(args [][]byte) (at int, ok bool) {
	for i := 1; i < len(args); i++ {
		switch {
		case bytes.EqualFold(args[i], []byte("block")):
			return i + 1, i+1 < len(args)
		case bytes.EqualFold(args[i], []byte("count")):
			i++
		case bytes.EqualFold(args[i], []byte("group")):
			i += 2
		case bytes.EqualFold(args[i], []byte("noack")):
		default: // STREAMS, or a syntax error
			return 0, false
		}
	}
	return 0, false
}

// forward queues a command for the upstream, in the client's order.
func (ss *session) forward(raw []byte) {
	ss.forwardTracked(raw, track{})
}

// forwardTracked is forward, with what the command may change on a pin.
func (ss *session) forwardTracked(raw []byte, t track) {
	ss.batch.AddSlot(raw, ss.slot)
	ss.slot = upstream.SlotAny
	ss.order = append(ss.order, replySource{from: fromUpstream})
	if ss.pin != nil {
		ss.track = append(ss.track, t)
	}
}

// queueLocal queues a reply made here, in order with the upstream ones. A
// large shared reply, one nobody changes (a tier entry), is kept by
// reference instead of copied: a burst of them costs no memory per reply.
func (ss *session) queueLocal(r []byte, shared bool) {
	if shared && len(r) >= directWriteMin {
		ss.localRefs = append(ss.localRefs, r)
	} else {
		ss.local = append(ss.local, r...)
		ss.localRefs = append(ss.localRefs, nil)
	}
	ss.localEnds = append(ss.localEnds, len(ss.local))
	ss.order = append(ss.order, replySource{from: fromLocal, idx: int32(len(ss.localEnds) - 1)})
}

// replyShared queues a reply from the local tier (never modified).
func (ss *session) replyShared(r []byte) {
	ss.localCount++
	ss.queueLocal(r, true)
}

// reply queues a reply made by the proxy, in order with the upstream ones.
func (ss *session) reply(r []byte) {
	ss.localCount++
	ss.queueLocal(r, false)
}

func (s *Server) refuse(ss *session, name []byte, why string) {
	s.refuseMsg(ss, string(bytes.ToUpper(name))+" is not supported yet: "+why)
}

// refuseMsg queues "-ERR rproxy: msg" in order with the other replies, as
// a refusal (deny: inside MULTI it aborts the transaction).
func (s *Server) refuseMsg(ss *session, msg string) {
	s.deny(ss, resp.AppendError(nil, "ERR rproxy: "+msg))
}

// flush sends the queued upstream commands, waits for their replies and
// writes every queued reply to the client in order.
func (s *Server) flush(ss *session) {
	if len(ss.order) == 0 {
		return
	}
	if n := ss.batch.Len(); n > 0 {
		s.metrics.forwarded.Add(float64(n))
		var start time.Time
		if ss.timed {
			start = time.Now()
		}
		if ss.pin != nil {
			ss.flights.batchWrote = true // pinned batches may write in ways not flagged here
			s.doPinned(ss)
		} else {
			for _, l := range ss.flights.leads {
				// A key read concurrently: one flight at a time, unless the
				// one before is stalled (the pool's watcher looks at least
				// every half stall_divert).
				l.f.AwaitTurn(s.cfg.Upstream.StallDivert / 2)
			}
			ss.pools[ss.proto].Do(ss.batch)
		}
		if ss.timed {
			s.metrics.upstreamSeconds.Observe(time.Since(start).Seconds())
		}
		// A running average of the reply size, for boundReplies.
		ss.replyHigh = max(ss.replyHigh, ss.batch.ReplyBytes())
		avg := ss.batch.ReplyBytes()/n + 1
		if ss.replyAvg == 0 {
			ss.replyAvg = avg
		} else {
			ss.replyAvg = (3*ss.replyAvg + avg) / 4
		}
		if ss.flights.batchWrote {
			// Every send numbered after this moment left after the write
			// was acknowledged: such flights are safe to join.
			ss.lastWriteSeq, ss.flights.batchWrote = s.sendSeq.Load(), false
		}
	}
	s.afterReplies(ss) // the chain's replies phase (chain.go)
	if len(ss.unknownAt) > 0 {
		s.commands.noteReplies(ss.batch, ss.unknownAt)
	}
	if ss.reqlog.on {
		ss.reqlog.stats.upstream += ss.batch.Len()
		ss.reqlog.stats.joined += len(ss.flights.joined)
	}
	s.countLocal(ss)
	up, over, miss := 0, 0, 0
	gate := s.tiering.missGate(ss)
	for i, o := range ss.order {
		var r []byte
		switch o.from {
		case fromDiscard:
			up++ // the upstream reply to a deferred MULTI, answered already
			continue
		case fromMerge:
			m := &ss.route.merges[o.idx]
			r = m.reply(m.partReplies(ss.batch, up))
			if len(ss.infoAt) > 0 && m.parts > 0 { // a reply made here (mergeMade) is no INFO's
				r = s.infoAtReply(ss, up, r) // INFO from every master
			}
			up += m.parts
		case fromFlight:
			r = ss.flights.joined[o.idx].Wait()
		case fromUpstream:
			r = ss.batch.Reply(up)
			if over < len(ss.copies.over) && ss.copies.over[over].idx == up {
				r = ss.copies.over[over].reply // a copy missed: the origin's reply
				over++
			}
			if len(ss.infoAt) > 0 { // rare: kept out of the loop's call path
				r = s.infoAtReply(ss, up, r)
			}
			up++
		case fromLocal:
			start := 0
			if o.idx > 0 {
				start = ss.localEnds[o.idx-1]
			}
			r = ss.local[start:ss.localEnds[o.idx]]
			if ref := ss.localRefs[o.idx]; ref != nil {
				r = ref
			}
		}
		if miss < len(ss.hotWrites.misses) && ss.hotWrites.misses[miss].at == i {
			if gate != nil {
				r = s.tiering.collapseMiss(ss, gate, ss.hotWrites.misses[miss].key, r)
			}
			miss++
		}
		if ss.reqlog.on && len(r) > 0 && (r[0] == '-' || r[0] == '!') {
			ss.reqlog.stats.errors++
		}
		if len(ss.txClient.pending) > 0 {
			r = ss.txClient.answerMarkers(ss, r, execAnswers{clients: s.clientCmds, auth: s.authing})
		}
		s.write(ss, r)
	}
	ss.txClient.afterFlush()
	if len(ss.hotWrites.misses) > 0 {
		clear(ss.hotWrites.misses)
		ss.hotWrites.misses = ss.hotWrites.misses[:0]
	}
	ss.batch.ResetKeep() // Shrink at the end of the client's read: boundReplies may send the rest in parts
	ss.infoAt, ss.unknownAt = ss.infoAt[:0], ss.unknownAt[:0]
	ss.localHigh = max(ss.localHigh, len(ss.local))
	clear(ss.localRefs)
	ss.local, ss.localEnds, ss.localRefs, ss.order = ss.local[:0], ss.localEnds[:0], ss.localRefs[:0], ss.order[:0]
	clear(ss.flights.joined)
	ss.flights.joined = ss.flights.joined[:0]
	if len(ss.route.merges) > 0 {
		clear(ss.route.merges)
		ss.route.merges = ss.route.merges[:0]
	}
	if len(ss.copies.reads) > 0 {
		clear(ss.copies.reads)
		ss.copies.reads = ss.copies.reads[:0]
		clear(ss.copies.over)
		ss.copies.over = ss.copies.over[:0]
	}
	if ss.pin != nil && ss.pinNoLongerNeeded() {
		// Let the replies go before the reset round trip of Release.
		ss.conn.Flush()
		s.unpin(ss, false)
	}
}

// write hands a reply to the client connection. Large replies bypass
// its buffer: what is buffered is flushed first, so order holds.
func (s *Server) write(ss *session, r []byte) {
	if len(r) < directWriteMin {
		ss.conn.WriteRaw(r)
		return
	}
	if err := ss.conn.Flush(); err != nil {
		return // the read loop closes the connection after the batch
	}
	nc := ss.conn.NetConn()
	for len(r) > 0 {
		// In pieces, each with its own deadline: a big reply to a slow
		// but reading client is progress, not a stalled client.
		n := min(len(r), directWriteChunk)
		if t := s.limits.Load().ClientWriteTimeout; t > 0 {
			ss.writeDeadline.reset(nc, time.Now(), t)
		}
		if _, err := nc.Write(r[:n]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				ss.writeTimedOut.Store(true) // closed() logs and counts it
			} else {
				s.log.Info("client write failed", zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
					zap.String("last_command", ss.lastCmd), zap.Error(err))
			}
			nc.Close()
			return
		}
		r = r[n:]
	}
}

// selectDB forwards SELECT 0 (every shared connection is in db 0) and any
// SELECT Redis itself rejects; switching to another db is refused for now.
func (s *Server) selectDB(ss *session, cmd resp.Command) {
	if len(cmd.Args) == 2 {
		n, ok := resp.ParseInt(cmd.Args[1])
		if ok && n == int64(int32(n)) && (ss.pin != nil || n != 0) {
			if ss.pin == nil && !s.pinSession(ss, upstream.SlotAny) {
				return
			}
			ss.forwardTracked(cmd.Raw, track{kind: trackSelect, db: int(n)})
			return
		}
	}
	ss.forward(cmd.Raw) // SELECT 0 unpinned, or one Redis rejects
}

// client answers the CLIENT subcommands that describe this connection from
// the session, forwards the ones that are safe on a shared connection, and
// refuses the ones that would change a shared connection's state.
func (s *Server) client(ss *session, cmd resp.Command) {
	args := cmd.Args
	if len(args) < 2 {
		ss.forward(cmd.Raw) // Redis's own arity error
		return
	}
	sub := bytes.ToLower(args[1])
	if known, here := sessionClientCommand(s.table.Load(), args); known {
		switch {
		case !here:
			// Redis's own error: another number of arguments, or a
			// SETINFO a server without it does not know.
			ss.forward(cmd.Raw)
		case string(sub) == "info" || string(sub) == "list":
			text, errReply := s.clientCmds.clientText(ss, cmd)
			if errReply != nil {
				ss.reply(errReply)
				return
			}
			ss.replyClientText(text)
		default:
			ss.reply(s.clientCmds.answer(ss, cmd))
		}
		return
	}
	switch string(sub) {
	case "kill":
		s.clientCmds.clientKill(ss, cmd)
	case "unblock":
		s.clientCmds.clientUnblock(ss, cmd)
	case "pause", "unpause", "help", "getredir", "trackinginfo":
		// Read-only or server-wide: safe on a shared connection.
		ss.forward(cmd.Raw)
	case "tracking":
		refused := ss.trackingRefused(args)
		errReply := s.clientCmds.trackingOverlapReply(args, refused)
		if errReply == nil {
			errReply = s.stream.bcastRedirectReaches(ss, args)
		}
		var raw []byte
		if errReply == nil {
			raw, errReply = s.clientCmds.trackingRedirect(ss, cmd, refused)
		}
		if errReply != nil {
			ss.reply(errReply)
			return
		}
		s.startStream(ss, raw)
		ss.tracking.pinTracked = ss.tracking.pinTracked || ss.stream
		if ss.stream && !refused {
			ss.tracking.trackingArgs = ss.branchTrackingArgs(args)
			if refusal := s.stream.bcastEverywhere(ss, args); refusal != nil {
				// The pin refuses it too, and answers: tracking stays off.
				ss.tracking.trackingArgs, ss.tracking.redirect, ss.tracking.trackBcast, ss.tracking.trackPrefixes = nil, -1, false, nil
				ss.noteRedirect()
			}
		}
	case "reply", "caching", "no-evict", "no-touch":
		// Connection state for this client alone: from now on the session
		// has its own connection (stream mode).
		s.startStream(ss, cmd.Raw)
		ss.noteCaching(args, cmd.Raw)
		if ss.stream {
			ss.noteClientReply(args)
			ss.noteHeldState(args)
		}
	default:
		ss.forward(cmd.Raw) // Redis's "unknown subcommand"
	}
}

// setNameReply does CLIENT SETNAME name and returns its reply.
func setNameReply(ss *session, name []byte) []byte {
	if !validClientName(name) {
		return []byte("-ERR Client names cannot contain spaces, newlines or special characters.\r\n")
	}
	ss.name = string(name)
	return []byte("+OK\r\n")
}

// setInfoReply does CLIENT SETINFO attr value (args) and returns its reply.
func setInfoReply(ss *session, args [][]byte) []byte {
	attr, val := bytes.ToLower(args[2]), args[3]
	if !validClientName(val) && len(val) > 0 {
		return resp.AppendError(nil, "ERR "+string(args[2])+" cannot contain spaces, newlines or special characters.")
	}
	switch string(attr) {
	case "lib-name":
		ss.libName = string(val)
	case "lib-ver":
		ss.libVer = string(val)
	default:
		return resp.AppendError(nil, "ERR Unrecognized option '"+string(args[2])+"'")
	}
	return []byte("+OK\r\n")
}

// validClientName applies Redis's rule: printable ASCII without spaces.
func validClientName(name []byte) bool {
	for _, c := range name {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// hello switches the session's protocol. The reply is the upstream's own
// HELLO reply, from a shared connection of the target protocol, so it is
// encoded exactly as Redis encodes it, with the session's id; SETNAME is
// applied to the session, and the AUTH option is checked as AUTH is
// (helloAuth), never sent on a shared connection.
func (s *Server) hello(ss *session, cmd resp.Command) {
	h, ok := parseHello(cmd.Args, ss.proto)
	if !ok {
		// Redis rejects the version or the options with its own error,
		// changing nothing: forwarding it is safe.
		s.helloUpstream(ss, cmd.Raw, ss.proto, false, nil)
		return
	}
	if (h.hasAuth || !ss.authed) && !s.authing.helloAuth(ss, h.authUser, h.authPass, h.authCheck) {
		s.flush(ss)
		return
	}
	if h.setName && !validClientName(h.name) {
		ss.reply([]byte("-ERR Client names cannot contain spaces, newlines or special characters.\r\n"))
		s.flush(ss)
		return
	}
	hello := [][]byte{[]byte("HELLO")}
	if len(cmd.Args) >= 2 {
		hello = append(hello, strconv.AppendInt(nil, int64(h.proto), 10))
	}
	if h.hasAuth && s.authing.passthrough && ss.pin != nil {
		// The pinned connection (a database, a watch) becomes the user's
		// too, as AUTH makes it (auth); the shared ones are the user's
		// pools already.
		hello = append(hello, []byte("AUTH"), h.authUser, h.authPass)
	}
	s.helloUpstream(ss, resp.AppendCommand(nil, hello...), h.proto, h.setName, h.name)
}

// helloArgs is what a HELLO asks for.
type helloArgs struct {
	proto              int // the protocol asked for (the session's when none is)
	name               []byte
	setName, hasAuth   bool
	authUser, authPass []byte
	authCheck          [][]byte // HELLO with its AUTH option alone, as the client spelled it
}

// parseHello reads HELLO [protover [AUTH user pass] [SETNAME name]]; it
// reports false for what Redis rejects (a version other than 2 and 3, an
// unknown or incomplete option).
func parseHello(args [][]byte, proto int) (helloArgs, bool) {
	h := helloArgs{proto: proto}
	if len(args) < 2 {
		return h, true
	}
	v, ok := resp.ParseInt(args[1])
	if !ok || (v != 2 && v != 3) {
		return h, false
	}
	h.proto = int(v)
	for i := 2; i < len(args); i++ {
		switch string(bytes.ToLower(args[i])) {
		case "auth":
			if i+2 < len(args) {
				h.authUser, h.authPass, h.hasAuth = args[i+1], args[i+2], true
				h.authCheck = [][]byte{args[0], args[1], args[i], h.authUser, h.authPass}
				i += 2
				continue
			}
		case "setname":
			if i+1 < len(args) {
				h.name, h.setName = args[i+1], true
				i++
				continue
			}
		}
		return h, false
	}
	return h, true
}

// streamHello answers HELLO in stream mode as hello does outside it: the
// AUTH option is checked here and never sent to Redis, and the reply gives
// the session's id. The pinned connection must switch protocol itself, so
// the HELLO (without AUTH) goes to it, after an errorCmd whose answer the
// relay drops and which tells it to set the id in the reply that follows.
func (s *Server) streamHello(ss *session, cmd resp.Command) {
	h, ok := parseHello(cmd.Args, ss.proto)
	if !ok {
		ss.streamCmds = append(ss.streamCmds, cmd.Raw) // Redis's own error
		return
	}
	if h.hasAuth && !s.authing.helloAuth(ss, h.authUser, h.authPass, h.authCheck) {
		return // answered
	}
	if h.setName && !validClientName(h.name) {
		ss.replyInMode([]byte("-ERR Client names cannot contain spaces, newlines or special characters.\r\n"))
		return
	}
	hello := [][]byte{[]byte("HELLO")}
	if len(cmd.Args) >= 2 {
		hello = append(hello, strconv.AppendInt(nil, int64(h.proto), 10))
	}
	if h.setName {
		hello = append(hello, []byte("SETNAME"), h.name)
		ss.name = string(h.name)
	}
	id := ss.id
	if len(cmd.Args) >= 2 {
		// The client's connection switches protocol: so do its branches
		// (RESP2 tracking without REDIRECT sends no invalidations).
		ss.toBranches(resp.AppendCommand(nil, hello[:2]...))
	}
	ss.rewriteInStream(resp.AppendCommand(nil, hello...), func(r []byte) []byte { return helloWithID(r, id) })
	ss.proto = h.proto
}

// rewriteInStream sends raw in stream mode with its reply passed through
// f: after an errorCmd whose answer the relay drops and which tells it so.
func (ss *session) rewriteInStream(raw []byte, f func([]byte) []byte) {
	if !ss.streamAnswered() || ss.inTransaction() {
		// No reply to rewrite (and a SKIP must fall on raw, not a helper),
		// or it comes inside EXEC's array, where the relay does not look:
		// the helper would be a queue-time error aborting the transaction.
		ss.streamCmds = append(ss.streamCmds, raw)
		return
	}
	ss.relay.rewriteNext(f)
	ss.streamCmds = append(ss.streamCmds, errorCmd, raw)
	ss.streamHelpers++
}

// helloUpstream sends a HELLO on a shared connection of protocol proto and,
// if Redis accepts it, makes proto the session's protocol.
func (s *Server) helloUpstream(ss *session, raw []byte, proto int, setName bool, name []byte) {
	s.metrics.local.Inc()
	ss.batch.Add(raw)
	if ss.pin != nil {
		// The pinned connection itself switches, so later replies on it
		// use the session's new protocol.
		ss.pinDirty = true
		ss.pin.Do(ss.batch, s.cfg.Upstream.Timeout)
	} else {
		ss.pools[proto].Do(ss.batch)
	}
	r := ss.batch.Reply(0)
	if s.cfg.Cluster != nil {
		r = bytes.Replace(r, helloModeCluster, helloModeStandalone, 1)
	}
	if len(r) > 0 && r[0] != '-' && r[0] != '!' {
		ss.proto = proto
		if setName {
			ss.name = string(name)
		}
		r = helloWithID(r, ss.id)
	}
	s.write(ss, r)
	ss.batch.Reset()
}

// streamAnswered reports whether Redis answers the stream-mode command
// being queued: not under CLIENT REPLY OFF, nor right after SKIP.
func (ss *session) streamAnswered() bool { return !ss.replyOff && !ss.replySkipped }

// noteClientReply follows CLIENT REPLY ON|OFF|SKIP, which Redis applies to
// the session's own connection (stream mode).
func (ss *session) noteClientReply(args [][]byte) {
	if len(args) != 3 || !bytes.EqualFold(args[1], []byte("reply")) {
		return
	}
	switch {
	case bytes.EqualFold(args[2], []byte("on")):
		ss.replyOff, ss.skipNext = false, false
	case bytes.EqualFold(args[2], []byte("off")):
		ss.replyOff = true
	case bytes.EqualFold(args[2], []byte("skip")):
		ss.skipNext = !ss.replyOff
	}
}

// helloIDKey is the id field's key in a HELLO reply (a bulk string in
// both protocols), followed by its integer value.
var helloIDKey = []byte("$2\r\nid\r\n:")

// helloWithID returns the HELLO reply r with its id field set to the
// session's id: the one CLIENT ID answers and CLIENT KILL ID takes, not the
// id of the upstream connection that answered (clients such as go-redis
// keep the id HELLO gives).
func helloWithID(r []byte, id int64) []byte { return withIntField(r, helloIDKey, id) }

// withIntField returns the reply r, a map (or RESP2's flat array of
// pairs), with the integer after key (the key's bulk string and the ':')
// set to v. r is returned as is without the key.
func withIntField(r, key []byte, v int64) []byte {
	i := bytes.Index(r, key)
	if i < 0 {
		return r
	}
	start := i + len(key)
	end := bytes.Index(r[start:], []byte("\r\n"))
	if end < 0 {
		return r
	}
	out := make([]byte, 0, len(r)+20)
	out = append(out, r[:start]...)
	out = strconv.AppendInt(out, v, 10)
	return append(out, r[start+end:]...)
}

// sendStreamBatch counts a stream-mode batch's commands and sends them.
func (s *Server) sendStreamBatch(ss *session) {
	// A reply made here or a refusal is a command on the stream too (a
	// script, or a command Redis rejects), but not a forwarded one.
	forwarded := len(ss.streamCmds) - ss.localCount - ss.refusedCount - ss.streamHelpers
	ss.streamHelpers = 0
	if ss.reqlog.on {
		ss.reqlog.stats.upstream += forwarded
	}
	s.metrics.forwarded.Add(float64(forwarded))
	s.countLocal(ss)
	s.sendStream(ss)
	if ss.reqlog.on {
		s.logBatch(ss, "stream")
	}
}

// countLocal counts the batch's replies made here and its refusals, in the
// metrics and the request log.
func (s *Server) countLocal(ss *session) {
	if ss.reqlog.on {
		ss.reqlog.stats.local += ss.localCount
		ss.reqlog.stats.refused += ss.refusedCount
	}
	if ss.localCount > 0 {
		s.metrics.local.Add(float64(ss.localCount))
		ss.localCount = 0
	}
	if ss.refusedCount > 0 {
		s.metrics.refused.Add(float64(ss.refusedCount))
		ss.refusedCount = 0
	}
}

// trackingState is what a session's CLIENT TRACKING set up: what CLIENT
// GETREDIR and TRACKINGINFO report, what a cluster's branches are given,
// and whether its pinned connection holds Redis's tracking entries.
type trackingState struct {
	redirect int64 // CLIENT GETREDIR in rproxy's ids: -1 tracking off, 0 on without REDIRECT
	// trackPrefixes: in BCAST mode, the prefixes Redis holds for the
	// session ("" for none given); each CLIENT TRACKING on adds to them.
	trackPrefixes [][]byte
	// trackingArgs: the arguments of the CLIENT TRACKING ON in force in
	// stream mode (nil: off), which a branch to another master is given.
	trackingArgs [][]byte
	// cachingSent: Redis holds a CLIENT CACHING flag after the stream-mode
	// commands sent so far (cachingHeldAfter).
	cachingSent bool
	// pinTracked: CLIENT TRACKING went to the pinned connection. Redis keeps
	// the connection's id in its tracking table for the keys read while
	// tracking, until they change, RESET or not: another session that
	// turned tracking on on it would get invalidations of this one's keys.
	// So it is never pooled: once the session no longer needs it, it is
	// kept for this session's next pin (kept), as the client's own
	// connection to Redis would stay with its entries, and closed when the
	// client leaves.
	pinTracked bool
	trackBcast bool // CLIENT TRACKING on in BCAST mode
}
