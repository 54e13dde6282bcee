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
