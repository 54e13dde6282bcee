package salt

import (
	"strconv"
	"testing"
	"time"
)

// TestSalterTableBound: the table holds at most maxSaltedKeys; a full
// table takes a new key only once an old one can have no copy left
// (unused for 2 TTLs plus a second), and never one being written.
func TestSalterTableBound(t *testing.T) {
	now := time.Unix(1000, 0)
	s, err := New(Config{Copies: 3, TTL: time.Second}, nil, func() time.Time { return now }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxSaltedKeys {
		if s.get([]byte("k"+strconv.Itoa(i))) == nil {
			t.Fatalf("key %d refused below the bound", i)
		}
	}
	busy := s.Lookup([]byte("k0"))
	busy.writing.Add(1)
	now = now.Add(2*time.Second + 900*time.Millisecond) // within 2 TTLs + 1 s
	if s.get([]byte("new")) != nil {
		t.Fatal("a full table took a key while every old key may still have copies")
	}
	now = now.Add(200 * time.Millisecond) // past it
	if s.get([]byte("new")) == nil {
		t.Fatal("a full table did not make room from keys whose copies are gone")
	}
	if s.Lookup([]byte("k0")) != busy {
		t.Fatal("a key being written was forgotten")
	}
	if s.Lookup([]byte("k1")) != nil {
		t.Fatal("an old key was kept")
	}
}

// TestSaltedName: the copy number goes inside a hash tag (so copies of
// tagged keys hash by the salted tag), else at the end of the key.
func TestSaltedName(t *testing.T) {
	for key, want := range map[string]string{
		"user:{42}:profile": "user:{42#rproxy-copy-3}:profile",
		"plain":             "plain#rproxy-copy-3",
		"empty{}tag":        "empty{}tag#rproxy-copy-3",
		"open{only":         "open{only#rproxy-copy-3",
	} {
		if got := string(saltedName([]byte(key), 3)); got != want {
			t.Errorf("saltedName(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestWriteBeforeTheKeyIsSalted: a write begun while its key had no salted
// state holds the fills of the key once a read salts it, until the write
// ends; a write begun on a salted key raises its generation, which refuses
// a fill whose read came before.
func TestWriteBeforeTheKeyIsSalted(t *testing.T) {
	s, err := New(Config{Copies: 3, TTL: time.Second}, nil, time.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := s.BeginWrite([]byte("k"))
	if w.key != nil {
		t.Fatal("a key without salted state was given some by a write")
	}
	r := Read{key: s.get([]byte("k"))} // a read salts it while the write is under way
	if g := s.FillGen(r); g != NoFill {
		t.Fatalf("FillGen during a write begun before the key was salted: %v, want NoFill", g)
	}
	s.EndWrites([]Write{w})
	gen := s.FillGen(r)
	if gen == NoFill {
		t.Fatal("the key's fills stayed held after the write ended")
	}
	if s.BeginWrite([]byte("k")).key != r.key {
		t.Fatal("a write of a salted key did not begin on its state")
	}
	if r.key.gen.Load() == gen.key || s.FillGen(r) != NoFill {
		t.Fatal("a write of a salted key neither raised its generation nor held its fills")
	}
}

// TestHeldWrites: a transaction's queued writes are held once per salted
// key and pending bucket, however often queued, and end together.
func TestHeldWrites(t *testing.T) {
	s, err := New(Config{Copies: 3, TTL: time.Second}, nil, time.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var h Held
	if !h.Empty() {
		t.Fatal("a new Held is not empty")
	}
	for range 3 {
		s.Hold(&h, []byte("unsalted"))
	}
	b := s.bucket([]byte("unsalted"))
	if n := s.pending[b].Load(); n != 1 {
		t.Fatalf("pending after holding one key three times: %d, want 1", n)
	}
	r := Read{key: s.get([]byte("unsalted"))}
	if s.FillGen(r) != NoFill {
		t.Fatal("a key salted while a transaction holds its write was given a fill")
	}
	ws := h.Take(nil)
	if len(ws) != 1 || !h.Empty() {
		t.Fatalf("Take: %d writes (want 1), empty after: %v", len(ws), h.Empty())
	}
	s.EndWrites(ws)
	if n := s.pending[b].Load(); n != 0 || s.FillGen(r) == NoFill {
		t.Fatalf("pending %d after the held writes ended (want 0); FillGen %v", n, s.FillGen(r))
	}
}

// BenchmarkWriteUnsalted is what salting adds to a write of a key without
// salted state (most writes): a hash, two counts and a table lookup.
func BenchmarkWriteUnsalted(b *testing.B) {
	s, err := New(Config{Copies: 3, TTL: time.Second}, nil, time.Now, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	s.get([]byte("salted")) // a table that is not empty
	key := []byte("user:1000:profile")
	ws := make([]Write, 1)
	b.ReportAllocs()
	for b.Loop() {
		ws[0] = s.BeginWrite(key)
		s.EndWrites(ws)
	}
}

// TestFlushHoldsFills: a flush under way refuses fills, and one whose read
// of the origin came before the flush began or ended; the keys with fills
// unacknowledged when it began are noted, their copies to be deleted again.
func TestFlushHoldsFills(t *testing.T) {
	s, err := New(Config{Copies: 3, TTL: time.Second}, nil, time.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Read{key: s.get([]byte("k"))}
	other := s.get([]byte("other"))
	other.filling.Store(1 << 1)
	before := s.FillGen(r)
	w := s.BeginFlush()
	if s.FillGen(r) != NoFill {
		t.Fatal("FillGen during a flush did not refuse the fill")
	}
	if len(w.flush.filling) != 1 || w.flush.filling[0] != other {
		t.Fatalf("keys with fills unacknowledged at the flush: %d, want the one", len(w.flush.filling))
	}
	other.filling.Store(0) // no copies to delete: EndWrites needs no cluster
	w.flush.filling = nil
	s.EndWrites([]Write{w})
	after := s.FillGen(r)
	if after == NoFill || after.epoch == before.epoch {
		t.Fatalf("after the flush: FillGen %v, before it %v: want a new epoch", after, before)
	}
	var h Held
	s.HoldFlush(&h)
	s.HoldFlush(&h)
	if s.flushing.Load() != 1 {
		t.Fatalf("a transaction holding two flushes counted %d, want 1", s.flushing.Load())
	}
	s.EndWrites(h.Take(nil))
	if s.flushing.Load() != 0 || !h.Empty() {
		t.Fatal("the held flush did not end")
	}
}
