package upstream

import (
	"sync"
	"sync/atomic"
	"time"
)

// askedFor is how long an ASK keeps its slot marked migrating (Migrating)
// when no other comes and the map names the same master.
const askedFor = 10 * time.Second

// askMark is a slot an ASK was met for: the master the map named then,
// and when (unix nanos, base.Now).
type askMark struct {
	owner int32
	at    int64
}

// migratingSlots are the slots a Cluster met an ASK for. A connection that
// follows no redirect itself (a stream-mode session's) can send such a
// slot's commands where they are followed instead, before meeting the ASK
// itself.
type migratingSlots struct {
	some  atomic.Bool // marks holds any
	mu    sync.Mutex
	marks map[int]askMark
}

// noteAsk marks slot migrating, as an ASK for it said; a client cluster's
// ASKs mark the one it reads its map through too (MapVia), whose users
// route by it.
func (c *Cluster) noteAsk(slot int) {
	if slot < 0 || slot >= Slots {
		return
	}
	m := &c.migrating
	m.mu.Lock()
	if m.marks == nil {
		m.marks = map[int]askMark{}
	}
	m.marks[slot] = askMark{owner: c.slots[slot].Load(), at: c.base.Now().UnixNano()}
	m.some.Store(true)
	m.mu.Unlock()
	if via := c.cfg.MapVia; via != nil {
		via.noteAsk(slot)
	}
}

// NoteAsk marks reply's slot migrating if reply is an ASK, met on a
// connection that follows no redirect.
func (c *Cluster) NoteAsk(reply []byte) {
	if kind, slot, _, ok := parseRedirect(reply); ok && kind == "ask" {
		c.noteAsk(slot)
	}
}

// AnyMigrating reports whether any slot may be Migrating: a cheap test
// before finding a command's slot.
func (c *Cluster) AnyMigrating() bool { return c.migrating.some.Load() }

// Migrating reports whether an ASK for slot was met in the last askedFor
// while the map has named the same master for it since: its migration has
// not ended, and a command of a key already moved would meet an ASK.
func (c *Cluster) Migrating(slot int) bool {
	m := &c.migrating
	if !m.some.Load() {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mark, ok := m.marks[slot]
	if !ok {
		return false
	}
	if mark.owner != c.slots[slot].Load() || c.base.Now().UnixNano()-mark.at > int64(askedFor) {
		delete(m.marks, slot)
		m.some.Store(len(m.marks) > 0)
		return false
	}
	return true
}
