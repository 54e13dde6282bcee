package hotkey

import (
	"fmt"
	"testing"
	"time"
)

// TestVariantsByBytes: replies named by bytes (a protocol and a command)
// are kept per key beside the one-byte ones, compared in full, all dropped
// by one invalidation of the key, and charged with their names' bytes.
func TestVariantsByBytes(t *testing.T) {
	tr := newTestTier(t, DefaultTierConfig(), newClock())
	k := []byte("board")
	top := []byte("\x02*4\r\n$9\r\nZREVRANGE\r\n$5\r\nboard\r\n$1\r\n0\r\n$1\r\n9\r\n")
	top3 := append([]byte{3}, top[1:]...)
	tok := tr.Begin(k)
	if !tr.PutVariant(tok, k, top, []byte("*0\r\n"), 0) || !tr.PutVariant(tok, k, top3, []byte("*0\r\n"), 0) {
		t.Fatal("PutVariant refused")
	}
	if !tr.Put(tok, k, 2, []byte("$-1\r\n"), 0) {
		t.Fatal("Put refused beside byte variants")
	}
	if r, ok := tr.GetVariant(k, top); !ok || string(r) != "*0\r\n" {
		t.Fatalf("GetVariant = %q, %v", r, ok)
	}
	if _, ok := tr.GetVariant(k, top[:len(top)-1]); ok {
		t.Fatal("a prefix of a variant's name was served")
	}
	if _, ok := tr.GetVariant(k, []byte{2}); !ok {
		t.Fatal("the one-byte variant 2 is not found by its byte")
	}
	if tr.PutVariant(tok, k, nil, []byte("x"), 0) {
		t.Fatal("an empty variant name was stored")
	}
	want := int64(len(k)) + entryOverhead + 3*variantOverhead + int64(len(top)+len(top3)) + 4 + 4 + 5
	if st := tr.Stats(); st.Entries != 1 || st.Bytes != want {
		t.Fatalf("stats %+v, want 1 entry of %d bytes", st, want)
	}
	tr.Invalidate(k)
	if _, ok := tr.GetVariant(k, top3); ok {
		t.Fatal("served after the key was invalidated")
	}
	if st := tr.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("stats after invalidation %+v", st)
	}
}

// TestVariantsPerKeyBounded: a key read with ever new arguments keeps at
// most maxVariants replies, dropping the oldest, and its charge stays
// exact.
func TestVariantsPerKeyBounded(t *testing.T) {
	c := newClock()
	tr := newTestTier(t, DefaultTierConfig(), c)
	k := []byte("list")
	name := func(i int) []byte { return fmt.Appendf(nil, "\x02LRANGE list 0 %d", i) }
	for i := range maxVariants + 5 {
		c.advance(time.Millisecond) // later stored, later expiring
		if !tr.PutVariant(tr.Begin(k), k, name(i), []byte("*0\r\n"), 0) {
			t.Fatalf("variant %d refused", i)
		}
	}
	for i := range maxVariants + 5 {
		_, ok := tr.GetVariant(k, name(i))
		if want := i >= 5; ok != want {
			t.Fatalf("variant %d served %v, want %v", i, ok, want)
		}
	}
	want := int64(len(k)) + entryOverhead
	for i := 5; i < maxVariants+5; i++ {
		want += variantOverhead + int64(len(name(i))) + 4
	}
	if st := tr.Stats(); st.Bytes != want {
		t.Fatalf("bytes %d, want %d", st.Bytes, want)
	}
}
