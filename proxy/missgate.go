package proxy

import (
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

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
func (s *Server) noteMiss(ss *session, key []byte) {
	ss.hotWrites.misses = append(ss.hotWrites.misses, missAt{at: len(ss.order), key: key})
}

// isNoValue reports whether r is GET's reply for a missing key.
func isNoValue(r []byte) bool {
	return string(r) == "$-1\r\n" || string(r) == "_\r\n"
}

// collapseMiss passes the reply r of a noted GET through the gate: a
// reader other than the key's filler waits for the fill and reads again.
// A value tells the gate the key is filled.
func (s *Server) collapseMiss(ss *session, g *hotkey.MissGate, key, r []byte) []byte {
	if !isNoValue(r) {
		g.Present(key)
		return r
	}
	done, until := g.Miss(key, ss.id)
	if done == nil {
		return r
	}
	g.Wait(done, until)
	b := upstream.NewBatch()
	b.AddSlot(resp.AppendCommand(nil, []byte("GET"), key), s.slotOf(key))
	ss.pools[ss.proto].Do(b)
	return b.Reply(0)
}
