package proxy

import (
	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// salting is salted fan-out's stage: it spreads the GETs of hot (or
// listed) keys over their salted copies on a cluster, and after the
// replies updates the copies from what the reads found. The engine
// (package salt) owns the configuration (hotkeys.salt, validated there),
// the copies and their coherence, the metrics and the logger; here its
// reads and writes join a session's batch, whose per-batch state is
// saltState.
type salting struct {
	engine *salt.Engine
	// tier, when the local tier runs on the cluster, follows the origins'
	// writes with client tracking (nil: no tier).
	tier *tier.Engine
	// coalescing lets copy reads join flights (nil: off).
	coalescing *coalescing
	shared     *poolSet // the server's own shared connections (readable)
	// pauses: while a CLIENT PAUSE sent through rproxy is in force, no
	// copy is filled. A fill is a write, which Redis holds, and on the
	// copy's shared connection every command behind it would wait too.
	pauses *pauseWatch
}

func (sa *salting) command(ss *session, c *call) bool {
	if !readable(ss, c, sa.shared) || !c.isGet() {
		return false
	}
	key := c.cmd.Args[1]
	return (c.hotGet || sa.engine.Listed(key)) && sa.read(ss, c.info, key)
}

func (sa *salting) replies(ss *session) {
	if len(ss.copies.reads) > 0 || len(ss.copies.writes) > 0 {
		sa.afterBatch(ss)
	}
}

// saltState is salted fan-out's per-batch state in a session: copy reads
// queued, salted keys written, and the replies of copy reads that missed
// (served from the origin).
type saltState struct {
	reads  []saltRead
	writes []salt.Write
	over   []saltOverride
}

// saltRead is a GET of a copy queued in the session's batch.
type saltRead struct {
	idx int // the batch index of its reply
	salt.Read
}

// read queues a salted key's GET on a copy picked at random, and
// reports whether it did (false: read the origin as usual).
func (sa *salting) read(ss *session, info *command.Info, key []byte) bool {
	r, ok := sa.engine.Pick(key)
	if !ok {
		return false
	}
	// Copy reads coalesce like any GET; the leader of a flight handles a
	// miss, and its joiners get the origin's reply with it.
	idx := ss.batch.Len()
	ss.slot = r.Slot()
	if sa.coalescing.readMaybeJoined(ss, info, r.Cmd(), 0, false, false) {
		ss.copies.reads = append(ss.copies.reads, saltRead{idx: idx, Read: r})
	} else {
		sa.engine.Joined()
	}
	return true
}

// noteWrites begins the writes of a command's keys before it is sent
// (see salt.Engine); they end once its reply is in (afterBatch). A command
// queued in a transaction writes at EXEC: its writes are held until the
// EXEC's reply (transactionEnds), since a copy filled before the EXEC
// would keep the value it replaces.
func (sa *salting) noteWrites(ss *session, keys [][]byte) {
	if ss.inTransaction() {
		for _, k := range keys {
			sa.engine.Hold(&ss.route.txSalted, k)
		}
		return
	}
	for _, k := range keys {
		ss.copies.writes = append(ss.copies.writes, sa.engine.BeginWrite(k))
	}
}

// noteFlush begins a FLUSHALL or FLUSHDB before it is sent (see
// salt.Engine.BeginFlush); in a transaction it is held until the EXEC.
func (sa *salting) noteFlush(ss *session) {
	if ss.inTransaction() {
		sa.engine.HoldFlush(&ss.route.txSalted)
		return
	}
	ss.copies.writes = append(ss.copies.writes, sa.engine.BeginFlush())
}

// transactionEnds runs when the open transaction's EXEC or DISCARD is
// routed: its held writes end with this batch's replies.
func (sa *salting) transactionEnds(ss *session) {
	ss.copies.writes = ss.route.txSalted.Take(ss.copies.writes)
}

// transactionGone ends the held writes of a transaction the session left
// without EXEC or DISCARD (RESET, or the client gone).
func (sa *salting) transactionGone(ss *session) {
	if !ss.route.txSalted.Empty() {
		sa.engine.EndWrites(ss.route.txSalted.Take(nil))
	}
}

// resp2Null is a missing key's GET reply in RESP2.
var resp2Null = []byte("$-1\r\n")

// afterBatch runs once the batch's replies are in: it deletes the
// copies of salted keys the batch wrote, then serves the copy reads that
// missed from the origin, filling their copies.
func (sa *salting) afterBatch(ss *session) {
	if len(ss.copies.writes) > 0 {
		sa.engine.EndWrites(ss.copies.writes)
		clear(ss.copies.writes)
		ss.copies.writes = ss.copies.writes[:0]
	}
	if len(ss.copies.reads) == 0 {
		return
	}
	var misses []saltRead
	hits := 0
	for _, sr := range ss.copies.reads {
		if r := ss.batch.Reply(sr.idx); resp.IsNull(r) {
			misses = append(misses, sr)
		} else {
			hits++
		}
	}
	sa.engine.CountReads(hits, len(misses))
	if len(misses) == 0 {
		return
	}
	// Read the origins (value and remaining TTL), noting each key's
	// generation first: a fill is made only if no write to the key began
	// since, and is queued before any later write's deletion of the copy.
	gens := make([]salt.Gen, len(misses))
	// With the tier's tracking connections up, the origins are read there:
	// Redis then pushes any later write to them, whoever makes it, and
	// salt.Engine.OriginWritten deletes the copies. A fill is made only if
	// tracking stayed up and the key was not invalidated since (toks).
	// With the tier configured but tracking down (starting, reconnecting,
	// lagging), the origin is read without filling: an untracked copy
	// could outlive a write made elsewhere by up to hotkeys.salt.ttl.
	followed := sa.tier != nil && sa.tier.Clustered()
	tracked := followed && sa.tier.TrackingUp()
	var toks []hotkey.Token
	paused := sa.pauses != nil && sa.pauses.active()
	b := upstream.NewBatch()
	for i, sr := range misses {
		if tracked {
			toks = append(toks, sa.tier.Begin(sr.Origin()))
		}
		gens[i] = sa.engine.FillGen(sr.Read) // NoFill: a write is under way
		if paused {
			gens[i] = salt.NoFill
		}
		sr.ReadOrigin(b)
	}
	if tracked {
		sa.tier.TrackDo(b)
	} else {
		ss.pools[ss.proto].Do(b)
	}
	var fills salt.Fills
	for i, sr := range misses {
		val := b.Reply(2 * i)
		if tracked && ss.proto == 2 && len(val) > 0 && val[0] == '_' {
			val = resp2Null // read in RESP3 on the tracking connection
		}
		if followed && (!tracked || !sa.tier.Current(toks[i], sr.Origin())) {
			gens[i] = salt.NoFill // untracked, written since, or tracking lost
		}
		ss.copies.over = append(ss.copies.over, saltOverride{idx: sr.idx, reply: append([]byte(nil), val...)})
		sa.engine.Fill(&fills, sr.Read, gens[i], val, b.Reply(2*i+1))
	}
	sa.engine.Settle(&fills)
}

// saltOverride replaces the reply of batch command idx (a copy read that
// missed, answered from the origin).
type saltOverride struct {
	idx   int
	reply []byte
}
