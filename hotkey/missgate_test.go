package hotkey

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestGate(t *testing.T, c *clock, cfg MissGateConfig) (*MissGate, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g, err := NewMissGate(cfg, c.now, reg)
	if err != nil {
		t.Fatal(err)
	}
	return g, reg
}

func gateCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// The first reader of a missing key fills it; the others wait for its
// write, which releases them all; the filler reading again is not held.
func TestMissGateFillerAndWaiters(t *testing.T) {
	c := newClock()
	g, reg := newTestGate(t, c, DefaultMissGateConfig())
	k := []byte("user:1")
	if ch, _ := g.Miss(k, 1); ch != nil {
		t.Fatal("the first reader of a miss was told to wait")
	}
	if ch, _ := g.Miss(k, 1); ch != nil {
		t.Fatal("the filler reading again was told to wait for itself")
	}
	var waits []<-chan struct{}
	for r := int64(2); r < 12; r++ {
		c.advance(time.Millisecond) // each reader waits from its own miss
		ch, until := g.Miss(k, r)
		if ch == nil || !until.Equal(c.now().Add(200*time.Millisecond)) {
			t.Fatalf("reader %d: wait %v until %v", r, ch, until)
		}
		waits = append(waits, ch)
	}
	if ch, _ := g.Miss([]byte("other"), 2); ch != nil {
		t.Fatal("another key's first miss waits")
	}
	g.Written(k)
	for i, ch := range waits {
		if !g.Wait(ch, c.now().Add(time.Hour)) {
			t.Fatalf("waiter %d not released by the write", i)
		}
	}
	// Written: the next miss starts over with a new filler.
	if ch, _ := g.Miss(k, 5); ch != nil {
		t.Fatal("the first miss after a write waits")
	}
	if f, w := gateCounter(t, reg, "rproxy_hotkey_miss_fillers_total"), gateCounter(t, reg, "rproxy_hotkey_miss_waits_total"); f != 3 || w != 10 {
		t.Fatalf("fillers %v waits %v", f, w)
	}
}

// A key nobody fills within the wait is learned absent: its readers are
// not held again until AbsentFor has passed or it is written.
func TestMissGateLearnsAbsentKeys(t *testing.T) {
	c := newClock()
	g, reg := newTestGate(t, c, MissGateConfig{Wait: 100 * time.Millisecond, AbsentFor: time.Second, MaxKeys: 10})
	k := []byte("nope")
	g.Miss(k, 1)
	ch, until := g.Miss(k, 2)
	if ch == nil {
		t.Fatal("not held")
	}
	c.advance(100 * time.Millisecond)
	if g.Wait(ch, until) {
		t.Fatal("released with no write")
	}
	if ch, _ := g.Miss(k, 3); ch != nil {
		t.Fatal("held after a wait that no write ended")
	}
	c.advance(500 * time.Millisecond)
	if ch, _ := g.Miss(k, 4); ch != nil {
		t.Fatal("held while learned absent")
	}
	if a, to := gateCounter(t, reg, "rproxy_hotkey_miss_absent_keys_total"), gateCounter(t, reg, "rproxy_hotkey_miss_wait_timeouts_total"); a != 1 || to != 1 {
		t.Fatalf("absent %v timeouts %v", a, to)
	}
	// Forgotten after AbsentFor: a miss then has a filler again, and waits.
	c.advance(500 * time.Millisecond)
	g.Miss(k, 5)
	if ch, _ := g.Miss(k, 6); ch == nil {
		t.Fatal("not held after the absence was forgotten")
	}
	// A write forgets the absence at once.
	c.advance(100 * time.Millisecond)
	g.Miss(k, 7) // learned absent again
	g.Written(k)
	g.Miss(k, 8)
	if ch, _ := g.Miss(k, 9); ch == nil {
		t.Fatal("not held after a write ended the absence")
	}
}

// The gate holds at most MaxKeys keys; ended ones make room, and misses
// beyond pass. Clear releases everyone.
func TestMissGateBoundedAndClear(t *testing.T) {
	c := newClock()
	g, _ := newTestGate(t, c, MissGateConfig{Wait: 100 * time.Millisecond, AbsentFor: time.Second, MaxKeys: 2})
	g.Miss([]byte("a"), 1)
	g.Miss([]byte("b"), 1)
	g.Miss([]byte("c"), 1) // full: passes
	if ch, _ := g.Miss([]byte("c"), 2); ch != nil {
		t.Fatal("a key beyond MaxKeys is gated")
	}
	ch, until := g.Miss([]byte("a"), 2)
	if ch == nil {
		t.Fatal("a is not gated")
	}
	g.Clear()
	if !g.Wait(ch, until) {
		t.Fatal("Clear did not release a waiter")
	}
	c.advance(time.Second)
	g.Miss([]byte("x"), 1)
	g.Miss([]byte("y"), 1)
	c.advance(100 * time.Millisecond) // both waits over: swept for z
	g.Miss([]byte("z"), 1)
	if ch, _ := g.Miss([]byte("z"), 2); ch == nil {
		t.Fatal("ended keys did not make room")
	}
	if _, err := NewMissGate(MissGateConfig{}, c.now, nil); err == nil {
		t.Fatal("a zero config was accepted")
	}
}

// A value seen by a reader ends the key's filling: a write the gate did
// not see (or one that landed before the miss was recorded) must not leave
// the key to be learned absent at its next miss.
func TestMissGatePresentEndsFilling(t *testing.T) {
	c := newClock()
	g, _ := newTestGate(t, c, MissGateConfig{Wait: 100 * time.Millisecond, AbsentFor: time.Second, MaxKeys: 10})
	k := []byte("k")
	g.Miss(k, 1)
	ch, until := g.Miss(k, 2)
	g.Present(k)
	if !g.Wait(ch, until) {
		t.Fatal("a value seen did not release the waiter")
	}
	// Much later, the key expires: its next miss has a filler and holds
	// the others, instead of finding a stale filling and learning absence.
	c.advance(time.Minute)
	g.Miss(k, 3)
	if ch, _ := g.Miss(k, 4); ch == nil {
		t.Fatal("the next expiry is not collapsed")
	}
}

// A filling state long past its wait (a write the gate never heard of, no
// reader since) does not make the key's next miss learn it absent.
func TestMissGateOldFillingStartsOver(t *testing.T) {
	c := newClock()
	g, _ := newTestGate(t, c, MissGateConfig{Wait: 100 * time.Millisecond, AbsentFor: time.Second, MaxKeys: 10})
	k := []byte("k")
	g.Miss(k, 1)
	c.advance(time.Minute)
	g.Miss(k, 2)
	if ch, _ := g.Miss(k, 3); ch == nil {
		t.Fatal("a miss a minute after an unanswered fill learned the key absent")
	}
}
