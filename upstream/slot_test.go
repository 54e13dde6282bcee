package upstream

import (
	"math/rand/v2"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
)

func TestSlotKnownValues(t *testing.T) {
	// Values from Redis's CLUSTER KEYSLOT and the cluster spec.
	cases := map[string]int{
		"foo":                  12182,
		"bar":                  5061,
		"123456789":            12739, // CRC16/XMODEM check value 0x31C3 mod 16384
		"{user1000}.following": Slot([]byte("user1000")),
		"foo{}{bar}":           Slot([]byte("foo{}{bar}")),
		"foo{{bar}}zap":        Slot([]byte("{bar")),
		"foo{bar}{zap}":        Slot([]byte("bar")),
		"":                     0,
	}
	for key, want := range cases {
		if got := Slot([]byte(key)); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot([]byte("{}")) != int(crc16([]byte("{}")))&(Slots-1) {
		t.Error("an empty tag must hash the whole key")
	}
	if Slot([]byte("a{b")) != int(crc16([]byte("a{b")))&(Slots-1) {
		t.Error("an unclosed tag must hash the whole key")
	}
}

func BenchmarkSlot(b *testing.B) {
	key := []byte("user:1000:profile")
	for b.Loop() {
		Slot(key)
	}
}

// TestCRC16MatchesReference: the table-driven crc16 against the bitwise
// reference of the test harness, every length from 0 to 70 (both sides of the
// eight-byte steps), over random bytes.
func TestCRC16MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 70; n++ {
		for range 50 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if got, want := crc16(b), redistest.CRC16(string(b)); got != want {
				t.Fatalf("crc16(% x) = %#04x, want %#04x", b, got, want)
			}
		}
	}
}

func FuzzCRC16(f *testing.F) {
	f.Add([]byte("123456789"))
	f.Add([]byte("key:000000012345"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := crc16(b), redistest.CRC16(string(b)); got != want {
			t.Fatalf("crc16(% x) = %#04x, want %#04x", b, got, want)
		}
	})
}
