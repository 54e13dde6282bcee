package coalesce

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Sender is the leader's batch: whether its command has left for the
// upstream, the send sequence number it left with (valid once sent), and
// whether it waits behind a stalled upstream connection (a paused write:
// readers should not wait with it, as on Redis they would not).
type Sender interface {
	Sent() bool
	SentSeq() uint64
	Stalled() bool
}

// Window says which flights a reader may join.
type Window uint8

const (
	// Unsent: only flights whose command is not yet written upstream. Redis
	// runs the read after every joiner arrived, so each joiner gets a value
	// current during its own call.
	Unsent Window = iota
	// InFlight: also flights already written whose reply has not arrived,
	// if they were sent after the joiner's last acknowledged write (so it
	// still reads its own writes). More joins; the value may be up to one
	// round trip older than the joiner's call.
	InFlight
)

// slotCount is the size of the flight table. A key maps to one slot; when
// two keys with open flights share a slot, the newer flight is simply not
// joinable, which costs a saving, never correctness.
const slotCount = 1024

// Flight is one upstream read shared by its leader and joiners.
type Flight struct {
	group  *Group
	slot   *slot
	key    []byte
	sender Sender
	done   chan struct{}
	reply  []byte
	joins  int // joiners, under slot.mu
	// prev, when not nil, is the key's previous flight, sent and shared:
	// this one is held until prev's reply is in (see AwaitTurn).
	prev *Flight
}

type slot struct {
	mu      sync.Mutex
	f       *Flight       // the open flight registered here, if any
	flights atomic.Uint64 // flights led here (written under mu, read by the metric)
	held    atomic.Uint64 // of those, flights held behind the key's previous one
	_       [32]byte
}

// Group is the table of open flights. The common case on a spread keyspace,
// a flight nobody joins, allocates nothing: such flights are recycled.
type Group struct {
	window Window
	// seen, when not nil, is a filter of recently read key hashes: a key's
	// first read since the last Forget does not start a flight (a flight
	// costs a lock, a table slot and a publish, and on a spread keyspace
	// nobody joins).
	seen    []atomic.Uint64
	joins   atomic.Uint64
	slots   [slotCount]slot
	free    sync.Pool
	metrics *metrics
}

// seenBits sizes the filter: 2^18 bits (32 KB). Forgotten every few
// milliseconds, it holds the reads of that span: at a million reads per
// second and a 5 ms period, 5,000 marks set about 2% of the bits, so a cold
// key rarely passes for a warm one (which would cost a flight, never a
// wrong reply).
const seenBits = 1 << 18

// New returns an empty group with metrics on reg (nil: unregistered). With
// filter, only keys read at least twice since the last Forget start
// flights; the owner calls Forget every few milliseconds.
func New(window Window, filter bool, reg prometheus.Registerer) *Group {
	g := &Group{window: window}
	g.metrics = newMetrics(reg, g)
	if filter {
		g.seen = make([]atomic.Uint64, seenBits/64)
	}
	g.free.New = func() any { return &Flight{done: make(chan struct{})} }
	return g
}

// Join returns an open flight for key that the caller may join, or a new
// flight that the caller leads (leader true), whose command sender sends.
// With the filter, a key not read recently gets (nil, true): send it, with
// no flight. lastWrite is the send sequence at the caller's last
// acknowledged write (used by the InFlight window).
func (g *Group) Join(key []byte, sender Sender, lastWrite uint64) (f *Flight, leader bool) {
	return g.JoinHash(xxhash.Sum64(key), key, sender, lastWrite)
}

// JoinHash is Join with the key's hash computed by the caller: any 64-bit
// hash that is equal for equal keys and well mixed in every bit (callers
// that already hashed part of the key with xxhash reuse it).
func (g *Group) JoinHash(h uint64, key []byte, sender Sender, lastWrite uint64) (f *Flight, leader bool) {
	if !g.Seen(h) {
		return nil, true
	}
	s := &g.slots[h%slotCount]
	s.mu.Lock()
	if f := s.f; f != nil && g.joinable(f, lastWrite) && bytes.Equal(f.key, key) {
		f.joins++
		s.mu.Unlock()
		g.joins.Add(1)
		return f, false
	}
	f = g.free.Get().(*Flight)
	f.group, f.slot, f.sender, f.joins, f.reply, f.prev = g, s, sender, 0, nil, nil
	f.key = append(f.key[:0], key...)
	if p := s.f; p == nil || p.sender.Sent() {
		// The newer flight is the better one to join. If the one it
		// replaces is the same key's, sent and shared, the key is read
		// concurrently: this flight waits for that reply before it is
		// sent, and gathers joiners meanwhile. A flight nobody joined is
		// recycled at its publish, so only shared ones are waited on.
		if p != nil && p.joins > 0 && bytes.Equal(p.key, key) && !p.sender.Stalled() {
			f.prev = p
			s.held.Add(1)
		}
		s.f = f
	}
	s.flights.Add(1) // the slot's line is this core's already
	s.mu.Unlock()
	return f, true
}

// Joins returns how many reads have joined a flight so far. The upstream
// writer watches it while it gathers: a read that joins adds no bytes to
// the write queue, yet it shows that clients are still arriving.
func (g *Group) Joins() uint64 { return g.joins.Load() }

// Seen marks a read of the identity whose hash is h (as JoinHash takes it)
// and reports whether one was marked since the last Forget; without the
// filter it is always true. A caller may ask it first, before building the
// identity, and send a read it says no to without JoinHash (JoinHash would
// start no flight for it either); after a yes, JoinHash finds the mark.
func (g *Group) Seen(h uint64) bool {
	if g.seen == nil {
		return true
	}
	bit := (h >> 20) % seenBits // high bits: the slot index uses the low ones
	w, m := &g.seen[bit/64], uint64(1)<<(bit%64)
	if w.Load()&m != 0 {
		return true // a warm key's read writes nothing shared
	}
	return w.Or(m)&m != 0
}

// Forget clears the filter, so that only keys read again from now on start
// flights. Its period is the filter's notion of "recently": reads closer
// than that are the ones that may overlap. It races with Seen only by
// losing a mark: a missed saving, never a wrong reply.
func (g *Group) Forget() {
	for i := range g.seen {
		if g.seen[i].Load() != 0 {
			g.seen[i].Store(0)
		}
	}
}

func (g *Group) joinable(f *Flight, lastWrite uint64) bool {
	if !f.sender.Sent() {
		return true
	}
	return g.window == InFlight && f.sender.SentSeq() > lastWrite && !f.sender.Stalled()
}

// AwaitTurn returns once the key's previous flight, if this one is held
// behind it, has its reply. The leader calls it before sending its command,
// so while a shared flight of the key is on its way to Redis, the next one
// stays unsent and keeps taking joiners. Joiners of the held flight
// still get a value read after they joined. The wait cannot form a cycle:
// prev was already sent, and its leader publishes before it waits on
// anything.
//
// A previous flight stalled behind a paused write (Sender.Stalled) ends the
// wait: this one goes its own way, around the stall. With poll > 0 the wait
// looks again every poll; 0: it waits for the reply alone.
func (f *Flight) AwaitTurn(poll time.Duration) {
	p := f.prev
	if p == nil {
		return
	}
	f.prev = nil
	select {
	case <-p.done:
		return
	default:
	}
	if poll <= 0 {
		<-p.done
		return
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	for !p.sender.Stalled() {
		select {
		case <-p.done:
			return
		case <-t.C:
			t.Reset(poll)
		}
	}
}

// Publish gives the reply to every joiner; only the leader calls it, once,
// whatever the reply (an error reply fans out like any other). The leader
// must not use f afterwards.
func (f *Flight) Publish(reply []byte) {
	s := f.slot
	s.mu.Lock()
	if s.f == f {
		s.f = nil
	}
	joins := f.joins
	s.mu.Unlock()
	if joins == 0 {
		// Unregistered and never joined: no one else holds f.
		f.sender, f.prev = nil, nil
		f.group.free.Put(f)
		return
	}
	// The leader's buffer is reused, so joiners get a copy.
	f.reply = append([]byte(nil), reply...)
	close(f.done)
}

// Wait returns the leader's reply once published. Only joiners call it.
func (f *Flight) Wait() []byte {
	<-f.done
	return f.reply
}

// Open is how many flights are registered (for tests).
func (g *Group) Open() int {
	n := 0
	for i := range g.slots {
		g.slots[i].mu.Lock()
		if g.slots[i].f != nil {
			n++
		}
		g.slots[i].mu.Unlock()
	}
	return n
}

// metrics read the group's own counters when scraped, so that counting
// costs the read path no extra atomic on a shared line.
type metrics struct {
	flights prometheus.CounterFunc
	held    prometheus.CounterFunc
	joins   prometheus.CounterFunc
}

func newMetrics(reg prometheus.Registerer, g *Group) *metrics {
	// sumSlots adds one counter of every slot.
	sumSlots := func(counter func(*slot) *atomic.Uint64) func() float64 {
		return func() float64 {
			var n uint64
			for i := range g.slots {
				n += counter(&g.slots[i]).Load()
			}
			return float64(n)
		}
	}
	m := &metrics{
		flights: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "coalesce",
			Name: "flights_total", Help: "Reads sent upstream that others could join."},
			sumSlots(func(s *slot) *atomic.Uint64 { return &s.flights })),
		held: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "coalesce",
			Name: "held_flights_total", Help: "Flights held until the same key's previous shared flight had its reply."},
			sumSlots(func(s *slot) *atomic.Uint64 { return &s.held })),
		joins: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "coalesce",
			Name: "joins_total", Help: "Reads that joined a flight instead of going upstream (upstream calls saved)."}, func() float64 {
			return float64(g.joins.Load())
		}),
	}
	if reg != nil {
		reg.MustRegister(m.flights, m.held, m.joins)
	}
	return m
}
