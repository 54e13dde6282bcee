package coalesce

import (
	"bytes"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Sender is the leader's batch: whether its command has left for the
// upstream, and the send sequence number it left with (valid once sent).
type Sender interface {
	Sent() bool
	SentSeq() uint64
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
}

type slot struct {
	mu sync.Mutex
	f  *Flight // the open flight registered here, if any
	_  [48]byte
}

// Group is the table of open flights. The common case on a spread keyspace,
// a flight nobody joins, allocates nothing: such flights are recycled.
type Group struct {
	window  Window
	slots   [slotCount]slot
	free    sync.Pool
	metrics *metrics
}

// New returns an empty group with metrics on reg (nil: unregistered).
func New(window Window, reg prometheus.Registerer) *Group {
	g := &Group{window: window, metrics: newMetrics(reg)}
	g.free.New = func() any { return &Flight{done: make(chan struct{})} }
	return g
}

// Join returns an open flight for key that the caller may join, or a new
// flight that the caller leads (leader true), whose command sender sends.
// lastWrite is the send sequence at the caller's last acknowledged write
// (used by the InFlight window).
func (g *Group) Join(key []byte, sender Sender, lastWrite uint64) (f *Flight, leader bool) {
	s := &g.slots[xxhash.Sum64(key)%slotCount]
	s.mu.Lock()
	if f := s.f; f != nil && g.joinable(f, lastWrite) && bytes.Equal(f.key, key) {
		f.joins++
		s.mu.Unlock()
		g.metrics.joins.Inc()
		return f, false
	}
	f = g.free.Get().(*Flight)
	f.group, f.slot, f.sender, f.joins, f.reply = g, s, sender, 0, nil
	f.key = append(f.key[:0], key...)
	if s.f == nil || s.f.sender.Sent() {
		s.f = f // the newer flight is the better one to join
	}
	s.mu.Unlock()
	g.metrics.flights.Inc()
	return f, true
}

func (g *Group) joinable(f *Flight, lastWrite uint64) bool {
	if !f.sender.Sent() {
		return true
	}
	return g.window == InFlight && f.sender.SentSeq() > lastWrite
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
		f.sender = nil
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

type metrics struct {
	flights prometheus.Counter
	joins   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		flights: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "coalesce",
			Name: "flights_total", Help: "Reads sent upstream that others could join."}),
		joins: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "coalesce",
			Name: "joins_total", Help: "Reads that joined a flight instead of going upstream (upstream calls saved)."}),
	}
	if reg != nil {
		reg.MustRegister(m.flights, m.joins)
	}
	return m
}
