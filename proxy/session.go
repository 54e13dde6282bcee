package proxy

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rproxy/rproxy/coalesce"
	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// directWriteMin is the reply size above which a reply skips the client's
// write buffer and goes straight to the socket, so a 100 MB value is not copied
// twice.
const directWriteMin = 64 << 10

// directWriteChunk is the piece of a large reply written under one write
// deadline.
const directWriteChunk = 1 << 20

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

	proto int      // 2 or 3, as set by HELLO
	pools *poolSet // shared connections: the server's, or those of the upstream user it AUTHed as
	// poolsRef is pools, for other goroutines (closing a deleted user's sessions).
	poolsRef atomic.Pointer[poolSet]
	authed   bool   // true once AUTH succeeded, or when clients need not authenticate
	user     string // the rproxy user it authenticated as
	name     []byte // CLIENT SETNAME
	libName  []byte // CLIENT SETINFO LIB-NAME
	libVer   []byte // CLIENT SETINFO LIB-VER

	// The batch being built from one read of pipelined commands: commands for
	// the upstream go into batch; replies made here go into local; order says,
	// for each command in client order, where its reply is (-1: the next
	// upstream reply; i >= 0: local reply i).
	batch     *upstream.Batch
	local     []byte
	localEnds []int
	localRefs [][]byte // per local reply: a large shared reply (a tier entry) kept by reference, or nil
	order     []int
	quit      bool

	// Cluster routing: the slot of the command being queued (set by
	// routeCluster, taken by forwardTracked), the rest of the read batch
	// (so MULTI can pin to the master of the transaction's first key),
	// split commands whose replies are merged, and key scratch.
	slot         int
	multiPending bool // MULTI answered, not yet sent: no master chosen yet
	crossSlotTx  bool // a command of the open transaction is for another master: EXEC gets CROSSSLOT (crossslot.go)
	rest         []resp.Command
	restAt       int
	merges       []merge
	routeKeys    [][]byte

	// Salted fan-out, per batch: copy reads queued, salted keys written,
	// and the replies of copy reads that missed (served from the origin).
	saltReads  []saltRead
	saltWrites []*salt.Key
	saltOver   []saltOverride

	// Pinning: while the session holds connection state, its commands run on
	// a dedicated upstream connection. track holds, for each command in
	// batch while pinned, the state it may change; the replies decide.
	pin      *upstream.Dedicated
	pinPool  *upstream.Pool                     // the pool the pin came from
	pinRef   atomic.Pointer[upstream.Dedicated] // pin, for other sessions (CLIENT UNBLOCK, TRACKING REDIRECT)
	pinDirty bool                               // a command other than a blocking one ran on pin: it is reset when released
	redirect int64                              // CLIENT GETREDIR in rproxy's ids: -1 tracking off, 0 on without REDIRECT
	// The channels, patterns and shard channels subscribed, by kind
	// ('c', 'p', 's'), as the client asked: for CLIENT LIST's sub, psub, ssub.
	subscribed map[byte]map[string]struct{}
	killed     atomic.Bool // CLIENT KILL closed it: gone for CLIENT LIST and KILL at once
	blockedNow atomic.Bool // waiting in a blocking command (CLIENT LIST's b flag)
	inMulti    bool        // Redis answered MULTI; set from replies, after the batch
	multiSent  bool        // the client sent MULTI and no EXEC or DISCARD yet: its view, as it sends
	watching   bool
	db         int  // database selected on the pin
	dbUnknown  bool // a SELECT ran inside a transaction: keep the pin
	blocking   bool // batch holds a blocking command: no timeout, watch the client
	track      []track
	// stream: after a (un)subscribe the session is in stream mode for good:
	// commands go to the pin as they come, and a goroutine copies everything
	// Redis sends back to the client. The write buffer is not used any more.
	stream     bool
	streamCmds [][]byte

	// Coalescing, per read batch: flights this session leads (published
	// right after its upstream call), flights it joined (order entries
	// -2-i), whether the batch wrote (no joins after a write), and a scratch
	// buffer for flight keys.
	leads      []lead
	joined     []*coalesce.Flight
	wrote      bool   // this read batch has a write so far
	batchWrote bool   // the batch being sent has a write
	lastWrite  uint64 // send sequence when the session's last write was acknowledged
	key        []byte

	// Local tier coherence, per batch: keys written (invalidated again once
	// acknowledged), whether a write emptied a database, and whether a write
	// with undeclared keys needs the tracking barrier.
	hotKeys    [][]byte
	hotClear   bool
	hotBarrier bool
	missAts    []missAt // GETs of hot keys whose misses are collapsed (missgate.go)

	// Policy scratch, reused per command so the check allocates nothing,
	// and the batch used to probe key sizes before a DEL.
	polReq  policy.Request
	polKeys [][]byte
	probe   *upstream.Batch

	infoAt []int // batch indexes of INFO commands that get the # Proxy section

	writeDeadline writeDeadline // the client socket's write deadline (ClientWriteTimeout)
	slowNames     []string      // the batch's first command names, for the slow log
	slowCount     int           // the batch's commands, for the slow log
	slowSkip      bool          // the batch blocked by request (BLPOP...): not logged
	writeTimedOut atomic.Bool   // a large reply's or a stream's write hit the deadline
	timed         bool          // this batch is being timed (metrics.sampler)

	// Request logging (Server.SetRequestLog), per batch: whether this
	// batch is logged, when it started, and what became of its commands.
	// lastCmd is the name of the last command read, for error logs.
	logReq   bool
	reqStart time.Time
	req      reqStats
	lastCmd  string

	view clientView // what PROXY CLIENTS shows (publishView)

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
	ss := &session{id: id, conn: c, proto: 2, pools: pools, authed: authed, batch: upstream.NewBatch(), slot: upstream.SlotAny, redirect: -1}
	ss.view.created = time.Now()
	ss.poolsRef.Store(pools)
	if ap, err := netip.ParseAddrPort(c.RemoteAddr()); err == nil {
		ss.addr = ap.Addr().Unmap()
	}
	return ss
}

// resetBatchNames forgets the batch's command names (slow log, request log).
func (ss *session) resetBatchNames() {
	if ss.slowCount > 0 {
		clear(ss.slowNames)
		ss.slowNames, ss.slowCount = ss.slowNames[:0], 0
	}
	ss.slowSkip = false
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
	if !ss.stream { // in stream mode the stream's writer keeps it
		ss.writeDeadline.arm(c.NetConn(), s.clock(), s.limits.Load().ClientWriteTimeout)
	}
	var slowStart time.Time
	if s.slow != nil {
		slowStart = s.clock() // millisecond clock: cheap enough for every batch
	}
	// One atomic load per batch when request logging is off; nothing is
	// measured for lines the log level would drop.
	if ss.logReq = s.reqLog.Load() && s.log.Core().Enabled(zapcore.DebugLevel); ss.logReq {
		ss.reqStart = time.Now()
	}
	var start time.Time
	if ss.timed = !ss.stream && s.metrics.sampler.sample(s.clock().UnixMilli()); ss.timed {
		start = time.Now()
	}
	cmd, rest := cmds[0], cmds[1:]
	ss.rest, ss.restAt = rest, 0
	s.exec(ss, cmd)
	for i := 0; i < len(rest) && !ss.quit; i++ {
		s.boundReplies(ss)
		ss.restAt = i + 1
		s.exec(ss, rest[i])
	}
	ss.rest = nil
	s.metrics.batchCommands.Observe(float64(1 + len(rest)))
	ss.wrote = false
	if ss.stream {
		if ss.logReq {
			ss.req.upstream += len(ss.streamCmds)
		}
		s.sendStream(ss)
		if ss.logReq {
			s.logBatch(ss, "stream")
		}
		s.publishView(ss)
		ss.resetBatchNames()
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
		s.observeBatch(start, cmd, rest)
		ss.timed = false
	}
	if s.slow != nil {
		if took := s.clock().Sub(slowStart); took >= s.cfg.SlowLogThreshold && !ss.slowSkip {
			s.noteSlow(ss, took)
		}
	}
	if ss.logReq {
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
	if len(ss.order) == 0 || ss.stream {
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

// exec classifies one command and either queues it for the upstream or
// answers it in place. Commands that change how later commands are routed
// (HELLO, RESET, QUIT) first flush what is queued, so order is kept.
func (s *Server) exec(ss *session, cmd resp.Command) {
	if ss.stream {
		// Everything goes to the pinned connection in order; Redis answers
		// (and enforces RESP2's subscribed-mode command rules).
		info := s.table.Load().Lookup(cmd.Args[0])
		if pol := s.policy.Load(); pol != nil {
			var ok bool
			if cmd, info, ok = s.applyPolicy(ss, pol, info, cmd); !ok {
				return
			}
		}
		if s.hot != nil {
			s.beforeWrite(ss, info, cmd.Args, false)
		}
		if info != nil && info.Handling == command.Client && s.streamClient(ss, cmd) {
			return
		}
		if info != nil && info.Handling == command.Subscribe {
			ss.noteSubscriptions(info.Name, cmd.Args)
		}
		ss.streamCmds = append(ss.streamCmds, cmd.Raw)
		return
	}
	args := cmd.Args
	table := s.table.Load()
	info := table.Lookup(args[0])
	if cc := s.calls.Load(); cc.table == table {
		cc.inc(s.metrics, info)
	}
	ss.lastCmd = "unknown"
	if info != nil {
		ss.lastCmd = info.Name
		if info.Subcommands != nil && len(args) > 1 && len(args[1]) <= 32 {
			// As CLIENT LIST's cmd= shows it (client|setname); container
			// commands are rare on the hot path.
			ss.lastCmd = info.Name + "|" + strings.ToLower(string(args[1]))
		}
	}
	if s.slow != nil || ss.logReq {
		ss.slowCount++
		if len(ss.slowNames) < slowLogNames || (ss.logReq && len(ss.slowNames) < reqLogNames) {
			ss.slowNames = append(ss.slowNames, ss.lastCmd)
		}
	}
	if ss.inTransaction() && answeredByProxy(info, args) {
		// Redis would queue it and run it at EXEC, inside the array it
		// returns; rproxy answers it for the session, so it cannot.
		s.refuseMsg(ss, strings.ToUpper(commandLabel(info, args))+" inside MULTI is not supported through rproxy (rproxy answers it, not Redis); send it before MULTI or after EXEC")
		return
	}
	if isAuth(args[0]) {
		s.auth(ss, cmd)
		return
	}
	if !s.gateAuth(ss, info) {
		return
	}
	if pol := s.policy.Load(); pol != nil {
		var ok bool
		if cmd, info, ok = s.applyPolicy(ss, pol, info, cmd); !ok {
			return
		}
		args = cmd.Args
	}
	if s.hot != nil {
		s.beforeWrite(ss, info, args, true)
	}
	if info != nil && (info.Name == "script" || info.Name == "function") && len(args) == 2 && bytes.EqualFold(args[1], []byte("kill")) && !ss.inTransaction() {
		s.killOutOfBand(ss, cmd.Raw)
		return
	}
	if s.sentinelReplicaReads() {
		s.routeReplicaRead(ss, info, cmd.Args) // replicas.go
	}
	if s.cfg.Cluster != nil {
		if info != nil && info.Name == "cluster" && s.clusterCommand(ss, cmd) {
			return
		}
		if s.routeCluster(ss, info, cmd) {
			return
		}
		if ss.multiPending && !s.startDeferredMulti(ss) {
			return
		}
	}
	if info == nil {
		if bytes.EqualFold(args[0], []byte("proxy")) {
			s.proxyCommand(ss, args)
			return
		}
		// Unknown here; Redis answers it (usually "unknown command").
		s.forward(ss, cmd.Raw)
		return
	}
	switch info.Handling {
	case command.Forward:
		if info.Name == "info" && infoWantsProxy(args) {
			ss.infoAt = append(ss.infoAt, ss.batch.Len())
		}
		s.forwardRead(ss, info, args, cmd.Raw)
	case command.BlockingCmd:
		if isNonBlockingRead(info, args) {
			s.forward(ss, cmd.Raw)
			return
		}
		if ss.pin == nil && !s.pinSession(ss, ss.slot) {
			return
		}
		ss.blocking = true
		ss.slowSkip = true // it waits as long as the client asked: not slow
		s.forward(ss, cmd.Raw)
	case command.Transaction:
		if ss.pin == nil && info.Name == "multi" && s.deferMulti(ss, args) {
			ss.multiSent = true
			return
		}
		if ss.pin == nil && (info.Name == "multi" || info.Name == "watch") && !s.pinSession(ss, s.transactionSlot(ss, info)) {
			return
		}
		s.forwardTracked(ss, cmd.Raw, transactionTrack(info.Name))
		switch info.Name {
		case "multi":
			ss.multiSent = true
		case "exec", "discard":
			ss.multiSent = false
		}
	case command.Subscribe:
		ss.noteSubscriptions(info.Name, args)
		s.startStream(ss, cmd.Raw)
	case command.Unsupported:
		s.refuse(ss, args[0], "it needs session state rproxy does not keep")
	case command.Select:
		s.selectDB(ss, cmd)
	case command.Client:
		s.client(ss, cmd)
	case command.Hello:
		s.flush(ss)
		s.hello(ss, cmd)
	case command.Reset:
		s.flush(ss)
		s.unpin(ss)
		ss.multiPending = false
		ss.proto, ss.name, ss.libName, ss.libVer = 2, nil, nil, nil
		if s.cfg.Users != nil {
			ss.authed, ss.user = false, "" // RESET deauthenticates, as on Redis
		}
		if s.cfg.AuthPassthrough {
			ss.setPools(&s.pools)
			ss.user = ""
		}
		s.reply(ss, []byte("+RESET\r\n"))
	case command.Quit:
		ss.quit = true
		s.reply(ss, []byte("+OK\r\n"))
	default:
		s.forward(ss, cmd.Raw)
	}
}

// killOutOfBand sends SCRIPT KILL or FUNCTION KILL on a connection of its
// own: on the shared connection it would wait behind the very script it is
// to stop. On a cluster it goes to every master, and the reply is the
// first that is not NOTBUSY.
func (s *Server) killOutOfBand(ss *session, raw []byte) {
	s.flush(ss) // replies stay in order
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
	s.reply(ss, reply)
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
	for _, a := range args[1:] {
		if bytes.EqualFold(a, []byte("block")) {
			return false
		}
		if bytes.EqualFold(a, []byte("streams")) {
			return true
		}
	}
	return true
}

// lead is a flight this session leads: the reply of batch command idx.
type lead struct {
	f   *coalesce.Flight
	idx int
}

// forwardRead forwards a command, letting an eligible read join an identical
// one in flight. A session joins only while unpinned (db 0, no transaction,
// no stream) and only before any write in the same batch, so it always reads
// its own writes; which flights are joinable (not yet written, or also in
// flight since its last acknowledged write) is coalesce.window.
func (s *Server) forwardRead(ss *session, info *command.Info, args [][]byte, raw []byte) {
	if info.Has(command.Write) {
		ss.wrote, ss.batchWrote = true, true
	}
	var keyHash uint64
	hashed, hot := false, false
	if s.hot != nil && info.Name != "get" && ss.pin == nil && !ss.wrote && ss.pools == &s.pools && tier.Cacheable(info, args) {
		// Other read-only single-key commands of a hot key: the tier and
		// coalescing as for GET (readcache.go, tier.Cacheable).
		var served bool
		if served, hot = s.tierReadCmd(ss, args[1], raw); served {
			return
		}
	} else if (s.hot != nil || s.salt != nil || s.coalesceGet) && info.Name == "get" && len(args) == 2 && ss.pin == nil && !ss.wrote && ss.pools == &s.pools {
		// The tier holds db 0 as the shared connections' upstream user
		// sees it: not for pinned sessions or passthrough users' ACLs.
		// Hits are counted too, so a cached key stays hot and is filled
		// again as soon as its entry expires.
		// One hash of the key serves the detector, the coalescing filter
		// and its table.
		keyHash, hashed = xxhash.Sum64(args[1]), true
		hotGet := false // GETs coalesce by configuration, hot or not
		if s.hot != nil {
			var fill bool
			hotGet, fill = s.hot.Observe(args[1], keyHash)
			if (hotGet || fill) && s.hot.MissOn() {
				s.noteMiss(ss, args[1]) // before the tier: a cached miss counts too
			}
			if r, ok := s.hot.Lookup(args[1], ss.proto); ok {
				s.replyShared(ss, r)
				return
			}
			if fill {
				s.hot.RequestFill(args[1])
			}
		}
		// On a cluster, a hot key's reads spread over its salted copies.
		if s.salt != nil && (hotGet || s.salt.Listed(args[1])) && s.saltedRead(ss, info, args[1]) {
			return
		}
	}
	s.readMaybeJoined(ss, info, raw, keyHash, hashed, hot)
}

// readMaybeJoined queues a read, or joins an identical one in flight when
// it is eligible; it reports whether the read is in the session's own
// batch (false: joined).
//
// keyHash, when hashed, is xxhash.Sum64 of the GET's key: mixed with the
// protocol it stands for the whole identity's hash (equal identities have
// equal keys; the table compares the identities in full). hot: a
// tier.Cacheable command of a hot key, coalesced whatever the configured list.
func (s *Server) readMaybeJoined(ss *session, info *command.Info, raw []byte, keyHash uint64, hashed, hot bool) bool {
	// A hashed read is a GET: its eligibility needs no lookup by name.
	if s.coalesce == nil || ss.pin != nil || ss.wrote || !(hashed && s.coalesceGet || hot || s.coalesceCmds[info.Name]) {
		s.forward(ss, raw)
		return true
	}
	hashed = hashed && len(ss.user) == 0
	if hashed {
		keyHash ^= uint64(ss.proto) * 0x9e3779b97f4a7c15
		if !s.coalesce.Seen(keyHash) {
			s.forward(ss, raw) // not read recently: no flight, no identity to build
			return true
		}
	}
	// Identity: protocol, upstream user, and the command as sent.
	ss.key = append(ss.key[:0], byte(ss.proto), byte(len(ss.user)))
	ss.key = append(ss.key, ss.user...)
	ss.key = append(ss.key, raw...)
	var f *coalesce.Flight
	var leader bool
	if hashed {
		f, leader = s.coalesce.JoinHash(keyHash, ss.key, ss.batch, ss.lastWrite)
	} else {
		f, leader = s.coalesce.Join(ss.key, ss.batch, ss.lastWrite)
	}
	if leader {
		s.forward(ss, raw)
		if f != nil { // nil: a key not read recently starts no flight
			ss.leads = append(ss.leads, lead{f: f, idx: ss.batch.Len() - 1})
		}
		return true
	}
	ss.joined = append(ss.joined, f)
	ss.order = append(ss.order, -2-(len(ss.joined)-1))
	return false
}

func (s *Server) forward(ss *session, raw []byte) {
	s.forwardTracked(ss, raw, track{})
}

func (s *Server) forwardTracked(ss *session, raw []byte, t track) {
	ss.batch.AddSlot(raw, ss.slot)
	ss.slot = upstream.SlotAny
	ss.order = append(ss.order, -1)
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
	ss.order = append(ss.order, len(ss.localEnds)-1)
}

// replyShared queues a reply from the local tier (never modified).
func (s *Server) replyShared(ss *session, r []byte) {
	ss.localCount++
	ss.queueLocal(r, true)
}

// reply queues a reply made by the proxy, in order with the upstream ones.
func (s *Server) reply(ss *session, r []byte) {
	ss.localCount++
	ss.queueLocal(r, false)
}

func (s *Server) refuse(ss *session, name []byte, why string) {
	s.refuseMsg(ss, string(bytes.ToUpper(name))+" is not supported yet: "+why)
}

// refuseMsg queues "-ERR rproxy: msg" in order with the other replies.
func (s *Server) refuseMsg(ss *session, msg string) {
	ss.refusedCount++
	s.abortTransaction(ss)
	ss.queueLocal(resp.AppendError(nil, "ERR rproxy: "+msg), false)
}

// beforeWrite drops from the local tier what a command may change, before
// it is sent. With acked, the batch's replies will be seen: writes to known
// keys are dropped again then (afterWrite), so that a fill which read the
// old value while the write was on its way cannot stay, and writes to
// undeclared keys wait for the tracking barrier. In stream mode no
// acknowledgement is seen, and client tracking covers the rest.
func (s *Server) beforeWrite(ss *session, info *command.Info, args [][]byte, acked bool) {
	if info == nil {
		ss.hotBarrier = ss.hotBarrier || acked // unknown here: a module command may write
		return
	}
	switch info.Invalidates {
	case command.InvalidatesNone:
		return
	case command.InvalidatesAll:
		s.hot.Clear()
		ss.hotClear = ss.hotClear || acked
		return
	}
	n := len(ss.hotKeys)
	keys, ok := command.Keys(info, args, ss.hotKeys)
	for _, k := range keys[n:] {
		s.hot.Invalidate(k)
	}
	if !acked {
		ss.hotKeys = keys[:n]
		return
	}
	ss.hotKeys = keys
	if !ok || info.Invalidates == command.InvalidatesUnknown || tier.LockAcquire(info, args) {
		ss.hotBarrier = true
	}
}

// afterWrite completes beforeWrite once the batch's replies are in.
func (s *Server) afterWrite(ss *session) {
	for i, k := range ss.hotKeys {
		s.hot.Written(k)
		ss.hotKeys[i] = nil
	}
	ss.hotKeys = ss.hotKeys[:0]
	if ss.hotClear {
		s.hot.Clear()
		ss.hotClear = false
	}
	if ss.hotBarrier {
		s.hot.Barrier()
		ss.hotBarrier = false
	}
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
			ss.batchWrote = true // pinned batches may write in ways not flagged here
			s.doPinned(ss)
		} else {
			for _, l := range ss.leads {
				l.f.AwaitTurn() // a key read concurrently: one flight at a time
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
		if ss.batchWrote {
			// Every send numbered after this moment left after the write
			// was acknowledged: such flights are safe to join.
			ss.lastWrite, ss.batchWrote = s.sendSeq.Load(), false
		}
	}
	if s.salt != nil && (len(ss.saltReads) > 0 || len(ss.saltWrites) > 0) {
		s.saltAfterBatch(ss)
	}
	if s.hot != nil {
		s.afterWrite(ss)
	}
	for i, l := range ss.leads {
		// Before waiting on any flight we joined: no cycle can form.
		r := ss.batch.Reply(l.idx)
		for _, o := range ss.saltOver {
			if o.idx == l.idx {
				r = o.reply // a copy that missed: joiners get the origin's reply too
			}
		}
		l.f.Publish(r)
		ss.leads[i] = lead{}
	}
	ss.leads = ss.leads[:0]
	if ss.logReq {
		ss.req.upstream += ss.batch.Len()
		ss.req.local += ss.localCount
		ss.req.refused += ss.refusedCount
		ss.req.joined += len(ss.joined)
	}
	if ss.localCount > 0 {
		s.metrics.local.Add(float64(ss.localCount))
		ss.localCount = 0
	}
	if ss.refusedCount > 0 {
		s.metrics.refused.Add(float64(ss.refusedCount))
		ss.refusedCount = 0
	}
	up, over, miss := 0, 0, 0
	var gate *hotkey.MissGate
	if len(ss.missAts) > 0 {
		gate = s.hot.MissGate()
	}
	for i, o := range ss.order {
		var r []byte
		if o == discardReply {
			up++ // the upstream reply to a deferred MULTI, answered already
			continue
		}
		if o <= mergeBase {
			m := &ss.merges[mergeBase-o]
			r = m.reply(ss.batch, up)
			up += m.parts
		} else if o <= -2 {
			r = ss.joined[-2-o].Wait()
		} else if o < 0 {
			r = ss.batch.Reply(up)
			if over < len(ss.saltOver) && ss.saltOver[over].idx == up {
				r = ss.saltOver[over].reply // a copy missed: the origin's reply
				over++
			}
			if len(ss.infoAt) > 0 && ss.infoAt[0] == up {
				r = s.appendProxyInfo(nil, r) // rare: INFO gets the # Proxy section
				ss.infoAt = ss.infoAt[1:]
			}
			up++
		} else {
			start := 0
			if o > 0 {
				start = ss.localEnds[o-1]
			}
			r = ss.local[start:ss.localEnds[o]]
			if ref := ss.localRefs[o]; ref != nil {
				r = ref
			}
		}
		if miss < len(ss.missAts) && ss.missAts[miss].at == i {
			if gate != nil {
				r = s.collapseMiss(ss, gate, ss.missAts[miss].key, r)
			}
			miss++
		}
		if ss.logReq && len(r) > 0 && (r[0] == '-' || r[0] == '!') {
			ss.req.errors++
		}
		s.write(ss, r)
	}
	if len(ss.missAts) > 0 {
		clear(ss.missAts)
		ss.missAts = ss.missAts[:0]
	}
	ss.batch.ResetKeep() // Shrink at the end of the client's read: boundReplies may send the rest in parts
	ss.infoAt = ss.infoAt[:0]
	ss.localHigh = max(ss.localHigh, len(ss.local))
	clear(ss.localRefs)
	ss.local, ss.localEnds, ss.localRefs, ss.order = ss.local[:0], ss.localEnds[:0], ss.localRefs[:0], ss.order[:0]
	clear(ss.joined)
	ss.joined = ss.joined[:0]
	if len(ss.merges) > 0 {
		clear(ss.merges)
		ss.merges = ss.merges[:0]
	}
	if len(ss.saltReads) > 0 {
		clear(ss.saltReads)
		ss.saltReads = ss.saltReads[:0]
		clear(ss.saltOver)
		ss.saltOver = ss.saltOver[:0]
	}
	if ss.pin != nil && ss.pinNoLongerNeeded() {
		// Let the replies go before the reset round trip of Release.
		ss.conn.Flush()
		s.unpin(ss)
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
		n, err := strconv.Atoi(string(cmd.Args[1]))
		if err == nil && (ss.pin != nil || string(cmd.Args[1]) != "0") {
			if ss.pin == nil && !s.pinSession(ss, upstream.SlotAny) {
				return
			}
			s.forwardTracked(ss, cmd.Raw, track{kind: trackSelect, db: n})
			return
		}
	}
	s.forward(ss, cmd.Raw) // SELECT 0 unpinned, or one Redis rejects
}

// client answers the CLIENT subcommands that describe this connection from
// the session, forwards the ones that are safe on a shared connection, and
// refuses the ones that would change a shared connection's state.
func (s *Server) client(ss *session, cmd resp.Command) {
	args := cmd.Args
	if len(args) < 2 {
		s.forward(ss, cmd.Raw) // Redis's own arity error
		return
	}
	sub := bytes.ToLower(args[1])
	switch string(sub) {
	case "id":
		if len(args) != 2 {
			s.forward(ss, cmd.Raw)
			return
		}
		s.reply(ss, resp.AppendInt(nil, ss.id))
	case "getname":
		if len(args) != 2 {
			s.forward(ss, cmd.Raw)
			return
		}
		if len(ss.name) == 0 {
			s.reply(ss, resp.AppendNullBulk(nil, ss.proto))
		} else {
			s.reply(ss, resp.AppendBulk(nil, ss.name))
		}
	case "setname":
		if len(args) != 3 {
			s.forward(ss, cmd.Raw)
			return
		}
		if !validClientName(args[2]) {
			s.reply(ss, []byte("-ERR Client names cannot contain spaces, newlines or special characters.\r\n"))
			return
		}
		ss.name = append(ss.name[:0], args[2]...)
		s.reply(ss, []byte("+OK\r\n"))
	case "setinfo":
		if !s.upstreamKnows("client", "setinfo") || len(args) != 4 {
			// A server without CLIENT SETINFO answers with its own error.
			s.forward(ss, cmd.Raw)
			return
		}
		s.clientSetInfo(ss, args)
	case "kill":
		s.clientKill(ss, cmd)
	case "list":
		s.reply(ss, s.clientList(ss, cmd))
	case "info":
		if len(args) != 2 {
			s.forward(ss, cmd.Raw)
			return
		}
		s.reply(ss, appendText(nil, ss.proto, s.clientLine(nil, ss, ss, cmd, s.clock())))
	case "unblock":
		s.clientUnblock(ss, cmd)
	case "pause", "unpause", "help", "getredir", "trackinginfo":
		// Read-only or server-wide: safe on a shared connection.
		s.forward(ss, cmd.Raw)
	case "tracking":
		raw, errReply := s.trackingRedirect(ss, cmd)
		if errReply != nil {
			s.reply(ss, errReply)
			return
		}
		s.startStream(ss, raw)
	case "reply", "caching", "no-evict", "no-touch":
		// Connection state for this client alone: from now on the session
		// has its own connection (stream mode).
		s.startStream(ss, cmd.Raw)
	default:
		s.forward(ss, cmd.Raw) // Redis's "unknown subcommand"
	}
}

func (s *Server) clientSetInfo(ss *session, args [][]byte) {
	attr, val := bytes.ToLower(args[2]), args[3]
	if !validClientName(val) && len(val) > 0 {
		s.reply(ss, resp.AppendError(nil, "ERR "+string(args[2])+" cannot contain spaces, newlines or special characters."))
		return
	}
	switch string(attr) {
	case "lib-name":
		ss.libName = append(ss.libName[:0], val...)
	case "lib-ver":
		ss.libVer = append(ss.libVer[:0], val...)
	default:
		s.reply(ss, resp.AppendError(nil, "ERR Unrecognized option '"+string(args[2])+"'"))
		return
	}
	s.reply(ss, []byte("+OK\r\n"))
}

// upstreamKnows reports whether the loaded command table has the subcommand.
func (s *Server) upstreamKnows(cmd, sub string) bool {
	info := s.table.Load().Lookup([]byte(cmd))
	if info == nil || info.Subcommands == nil {
		return false
	}
	_, ok := info.Subcommands[sub]
	return ok
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
// encoded exactly as Redis encodes it; SETNAME is applied to the session and
// AUTH is refused for now.
func (s *Server) hello(ss *session, cmd resp.Command) {
	args := cmd.Args
	target := ss.proto
	var name, authUser, authPass []byte
	setName, hasAuth := false, false
	if len(args) >= 2 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil || (v != 2 && v != 3) {
			// Redis rejects the version with its own error, changing nothing.
			s.helloUpstream(ss, cmd.Raw, ss.proto, false, nil)
			return
		}
		target = v
		for i := 2; i < len(args); i++ {
			switch string(bytes.ToLower(args[i])) {
			case "auth":
				if i+2 < len(args) {
					authUser, authPass, hasAuth = args[i+1], args[i+2], true
					i += 2
					continue
				}
			case "setname":
				if i+1 < len(args) {
					name, setName = args[i+1], true
					i++
					continue
				}
			}
			// An unknown or incomplete option: Redis rejects the whole
			// command before applying anything, so forwarding it is safe.
			s.helloUpstream(ss, cmd.Raw, ss.proto, false, nil)
			return
		}
	}
	if (hasAuth || !ss.authed) && !s.helloAuth(ss, authUser, authPass, hasAuth) {
		s.flush(ss)
		return
	}
	if setName && !validClientName(name) {
		s.reply(ss, []byte("-ERR Client names cannot contain spaces, newlines or special characters.\r\n"))
		s.flush(ss)
		return
	}
	hello := resp.AppendCommandString(nil, "HELLO")
	if len(args) >= 2 {
		hello = resp.AppendCommandString(nil, "HELLO", strconv.Itoa(target))
	}
	s.helloUpstream(ss, hello, target, setName, name)
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
			ss.name = append(ss.name[:0], name...)
		}
	}
	s.write(ss, r)
	ss.batch.Reset()
}
