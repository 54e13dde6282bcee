package upstream

import (
	"testing"
	"time"
)

// TestMigratingSlots: an ASK marks its slot migrating until the map names
// another master for it or askedFor passes without another ASK; a MOVED
// or another slot's ASK does not mark it.
func TestMigratingSlots(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cluster{base: Config{Now: func() time.Time { return now }}}
	c.slots[7].Store(1)
	if c.AnyMigrating() || c.Migrating(7) {
		t.Fatal("migrating before any ASK")
	}
	c.NoteAsk([]byte("-MOVED 7 127.0.0.1:1\r\n"))
	c.NoteAsk([]byte("-ASK 8 127.0.0.1:1\r\n"))
	if c.Migrating(7) || !c.Migrating(8) || !c.AnyMigrating() {
		t.Fatal("a MOVED marked its slot, or an ASK did not")
	}
	c.NoteAsk([]byte("-ASK 7 127.0.0.1:1\r\n"))
	if !c.Migrating(7) {
		t.Fatal("slot 7 not migrating after its ASK")
	}
	now = now.Add(askedFor / 2)
	c.NoteAsk([]byte("-ASK 7 127.0.0.1:1\r\n")) // another ASK: marked again from now
	now = now.Add(askedFor/2 + time.Millisecond)
	if !c.Migrating(7) || c.Migrating(8) {
		t.Fatal("slot 7 should still be migrating (ASK again), slot 8 no longer (no ASK for askedFor)")
	}
	c.slots[7].Store(2) // the map names its new master: the migration ended
	if c.Migrating(7) || c.AnyMigrating() {
		t.Fatal("slot 7 still migrating after the map moved it")
	}
}
