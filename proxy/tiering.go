package proxy

import (
	"github.com/cespare/xxhash/v2"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// tiering is the local tier's stage: hot keys' reads answered from the
// tier, and writes dropping their keys from it. The engine (package tier)
// owns the configuration (hotkeys:, validated and reloaded there), the
// detector, the entries and their coherence, the metrics and the logger;
// the stage owns what a session adds to them: a session's per-batch state
// is hotWriteState. It sits in the chain twice: tierWrites early (after the
// policy, so a refused write drops nothing), tierReads after cluster
// routing, which pins a session whose MULTI it deferred before the
// transaction's first command goes on: a read inside a transaction is then
// pinned, and not served from the tier.
type tiering struct {
	engine *tier.Engine
	// shared is the server's own shared connections: the tier holds db 0
	// as their upstream user sees it.
	shared  *poolSet
	cluster bool // keys have slots (the miss gate's second read)
}

func newTiering(engine *tier.Engine, shared *poolSet, cluster bool) *tiering {
	return &tiering{engine: engine, shared: shared, cluster: cluster}
}

// tierWrites drops from the local tier the keys a command may write, before
// it is sent, and again once acknowledged (beforeWrite, afterWrite). In
// stream mode no acknowledgement is seen.
type tierWrites struct{ t *tiering }

func (st tierWrites) command(ss *session, c *call) bool {
	st.t.beforeWrite(ss, c.info, c.cmd.Args, !ss.stream)
	return false
}

func (st tierWrites) replies(ss *session) { st.t.afterWrite(ss) }

// tierReads serves hot keys' reads from the local tier. Hits are counted
// too, so a cached key stays hot and is filled again as soon as its entry
// expires.
type tierReads struct{ t *tiering }

func (st tierReads) command(ss *session, c *call) bool {
	t := st.t
	if !readable(ss, c, t.shared) {
		return false
	}
	args := c.cmd.Args
	if !c.isGet() {
		if !tier.Cacheable(c.info, args) {
			return false
		}
		// Other read-only single-key commands of a hot key: the tier and
		// coalescing as for GET.
		var served bool
		served, c.hot = t.readCmd(ss, args[1], c.cmd.Raw)
		return served
	}
	// One hash of the key serves the detector, the coalescing filter and
	// its table.
	c.keyHash, c.hashed = xxhash.Sum64(args[1]), true
	var fill bool
	c.hotGet, fill = t.engine.Observe(args[1], c.keyHash)
	if (c.hotGet || fill) && t.engine.MissOn() {
		t.noteMiss(ss, args[1]) // before the tier: a cached miss counts too
	}
	if r, ok := t.engine.Lookup(args[1], ss.proto); ok {
		ss.replyShared(r)
		return true
	}
	if fill {
		t.engine.RequestFill(args[1])
	}
	return false
}

func (tierReads) replies(*session) {}

// readCmd counts a tier.Cacheable command on its key, queues the tier's
// copy of its reply when it holds one, and else asks for a fill when the
// key is hot or under a cached prefix. The copy's variant is the protocol
// and the command's exact bytes. served: the reply is queued; hot: the key
// is hot or cached, so the read is worth coalescing.
//
// ss.flights.key is used as scratch: the coalescing stage rebuilds it.
func (t *tiering) readCmd(ss *session, key, raw []byte) (served, hot bool) {
	hot, fill := t.engine.Observe(key, xxhash.Sum64(key))
	ss.flights.key = append(append(ss.flights.key[:0], byte(ss.proto)), raw...)
	if r, ok := t.engine.LookupVariant(key, ss.flights.key); ok {
		ss.replyShared(r)
		return true, true
	}
	if fill {
		t.engine.RequestFillVariant(key, ss.flights.key)
	}
	return false, hot || fill
}

// hotWriteState is the local tier's per-batch state in a session: keys
// written (invalidated again once acknowledged), whether a write emptied a
// database, whether a write with undeclared keys needs the tracking
// barrier, and the GETs of hot keys whose misses are collapsed.
type hotWriteState struct {
	keys    [][]byte
	hashes  []uint64 // xxhash.Sum64 of each of keys
	clear   bool
	barrier bool
	misses  []missAt
	// clearAtExec: the open transaction queued a FLUSHDB, FLUSHALL or
	// SWAPDB, which run at EXEC, maybe batches later. Client tracking
	// sends no invalidation for SWAPDB, so the tier is emptied again then.
	// A DISCARD leaves it set (the next EXEC empties the tier once more):
	// noting DISCARD would cost every non-write command a check.
	clearAtExec bool
}

// beforeWrite drops from the local tier what a command may change, before
// it is sent. With acked, the batch's replies will be seen: writes to known
// keys are dropped again then (afterWrite), so that a fill which read the
// old value while the write was on its way cannot stay, and writes to
// undeclared keys wait for the tracking barrier. In stream mode no
// acknowledgement is seen, and client tracking covers the rest.
func (t *tiering) beforeWrite(ss *session, info *command.Info, args [][]byte, acked bool) {
	w := &ss.hotWrites
	if info == nil {
		w.barrier = w.barrier || acked // unknown here: a module command may write
		return
	}
	switch info.Invalidates {
	case command.InvalidatesNone:
		return
	case command.InvalidatesAll:
		t.engine.Clear()
		w.clear = w.clear || acked
		w.clearAtExec = w.clearAtExec || ss.inTransaction()
		return
	}
	if w.clearAtExec && info.Name == "exec" {
		t.engine.Clear()
		w.clear = w.clear || acked
		w.clearAtExec = false
	}
	n := len(w.keys)
	keys, ok := command.Keys(info, args, w.keys)
	hashes := w.hashes
	for _, k := range keys[n:] {
		h := xxhash.Sum64(k)
		t.engine.Invalidate(k, h)
		hashes = append(hashes, h)
	}
	if !acked {
		w.keys = keys[:n]
		return
	}
	w.keys, w.hashes = keys, hashes
	if !ok || info.Invalidates == command.InvalidatesUnknown || tier.LockAcquire(info, args) {
		w.barrier = true
	}
}

// afterWrite completes beforeWrite once the batch's replies are in.
func (t *tiering) afterWrite(ss *session) {
	w := &ss.hotWrites
	for i, k := range w.keys {
		t.engine.Written(k, w.hashes[i])
		w.keys[i] = nil
	}
	w.keys, w.hashes = w.keys[:0], w.hashes[:0]
	if w.clear {
		t.engine.Clear()
		w.clear = false
	}
	if w.barrier {
		t.engine.Barrier()
		w.barrier = false
	}
}

// Miss collapsing (hotkeys.miss_wait): when GETs of a hot key (or a key
// under hotkeys.prefixes) find no value, the first reader takes its miss
// and goes on to fill the key (the cache-aside pattern: database, then
// SET); the other readers' GETs are held until the key is written (a write
// through rproxy acknowledged, or an invalidation from client tracking) or
// the wait ends, and are then read again from Redis. Their reply is thus
// one Redis gave during their own call: the write's value, or Redis's
// reply when the wait ended. A key no fill follows is learned absent and
// not held (hotkey.MissGate).

// missAt is a GET of a hot key queued in the batch: order entry at, key.
// Its reply goes through the gate in flush if it is no value.
type missAt struct {
	at  int
	key []byte
}

// noteMiss marks the GET of key about to be queued (its order entry is the
// next) for the gate.
func (t *tiering) noteMiss(ss *session, key []byte) {
	ss.hotWrites.misses = append(ss.hotWrites.misses, missAt{at: len(ss.order), key: key})
}

// missGate returns the gate the batch's noted GETs pass (nil: none noted).
func (t *tiering) missGate(ss *session) *hotkey.MissGate {
	if t == nil || len(ss.hotWrites.misses) == 0 {
		return nil
	}
	return t.engine.MissGate()
}

// isNoValue reports whether r is GET's reply for a missing key.
func isNoValue(r []byte) bool {
	return string(r) == "$-1\r\n" || string(r) == "_\r\n"
}

// collapseMiss passes the reply r of a noted GET through the gate: a
// reader other than the key's filler waits for the fill and reads again.
// A value tells the gate the key is filled.
func (t *tiering) collapseMiss(ss *session, g *hotkey.MissGate, key, r []byte) []byte {
	if !isNoValue(r) {
		g.Present(key)
		return r
	}
	done, until := g.Miss(key, ss.id)
	if done == nil {
		return r
	}
	g.Wait(done, until)
	slot := upstream.SlotAny
	if t.cluster {
		slot = upstream.Slot(key)
	}
	b := upstream.NewBatch()
	b.AddSlot(resp.AppendCommand(nil, []byte("GET"), key), slot)
	ss.pools[ss.proto].Do(b)
	return b.Reply(0)
}
