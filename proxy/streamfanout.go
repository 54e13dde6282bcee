package proxy

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
	"go.uber.org/zap"
)

// Commands of every master, in stream mode. Outside stream mode a command
// that acts or reports on the whole data (fanOutCommands: FLUSHALL,
// CONFIG SET, DBSIZE, INFO, SLOWLOG GET...) goes to every master and the
// replies are merged (cluster.go). A session in stream mode sent it to its
// own connection, one master: a tracking client's FLUSHALL emptied one
// master of the cluster, its CONFIG SET set one node, its DBSIZE and INFO
// counted one master's. Now it goes to the pin and to the session's
// branch on every other master (made if need be), in order with the
// session's other commands there, and the pin's reply is replaced by the
// merged replies once all have come (joinInStream). CONFIG SET of a
// node's own setting is refused as outside stream mode (clusterRefusal).
// SCAN walks the masters as outside stream mode (streamScan). Inside a transaction, and for a
// session that may not branch (RESP2 subscribed, MONITOR, a replica),
// the command goes to the pin (inside a transaction: below).

// streamFanOut sends c to every master when it is one of fanOutCommands,
// or refuses it (clusterRefusal), reporting whether it took it.
func (cs *clusterStream) streamFanOut(ss *session, c *call) bool {
	info, args := c.info, c.cmd.Args
	if !cs.on || info == nil || ss.inTransaction() {
		return false
	}
	name := fanOutName(info.Name, args)
	if info.Name == "scan" && len(args) > 1 {
		return cs.streamScan(ss, c)
	}
	if msg := clusterRefusal(name, args); msg != "" {
		cs.refuseMsg(ss, msg)
		return true
	}
	kind, ok := fanOutCommands[name]
	if !ok || !cs.branching(ss) || !ss.streamAnswered() {
		return false
	}
	backend := ss.pools[ss.proto]
	shards := backend.Shards()
	if len(shards) < 2 {
		return false
	}
	branches := make([]*streamBranch, 0, len(shards)-1)
	for _, slot := range shards {
		pool := backend.PinPool(slot)
		if samePool(pool, ss.pinPool) {
			continue
		}
		b, err := cs.branch(ss, pool)
		if err != nil {
			ss.errorInStream(branchError(err)) // sent nowhere
			return true
		}
		branches = append(branches, b)
	}
	kind, raw := fanOutSent(kind, args, c.cmd.Raw)
	parts := make([]*branchReply, len(branches))
	flush := isFlush(name) && ss.tracksPushes()
	for i, b := range branches {
		if flush && b.tracks {
			b.dropNulls.Add(1) // the pin's shows
		}
		parts[i] = b.send([][]byte{raw}, []bool{true})[0]
	}
	m := cs.routing.fanOutMerge(kind, len(parts)+1, args, ss.proto)
	withProxy := info.Name == "info" && infoWantsProxy(args)
	ss.joinInStream(raw, func(pinReply []byte) []byte {
		replies := [][]byte{pinReply}
		var pushes []byte
		for _, p := range parts {
			r, after := p.showApart()
			replies = append(replies, r)
			pushes = append(pushes, after...)
		}
		out := m.reply(replies)
		if info.Name == "info" {
			out = cs.infoReply(out, nil, withProxy)
		}
		return append(out, pushes...)
	})
	return true
}

// joinInStream sends raw, in stream mode, to the pin, whose reply, an
// error too and however long, the relay replaces by f's (rewriteNext).
func (ss *session) joinInStream(raw []byte, f func([]byte) []byte) {
	ss.relay.queue(relayAnswer{rewrite: f, join: true})
	ss.streamCmds = append(ss.streamCmds, errorCmd, raw)
	ss.streamHelpers++
}

// streamScan sends a SCAN, in stream mode, to the master its cursor names
// (clusterscan.go): the pin, or the session's branch there, made if need
// be. On a branch the pin runs it too (read-only; its reply is dropped) so
// that the reply keeps its place among the pin's. A session that may not
// branch is refused.
func (cs *clusterStream) streamScan(ss *session, c *call) bool {
	backend := ss.pools[ss.proto]
	slot, raw, m, ok := cs.routing.scanPart(backend.Shards(), c.cmd.Args)
	if !ok {
		ss.errorInStream(resp.AppendError(nil, "ERR invalid cursor"))
		return true
	}
	pool := backend.PinPool(slot)
	if samePool(pool, ss.pinPool) {
		ss.joinInStream(raw, func(pinReply []byte) []byte { return m.reply([][]byte{pinReply}) })
		return true
	}
	if !cs.branching(ss) || !ss.streamAnswered() {
		cs.refuseMsg(ss, "SCAN of another master than this connection's is not supported here (pub/sub in RESP2, MONITOR, CLIENT REPLY OFF); scan from a connection without them")
		return true
	}
	b, err := cs.branch(ss, pool)
	if err != nil {
		ss.errorInStream(branchError(err)) // sent nowhere
		return true
	}
	part := b.send([][]byte{raw}, []bool{true})[0]
	ss.joinInStream(raw, func([]byte) []byte {
		r, after := part.showApart()
		return append(m.reply([][]byte{r}), after...)
	})
	return true
}

// Inside a transaction, in stream mode. A command of fanOutCommands is
// queued where the transaction runs, the pin or a branch (branchTx), and
// noted (streamQueue); once EXEC's reply shows that the transaction ran
// (an array of as many replies as commands queued), the same commands run
// on every other master on the shared connections and their replies merge
// into EXEC's array (execReply, clustertx.go), as outside stream mode.
// The session waits for that (up to upstream.timeout) before it sends
// anything more: a command it sends after EXEC to another master's branch
// must not run before the transaction's FLUSHALL there. A transaction that did not run (EXECABORT,
// a WATCH that failed) runs nothing elsewhere. After CLIENT REPLY OFF or
// SKIP there is no reply to merge into, and the command stays the
// transaction's master's.
//
// On a branch EXEC's reply is the branch's (relayAnswer.later, then). On
// the pin the relay has no errorCmd to put in EXEC's place (inside MULTI
// it would abort the transaction), so it counts: the errorCmd sent just
// before the MULTI arms a streamTx, and from MULTI's reply on every
// command sent inside the transaction has one reply (+QUEUED or an error),
// so EXEC's is the reply numbered by its place among the commands sent.

// isFlush reports whether name, a fanOutName, is FLUSHALL or FLUSHDB.
func isFlush(name string) bool { return name == "flushall" || name == "flushdb" }

// tracksPushes reports whether Redis sends the session's invalidations,
// a flush's included, as pushes on its own connections (RESP3 tracking
// without REDIRECT): on each of its connections, the pin and every branch.
func (ss *session) tracksPushes() bool {
	return ss.proto == 3 && ss.tracking.redirect == 0 && ss.tracking.trackingArgs != nil
}

// flushDrops returns, for a transaction on the connection txAddr that
// queued flushes of queued, what not to show of their invalidations once
// they run everywhere: one flush invalidation per flush on each of the
// session's tracking connections but one (the transaction's own, after
// its EXEC as on Redis, if it tracks).
func (ss *session) flushDrops(txAddr string, queued []pinnedFanOut) (drops []*atomic.Int32, flushes int32) {
	if !ss.tracksPushes() {
		return nil, 0
	}
	for _, q := range queued {
		if len(q.args) > 0 && isFlush(strings.ToLower(string(q.args[0]))) {
			flushes++
		}
	}
	if flushes == 0 {
		return nil, 0
	}
	// The transaction's connection shows its own, if it tracks; else the
	// pin's shows (a branch made before tracking was turned on does not).
	shown := ss.pinPool.Address()
	for _, b := range ss.cstream().branches {
		if b.tracks && b.pool.Address() == txAddr {
			shown = txAddr
		}
	}
	if ss.pinPool.Address() != shown {
		drops = append(drops, &ss.relay.dropNulls)
	}
	for _, b := range ss.cstream().branches {
		if b.tracks && b.pool.Address() != shown {
			drops = append(drops, &b.dropNulls)
		}
	}
	return drops, flushes
}

// streamTx is a transaction on the pin followed for the relay.
type streamTx struct {
	multiAt int                 // the MULTI's index among the commands sent on the pin (session.pinSent)
	f       func([]byte) []byte // EXEC's reply is passed through f (nil: as it is); set before execAt
	execAt  atomic.Int64        // the number of EXEC's (or DISCARD's) reply, MULTI's being 1; 0 until sent
}

// streamQueue counts, on a cluster, the commands a stream-mode transaction
// queues and notes those of fanOutCommands among them, and refuses, inside
// one, a CONFIG SET of a node's own setting (clusterRefusal, aborting the
// transaction), reporting whether it did.
func (cs *clusterStream) streamQueue(ss *session, c *call) bool {
	if cs.routing == nil || c.info == nil {
		return false
	}
	cs.routing.countQueued(ss, c.info.Name)
	if !ss.inTransaction() {
		return false
	}
	args := c.cmd.Args
	name := fanOutName(c.info.Name, args)
	if msg := clusterRefusal(name, args); msg != "" {
		cs.refuseMsg(ss, msg)
		return true
	}
	if kind, ok := fanOutCommands[name]; ok && fansOutWhenPinned(kind) && len(ss.pools[ss.proto].Shards()) > 1 {
		ss.route.txFanOut = append(ss.route.txFanOut, newPinnedFanOut(ss.route.txQueued-1, kind, c.cmd.Raw, args))
	}
	return false
}

// armStreamTx sends, before a MULTI about to go to the pin, the errorCmd
// whose answer has the relay follow the transaction (streamTx): where the
// client may send a server-wide command in it (one in this read, or the
// read ends before EXEC). a is the relayAnswer for the errorCmd, which
// armStreamTx queues.
func (cs *clusterStream) armStreamTx(ss *session, a relayAnswer, marker []byte) {
	t := &streamTx{}
	a.tx = t
	ss.relay.queue(a)
	ss.streamCmds = append(ss.streamCmds, marker)
	ss.streamHelpers++
	t.multiAt = ss.pinSent + len(ss.streamCmds)
	ss.streamTx = t
}

// mayFanOutInTransaction reports whether a transaction starting now on the
// pin may hold a command of fanOutCommands or a write of a salted key: one
// among the read's commands before its EXEC or DISCARD, or the read ends
// before them.
func (cs *clusterStream) mayFanOutInTransaction(ss *session) bool {
	if cs.routing == nil || !ss.streamAnswered() || ss.skipNext || cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds) {
		return false // no reply to merge into, or to the errorCmd; an errorCmd would drop the client's CLIENT CACHING flag
	}
	table := cs.table.Load()
	for _, c := range ss.route.rest[ss.route.restAt:] {
		info := table.Lookup(c.Args[0])
		if info == nil {
			continue
		}
		if info.Name == "exec" || info.Name == "discard" {
			return false
		}
		if kind, ok := fanOutCommands[fanOutName(info.Name, c.Args)]; ok && fansOutWhenPinned(kind) {
			return true
		}
		if cs.routing.salting.writesSalted(table, info, c.Args) {
			return true // its EXEC's reply waits for the copies' deletion (streamsalt.go)
		}
	}
	return true
}

// streamTxEnd sends the EXEC or DISCARD, c, of the transaction the relay
// follows on the pin, with EXEC's reply merged with the other masters'
// when it queued commands of fanOutCommands (then waiting for that).
func (cs *clusterStream) streamTxEnd(ss *session, c *call) {
	t := ss.streamTx
	ss.streamTx = nil
	queued, count := ss.route.txFanOut, ss.route.txQueued
	ss.route.txFanOut, ss.route.txQueued = nil, 0
	ss.noteTransaction(c.info.Name)
	var done chan struct{}
	if c.info.Name == "exec" && len(queued) > 0 && ss.streamAnswered() {
		done = make(chan struct{})
		be, proto, pinAddr := ss.pools[ss.proto], ss.proto, ss.pinPool.Address()
		drops, flushes := ss.flushDrops(pinAddr, queued)
		t.f = func(reply []byte) []byte {
			defer close(done)
			return cs.routing.execReply(be, proto, pinAddr, queued, count, reply, dropping(drops, flushes))
		}
	}
	if ss.streamAnswered() {
		// The transaction wrote salted keys: their copies are deleted before
		// the client sees its reply (streamsalt.go).
		t.f = endingFirst(ss.takeStreamWrites(cs.routing.salting), t.f)
	}
	t.execAt.Store(int64(ss.pinSent + len(ss.streamCmds) - t.multiAt + 1))
	ss.streamCmds = append(ss.streamCmds, c.cmd.Raw)
	if done != nil {
		cs.sendStreamBatch(ss)
		cs.waitExecFanOut(ss, done)
	}
}

// branchExecFanOut sends the EXEC, c, of a transaction on the session's
// branch to pool that queued commands of fanOutCommands, its reply merged
// with the other masters', and waits for that, reporting whether it did.
func (cs *clusterStream) branchExecFanOut(ss *session, c *call, pool *upstream.Pool) bool {
	queued, count := ss.route.txFanOut, ss.route.txQueued
	ss.route.txFanOut, ss.route.txQueued = nil, 0
	if len(queued) == 0 || !ss.streamAnswered() {
		return false
	}
	b, err := cs.branch(ss, pool)
	if err != nil {
		return false // sendOnBranch answers it
	}
	ss.noteTransaction("exec")
	ss.cstream().branchTx, ss.cstream().watchPool = nil, nil // the WATCH ends too
	done := make(chan struct{})
	be, proto := ss.pools[ss.proto], ss.proto
	drops, flushes := ss.flushDrops(pool.Address(), queued)
	w := b.send([][]byte{c.cmd.Raw}, []bool{true})[0]
	ss.relay.queue(relayAnswer{later: w, then: func(reply []byte) []byte {
		defer close(done)
		return cs.routing.execReply(be, proto, pool.Address(), queued, count, reply, dropping(drops, flushes))
	}})
	ss.streamCmds = append(ss.streamCmds, errorCmd)
	cs.sendStreamBatch(ss)
	cs.waitExecFanOut(ss, done)
	return true
}

// dropping returns what execReply runs before the other masters' part:
// flushes more flush invalidations not shown on each of drops.
func dropping(drops []*atomic.Int32, flushes int32) func() {
	if len(drops) == 0 {
		return nil
	}
	return func() {
		for _, d := range drops {
			d.Add(flushes)
		}
	}
}

// waitExecFanOut waits until the relay has merged EXEC's reply (done),
// the other masters' part run; if the stream ends first (Redis or the
// client went), the client is closed. After upstream.timeout (a long
// transaction, or a CLIENT REPLY OFF queued in it, which leaves EXEC's
// reply incomplete) the session goes on: the other masters' part may
// then run after its next commands.
func (cs *clusterStream) waitExecFanOut(ss *session, done <-chan struct{}) {
	timer := time.NewTimer(cs.timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-ss.streamEnded:
		ss.quit = true
	case <-timer.C:
		cs.log.Info("stream-mode EXEC: no reply within upstream.timeout; later commands go on before the other masters' part of its server-wide commands",
			zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id))
	}
}
