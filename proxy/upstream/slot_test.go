package upstream

import "testing"

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
