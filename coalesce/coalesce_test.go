package coalesce

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// sender is a fake leader batch whose "written" moment the test controls.
type sender struct {
	sent    atomic.Bool
	stalled atomic.Bool
	seq     uint64
}

func (s *sender) Sent() bool      { return s.sent.Load() }
func (s *sender) SentSeq() uint64 { return s.seq }
func (s *sender) Stalled() bool   { return s.stalled.Load() }

func TestJoinWhileUnsentOnly(t *testing.T) {
	g := New(Unsent, false, nil)
	s := &sender{}
	lead, leader := g.Join([]byte("GET k"), s, 0)
	if !leader {
		t.Fatal("first reader does not lead")
	}
	j1, leader := g.Join([]byte("GET k"), &sender{}, 0)
	if leader || j1 != lead {
		t.Fatal("a reader arriving before the send did not join")
	}
	s.sent.Store(true) // the leader's command is on the wire now
	late, leader := g.Join([]byte("GET k"), &sender{}, 0)
	if !leader || late == lead {
		t.Fatal("a reader arriving after the send joined: it could get a value older than its own call")
	}
	other, leader := g.Join([]byte("GET other"), &sender{}, 0)
	if !leader || other == lead {
		t.Fatal("different keys share a flight")
	}

	// Joiners get the leader's bytes, even after the leader reuses its buffer.
	buf := []byte("$1\r\nv\r\n")
	lead.Publish(buf)
	copy(buf, "XXXXXXX")
	if got := string(j1.Wait()); got != "$1\r\nv\r\n" {
		t.Fatalf("joiner got %q", got)
	}
	// The late flight is still open for joiners until it is sent.
	if j, leader := g.Join([]byte("GET k"), &sender{}, 0); leader || j != late {
		t.Fatal("the newer flight did not take joiners")
	}
	late.Publish([]byte("+late\r\n"))
	other.Publish(nil)
	if g.Open() != 0 {
		t.Fatalf("%d flights left open", g.Open())
	}
}

// TestErrorsFanOut: an error reply reaches every joiner unchanged.
func TestErrorsFanOut(t *testing.T) {
	g := New(Unsent, false, nil)
	lead, _ := g.Join([]byte("k"), &sender{}, 0)
	var joiners []*Flight
	for i := 0; i < 5; i++ {
		f, _ := g.Join([]byte("k"), &sender{}, 0)
		joiners = append(joiners, f)
	}
	lead.Publish([]byte("-ERR upstream unavailable: read: EOF\r\n"))
	for _, f := range joiners {
		if got := string(f.Wait()); got != "-ERR upstream unavailable: read: EOF\r\n" {
			t.Fatalf("joiner got %q", got)
		}
	}
}

// TestJoinersWaitForThePublish is staged with channels: every joiner is
// known to be waiting before the leader publishes, and none returns early.
func TestJoinersWaitForThePublish(t *testing.T) {
	g := New(Unsent, false, nil)
	lead, _ := g.Join([]byte("k"), &sender{}, 0)
	const n = 50
	waiting := make(chan struct{}, n)
	got := make(chan string, n)
	for i := 0; i < n; i++ {
		f, leader := g.Join([]byte("k"), &sender{}, 0)
		if leader {
			t.Fatal("joiner leads")
		}
		go func() {
			waiting <- struct{}{}
			got <- string(f.Wait())
		}()
	}
	for i := 0; i < n; i++ {
		<-waiting
	}
	select {
	case r := <-got:
		t.Fatalf("a joiner returned %q before the publish", r)
	default:
	}
	lead.Publish([]byte(":1\r\n"))
	for i := 0; i < n; i++ {
		if r := <-got; r != ":1\r\n" {
			t.Fatalf("joiner %d got %q", i, r)
		}
	}
}

// TestAbandonedJoinerDoesNotDisturb: a joiner that never waits (its client
// left) changes nothing for the others.
func TestAbandonedJoinerDoesNotDisturb(t *testing.T) {
	g := New(Unsent, false, nil)
	lead, _ := g.Join([]byte("k"), &sender{}, 0)
	g.Join([]byte("k"), &sender{}, 0) // never waits
	f, _ := g.Join([]byte("k"), &sender{}, 0)
	lead.Publish([]byte("+OK\r\n"))
	if got := string(f.Wait()); got != "+OK\r\n" {
		t.Fatalf("got %q", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	g := New(Unsent, false, nil)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				key := []byte(fmt.Sprintf("k%d", i%7))
				s := &sender{}
				f, leader := g.Join(key, s, 0)
				if leader {
					s.sent.Store(true)
					f.Publish(key)
				} else if got := string(f.Wait()); got != string(key) {
					t.Errorf("joiner of %s got %q", key, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	if g.Open() != 0 {
		t.Fatalf("%d flights left open", g.Open())
	}
}

func BenchmarkLeadAndPublish(b *testing.B) {
	g := New(Unsent, false, nil)
	key := []byte("*2\r\n$3\r\nGET\r\n$10\r\nkey:000001\r\n")
	s := &sender{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f, _ := g.Join(key, s, 0)
		f.Publish(nil)
	}
}

// TestInFlightWindow: with InFlight, a reader may join a flight already on
// the wire, but only if it was sent after the reader's last write was
// acknowledged; Unsent never does.
func TestInFlightWindow(t *testing.T) {
	g := New(InFlight, false, nil)
	s := &sender{seq: 10}
	lead, _ := g.Join([]byte("k"), s, 0)
	s.sent.Store(true) // on the wire with send sequence 10
	if f, leader := g.Join([]byte("k"), &sender{}, 9); leader || f != lead {
		t.Fatal("a reader whose last write was acknowledged before the send (9 < 10) did not join")
	}
	if f, leader := g.Join([]byte("k"), &sender{}, 10); !leader || f == lead {
		t.Fatal("a reader whose write was acknowledged after the send joined: it would miss its own write")
	}
	strict := New(Unsent, false, nil)
	s2 := &sender{seq: 10}
	l2, _ := strict.Join([]byte("k"), s2, 0)
	s2.sent.Store(true)
	if f, leader := strict.Join([]byte("k"), &sender{}, 0); !leader || f == l2 {
		t.Fatal("Unsent window joined a sent flight")
	}
}

// TestFilterSkipsColdKeys: with the filter, a key's first read starts no
// flight; the second read of it (before a Forget) does, and a third joins.
func TestFilterSkipsColdKeys(t *testing.T) {
	g := New(Unsent, true, nil)
	if f, leader := g.Join([]byte("cold"), &sender{}, 0); f != nil || !leader {
		t.Fatal("first read of a key started a flight")
	}
	lead, leader := g.Join([]byte("cold"), &sender{}, 0)
	if lead == nil || !leader {
		t.Fatal("second read did not lead a flight")
	}
	if f, leader := g.Join([]byte("cold"), &sender{}, 0); leader || f != lead {
		t.Fatal("third read did not join")
	}
	lead.Publish([]byte("+x\r\n"))

	// After Forget, the key is cold again: its next read starts no flight.
	g.Forget()
	if f, _ := g.Join([]byte("cold"), &sender{}, 0); f != nil {
		t.Fatal("a read after Forget started a flight: the filter remembered")
	}
	// Seen asked first (as the proxy does before building the identity)
	// marks the read, and JoinHash agrees with it.
	h := xxhash.Sum64String("warm")
	if g.Seen(h) {
		t.Fatal("an unread key was seen")
	}
	f, leader := g.JoinHash(h, []byte("warm"), &sender{}, 0)
	if f == nil || !leader {
		t.Fatal("the read after Seen did not lead a flight")
	}
	f.Publish(nil)
	if !New(Unsent, false, nil).Seen(h) {
		t.Fatal("without the filter, Seen must say yes")
	}
}

// BenchmarkColdReads: reads over 128k distinct keys, as on a spread
// keyspace where nobody joins, with and without the recently-read filter.
// forgetEvery is how many reads the cold-read benchmarks let pass between
// Forget calls: the proxy's 5 ms at about 800k reads per second.
const forgetEvery = 4096

// BenchmarkColdReads: reads of a spread keyspace, which nobody joins.
func BenchmarkColdReads(b *testing.B) {
	keys := make([][]byte, 1<<17)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("*2\r\n$3\r\nGET\r\n$10\r\nkey:%06d\r\n", i))
	}
	for _, filter := range []bool{true, false} {
		b.Run(fmt.Sprintf("filter=%v", filter), func(b *testing.B) {
			g := New(Unsent, filter, nil)
			s := &sender{}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if i%forgetEvery == 0 {
					g.Forget()
				}
				if f, _ := g.Join(keys[i%len(keys)], s, 0); f != nil {
					f.Publish(nil)
				}
			}
		})
	}
}

// BenchmarkColdReadsParallel is BenchmarkColdReads from every core at
// once, as sessions call Join: shared counters show up here.
func BenchmarkColdReadsParallel(b *testing.B) {
	keys := make([][]byte, 1<<17)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("*2\r\n$3\r\nGET\r\n$10\r\nkey:%06d\r\n", i))
	}
	g := New(Unsent, true, prometheus.NewRegistry())
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := &sender{}
		id := next.Add(1)
		i := int(id * 7919)
		for pb.Next() {
			i++
			if id == 1 && i%(forgetEvery/2) == 0 {
				g.Forget() // one goroutine forgets, as the proxy's clock does
			}
			switch f, leader := g.Join(keys[i%len(keys)], s, 0); {
			case f == nil:
			case leader:
				f.Publish(nil)
			default:
				f.Wait() // the other core's flight: it publishes at once
			}
		}
	})
}

// TestHeldBehindSharedFlight: once a shared flight is on the wire, the
// key's next flight waits for its reply before it is sent, and takes
// joiners meanwhile; it still reads after each of them joined.
func TestHeldBehindSharedFlight(t *testing.T) {
	g := New(Unsent, false, nil)
	sa := &sender{}
	a, _ := g.Join([]byte("k"), sa, 0)
	ja, _ := g.Join([]byte("k"), &sender{}, 0)
	sa.sent.Store(true)

	b, leader := g.Join([]byte("k"), &sender{}, 0)
	if !leader || b == a {
		t.Fatal("a reader after the send did not lead a new flight")
	}
	if b.prev != a {
		t.Fatal("the new flight is not held behind the shared one on the wire")
	}
	jb, leader := g.Join([]byte("k"), &sender{}, 0)
	if leader || jb != b {
		t.Fatal("the held flight did not take a joiner")
	}
	turn := make(chan struct{})
	go func() {
		b.AwaitTurn(0)
		close(turn)
	}()
	a.Publish([]byte("$1\r\n1\r\n")) // the held flight's turn comes with this reply
	<-turn
	if got := string(ja.Wait()); got != "$1\r\n1\r\n" {
		t.Fatalf("the first flight's joiner got %q", got)
	}
	b.Publish([]byte("$1\r\n2\r\n"))
	if got := string(jb.Wait()); got != "$1\r\n2\r\n" {
		t.Fatalf("the held flight's joiner got %q", got)
	}
	if g.Open() != 0 {
		t.Fatalf("%d flights left open", g.Open())
	}
}

// TestNotHeldBehindUnsharedFlight: a flight nobody joined does not hold the
// next one (a key read by one client at a time pays no extra wait), nor
// does another key's flight in the same table slot.
func TestNotHeldBehindUnsharedFlight(t *testing.T) {
	g := New(Unsent, false, nil)
	sa := &sender{}
	a, _ := g.Join([]byte("k"), sa, 0)
	sa.sent.Store(true)
	b, leader := g.Join([]byte("k"), &sender{}, 0)
	if !leader || b.prev != nil {
		t.Fatal("a flight was held behind one nobody joined")
	}
	b.AwaitTurn(0) // returns at once
	b.Publish(nil)
	a.Publish(nil)

	// Find a key that shares k's slot.
	other := ""
	for i := 0; ; i++ {
		o := fmt.Sprintf("o%d", i)
		if xxhash.Sum64String(o)%slotCount == xxhash.Sum64String("k")%slotCount {
			other = o
			break
		}
	}
	sc := &sender{}
	c, _ := g.Join([]byte("k"), sc, 0)
	g.Join([]byte("k"), &sender{}, 0)
	sc.sent.Store(true)
	d, _ := g.Join([]byte(other), &sender{}, 0)
	if d.prev != nil {
		t.Fatal("a flight was held behind another key's flight")
	}
	c.Publish(nil)
	d.Publish(nil)
}

// TestHeldInFlightWindow: with InFlight, a reader that may not join the
// flight on the wire (its write was acknowledged after that send) leads a
// flight held behind it.
func TestHeldInFlightWindow(t *testing.T) {
	g := New(InFlight, false, nil)
	sa := &sender{seq: 10}
	a, _ := g.Join([]byte("k"), sa, 0)
	g.Join([]byte("k"), &sender{}, 0)
	sa.sent.Store(true)
	if f, leader := g.Join([]byte("k"), &sender{}, 5); leader || f != a {
		t.Fatal("a reader with no later write did not join the flight on the wire")
	}
	b, leader := g.Join([]byte("k"), &sender{}, 11)
	if !leader || b.prev != a {
		t.Fatal("a reader that wrote after the send was not given a flight held behind it")
	}
	a.Publish(nil)
	b.AwaitTurn(0)
	b.Publish(nil)
}

// TestStalledFlightHoldsNoOne: a shared flight stalled behind a paused
// write (Sender.Stalled) holds no later flight of its key, is not joined in
// the InFlight window, and a flight already held behind it stops waiting
// once it is marked stalled.
func TestStalledFlightHoldsNoOne(t *testing.T) {
	g := New(InFlight, false, nil)
	sa := &sender{seq: 10}
	a, _ := g.Join([]byte("k"), sa, 0)
	g.Join([]byte("k"), &sender{}, 0)
	sa.sent.Store(true)

	held, leader := g.Join([]byte("k"), &sender{}, 11) // wrote after a's send: held behind it
	if !leader || held.prev != a {
		t.Fatal("the flight was not held behind the shared one on the wire")
	}
	turn := make(chan struct{})
	go func() {
		held.AwaitTurn(time.Millisecond)
		close(turn)
	}()
	select {
	case <-turn:
		t.Fatal("the held flight went before a's reply, with a not stalled")
	case <-time.After(20 * time.Millisecond):
	}
	sa.stalled.Store(true)
	select {
	case <-turn:
	case <-time.After(5 * time.Second):
		t.Fatal("the held flight still waits behind a stalled flight")
	}
	held.Publish(nil)

	f, leader := g.Join([]byte("k"), &sender{}, 5)
	if !leader || f == a {
		t.Fatal("a reader joined a stalled flight")
	}
	f.Publish(nil)
	sb := &sender{seq: 12}
	b, _ := g.Join([]byte("k"), sb, 0)
	g.Join([]byte("k"), &sender{}, 0)
	sb.sent.Store(true)
	sb.stalled.Store(true)
	if c, leader := g.Join([]byte("k"), &sender{}, 20); !leader || c.prev != nil {
		t.Fatal("a new flight was held behind a stalled one")
	}
	a.Publish(nil)
	b.Publish(nil)
}
