package coalesce

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Sender reports whether a flight's command has left for the upstream; after
// that, the flight takes no more joiners.
type Sender interface{ Sent() bool }

// Flight is one upstream read shared by its leader and joiners.
type Flight struct {
	group  *Group
	key    string
	sender Sender
	done   chan struct{}
	reply  []byte
	joins  int // joiners, under group.mu
}

// Group is the set of open flights.
type Group struct {
	mu      sync.Mutex
	flights map[string]*Flight
	metrics *metrics
}

// New returns an empty group with metrics on reg (nil: unregistered).
func New(reg prometheus.Registerer) *Group {
	return &Group{flights: make(map[string]*Flight), metrics: newMetrics(reg)}
}

// Join returns the open flight for key, or, if there is none, a new flight
// that the caller leads (leader true), whose command is sent by sender. The
// key is copied only when a flight is created.
func (g *Group) Join(key []byte, sender Sender) (f *Flight, leader bool) {
	g.mu.Lock()
	if f, ok := g.flights[string(key)]; ok && !f.sender.Sent() {
		f.joins++
		g.mu.Unlock()
		g.metrics.joins.Inc()
		return f, false
	}
	f = &Flight{group: g, key: string(key), sender: sender, done: make(chan struct{})}
	// A flight already sent stays until its leader publishes; the new one
	// replaces it for later joiners.
	g.flights[f.key] = f
	g.mu.Unlock()
	g.metrics.flights.Inc()
	return f, true
}

// Publish gives the reply to every joiner; only the leader calls it, once,
// whatever the reply (an error reply fans out like any other). The bytes are
// copied when there are joiners, since the leader's buffer is reused.
func (f *Flight) Publish(reply []byte) {
	g := f.group
	g.mu.Lock()
	if g.flights[f.key] == f {
		delete(g.flights, f.key)
	}
	joins := f.joins
	g.mu.Unlock()
	if joins > 0 {
		f.reply = append([]byte(nil), reply...)
	}
	close(f.done)
}

// Wait returns the leader's reply once published. Only joiners call it.
func (f *Flight) Wait() []byte {
	<-f.done
	return f.reply
}

// Open is how many flights are in progress (for tests and metrics).
func (g *Group) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.flights)
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
