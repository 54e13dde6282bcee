package hotkey

import (
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// A key invalidated more than Limit times in the window is write-hot; it
// stops being so once its invalidations slide out of the window; other
// keys are not affected.
func TestChurnLimitAndQuietPeriod(t *testing.T) {
	c := newClock()
	ch, err := NewChurn(ChurnConfig{Window: time.Second, Limit: 4}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	k, other := xxhash.Sum64String("k"), xxhash.Sum64String("other")
	for i := 0; i < 4; i++ {
		ch.Record(k)
		c.advance(10 * time.Millisecond)
	}
	if ch.Hot(k) {
		t.Fatalf("hot after 4 invalidations (limit 4): rate %v", ch.Rate(k))
	}
	ch.Record(k)
	if !ch.Hot(k) {
		t.Fatalf("not hot after 5 invalidations: rate %v", ch.Rate(k))
	}
	if ch.Hot(other) {
		t.Fatal("another key is hot")
	}
	c.advance(1500 * time.Millisecond) // under half the previous sub-window still counts
	if r := ch.Rate(k); ch.Hot(k) || r < 2 || r > 2.6 {
		t.Fatalf("1.5s later: hot %v, rate %v (want about 5 x 0.46)", ch.Hot(k), r)
	}
	c.advance(time.Second) // quiet for two windows
	if ch.Hot(k) || ch.Rate(k) != 0 {
		t.Fatalf("still hot after a quiet window: rate %v", ch.Rate(k))
	}
}

// Limit 0 turns the check off; SetConfig applies at once; invalid
// settings are refused.
func TestChurnConfig(t *testing.T) {
	c := newClock()
	ch, err := NewChurn(ChurnConfig{Window: time.Second, Limit: 0}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	k := xxhash.Sum64String("k")
	for i := 0; i < 100; i++ {
		ch.Record(k)
	}
	if ch.Hot(k) {
		t.Fatal("hot with limit 0")
	}
	if err := ch.SetConfig(ChurnConfig{Window: time.Second, Limit: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		ch.Record(k)
	}
	if !ch.Hot(k) {
		t.Fatal("not hot after the limit was set")
	}
	for _, bad := range []ChurnConfig{{Window: 0, Limit: 1}, {Window: time.Second, Limit: -1}} {
		if _, err := NewChurn(bad, c.now); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
		if err := ch.SetConfig(bad); err == nil {
			t.Fatalf("SetConfig(%+v) accepted", bad)
		}
	}
	if _, err := NewChurn(DefaultChurnConfig(), nil); err == nil {
		t.Fatal("nil clock accepted")
	}
}
