package upstream

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/resp"
)

// metricValue reads a gauge's or a counter's value.
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

// orderFake is a Redis stand-in that holds every SET until release and
// then runs a SET of "new" before a SET of "old" however they came, as
// Redis, resumed after a SIGSTOP, may read another connection before the
// one it received a command on first. Until answerOthers, it holds the
// other commands too (the watcher's probe: a stopped Redis answers none).
type orderFake struct {
	*fakeRedis
	release    chan struct{}
	releaseOne sync.Once
	others     chan struct{}
	othersOne  sync.Once
	// othersReply answers the other commands ("+PONG" when empty).
	othersReply atomic.Pointer[string]
	newCame     chan struct{} // a SET of "new" reached the server
	newRan      chan struct{}

	mu  sync.Mutex
	val string
}

func startOrderFake(t *testing.T) *orderFake {
	o := &orderFake{release: make(chan struct{}), others: make(chan struct{}), newCame: make(chan struct{}), newRan: make(chan struct{})}
	o.fakeRedis = startFake(t, func(args [][]byte) string {
		if !strings.EqualFold(string(args[0]), "SET") {
			<-o.others
			if r := o.othersReply.Load(); r != nil {
				return *r
			}
			return "+PONG\r\n"
		}
		v := string(args[2])
		if v == "new" {
			close(o.newCame)
		}
		<-o.release
		if v == "old" {
			select {
			case <-o.newRan:
			case <-time.After(50 * time.Millisecond): // "new" never came: it waits for this one
			}
		}
		o.mu.Lock()
		o.val = v
		o.mu.Unlock()
		if v == "new" {
			close(o.newRan)
		}
		return "+OK\r\n"
	})
	t.Cleanup(o.resume) // before the fake closes: its goroutines end
	return o
}

// resume runs the SETs held, and answers every other command from now on.
func (o *orderFake) resume() {
	o.answerOthers()
	o.releaseOne.Do(func() { close(o.release) })
}

// answerOthers answers every command but SET from now on.
func (o *orderFake) answerOthers() { o.othersOne.Do(func() { close(o.others) }) }

func (o *orderFake) value() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.val
}

// A write that timed out is not overtaken by the client's next one: the
// connection it went on is drained, not closed, and the next write waits
// until Redis has answered it. Closing the connection left the old SET in
// the server's buffer, and it ran after the new one (the value read
// "old" after "new" was acknowledged).
func TestTimedOutWriteNotOvertakenByTheNextOne(t *testing.T) {
	o := startOrderFake(t)
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: o.ln.Addr().String(), Connections: 2, Protocol: 2, DialTimeout: time.Second,
		Timeout: 200 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitFor(t, "both connections up", func() bool { return p.conns[0].up() && p.conns[1].up() })
	connects := metricValue(t, m.connects.WithLabelValues("2"))

	if got := do(p, []string{"SET", "k", "old"})[0]; got != "-ERR upstream unavailable: no reply within 200ms\r\n" {
		t.Fatalf("SET old = %q, want the timeout", got)
	}
	if d := metricValue(t, m.draining.WithLabelValues("2")); d != 1 {
		t.Fatalf("draining_connections = %v after the timeout, want 1", d)
	}
	done := make(chan string, 1)
	go func() { done <- do(p, []string{"SET", "k", "new"})[0] }()
	waitFor(t, "the next SET waiting for the drain, or sent", func() bool {
		select {
		case <-o.newCame:
			return true
		default:
			return p.drainWaiters.Load() == 1
		}
	})
	o.resume()
	if got := <-done; got != "+OK\r\n" {
		t.Fatalf("SET new = %q", got)
	}
	if v := o.value(); v != "new" {
		t.Fatalf("the server holds %q after SET new was acknowledged: the write that timed out ran after it", v)
	}
	if n := metricValue(t, m.drains.WithLabelValues("2", "answered")); n != 1 {
		t.Errorf("drains_total{outcome=answered} = %v, want 1", n)
	}
	if d := metricValue(t, m.draining.WithLabelValues("2")); d != 0 {
		t.Errorf("draining_connections = %v once answered, want 0", d)
	}
	// The drained connection serves again: no reconnect.
	for i := range 4 {
		if got := do(p, []string{"PING"})[0]; got != "+PONG\r\n" {
			t.Fatalf("PING %d after the drain = %q", i, got)
		}
	}
	if n := metricValue(t, m.connects.WithLabelValues("2")) - connects; n != 0 {
		t.Errorf("%v reconnects: a drained connection is kept", n)
	}
}

// A drain whose replies never come ends after drainLimit timeouts: the
// connection is closed, the pool serves again on a new one, and sends
// that waited past a timeout meanwhile failed with an error saying why.
func TestDrainGivenUpAfterItsLimit(t *testing.T) {
	o := startOrderFake(t)
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: o.ln.Addr().String(), Connections: 1, Protocol: 2, DialTimeout: time.Second,
		Timeout: 50 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitReady(t, p)
	start := time.Now()
	if got := do(p, []string{"SET", "k", "old"})[0]; got != "-ERR upstream unavailable: no reply within 50ms\r\n" {
		t.Fatalf("SET old = %q, want the timeout", got)
	}
	if got := do(p, []string{"PING"})[0]; got != "-ERR upstream unavailable: no reply within 50ms to earlier commands that timed out\r\n" {
		t.Fatalf("PING while draining = %q", got)
	}
	o.answerOthers() // Redis answers again, but never the SET
	waitFor(t, "the drain given up", func() bool { return metricValue(t, m.drains.WithLabelValues("2", "closed")) == 1 })
	if d := time.Since(start); d < drainLimit*50*time.Millisecond {
		t.Errorf("drain given up after %v, before its limit of %v", d, drainLimit*50*time.Millisecond)
	}
	waitFor(t, "a PING answered on a new connection", func() bool { return do(p, []string{"PING"})[0] == "+PONG\r\n" })
	if d := metricValue(t, m.draining.WithLabelValues("2")); d != 0 {
		t.Errorf("draining_connections = %v, want 0", d)
	}
}

// A drained connection's end (Redis gone) opens the gate at once: what
// it had written can no longer run.
func TestDrainEndsWithTheConnection(t *testing.T) {
	o := startOrderFake(t)
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: o.ln.Addr().String(), Connections: 1, Protocol: 2, DialTimeout: time.Second,
		Timeout: 100 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitReady(t, p)
	if got := do(p, []string{"SET", "k", "old"})[0]; !strings.HasPrefix(got, "-ERR upstream unavailable: no reply within 100ms") {
		t.Fatalf("SET old = %q, want the timeout", got)
	}
	o.answerOthers()
	o.killConns()
	waitFor(t, "the drain ended with its connection", func() bool { return metricValue(t, m.drains.WithLabelValues("2", "closed")) == 1 })
	if d := metricValue(t, m.draining.WithLabelValues("2")); d != 0 {
		t.Errorf("draining_connections = %v, want 0", d)
	}
	waitFor(t, "a PING answered on a new connection", func() bool { return do(p, []string{"PING"})[0] == "+PONG\r\n" })
}

// A Redis that answers the watcher's probe while it holds a connection's
// command (a write pause rproxy cannot see without CLIENT LIST, or a
// connection lost on the way) runs: the connection is reset as before,
// and the pool's sends do not wait for it.
func TestHeldCommandOfARunningRedisResetsItsConnection(t *testing.T) {
	for _, pong := range []string{"+PONG\r\n", "-NOPERM this user has no permissions to run the 'ping' command\r\n"} {
		t.Run(pong[:5], func(t *testing.T) { testHeldCommandOfARunningRedis(t, pong) })
	}
}

// testHeldCommandOfARunningRedis: the probe's PING gets pong.
func testHeldCommandOfARunningRedis(t *testing.T, pong string) {
	o := startOrderFake(t)
	o.othersReply.Store(&pong)
	o.answerOthers()
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: o.ln.Addr().String(), Connections: 2, Protocol: 2, DialTimeout: time.Second,
		Timeout: 100 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitFor(t, "both connections up", func() bool { return p.conns[0].up() && p.conns[1].up() })
	if got := do(p, []string{"SET", "k", "old"})[0]; got != "-ERR upstream unavailable: no reply within 100ms\r\n" {
		t.Fatalf("SET old = %q, want the timeout", got)
	}
	if got := do(p, []string{"PING"})[0]; got != pong {
		t.Fatalf("PING right after = %q, want the server's %q", got, pong)
	}
	if d := metricValue(t, m.drains.WithLabelValues("2", "answered")) + metricValue(t, m.drains.WithLabelValues("2", "closed")); d != 0 {
		t.Errorf("%v drains, want none", d)
	}
	if n := metricValue(t, m.errors.WithLabelValues("2", "timeout")); n != 1 {
		t.Errorf("errors_total{kind=timeout} = %v, want 1", n)
	}
}

// The same for a dedicated connection (a pinned session: MULTI, WATCH):
// its Do that timed out hands the connection to a drain, and the next
// command, on a shared connection, waits until Redis has answered it.
func TestTimedOutDedicatedWriteNotOvertakenByTheNextOne(t *testing.T) {
	o := startOrderFake(t)
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: o.ln.Addr().String(), Connections: 1, Protocol: 2, DialTimeout: time.Second,
		Timeout: 200 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitReady(t, p)
	d, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "SET", "k", "old"))
	d.Do(b, 200*time.Millisecond)
	if got := string(b.Reply(0)); got != "-ERR upstream unavailable: no reply within 200ms\r\n" {
		t.Fatalf("SET old = %q, want the timeout", got)
	}
	if !d.Broken() {
		t.Fatal("a dedicated connection whose Do timed out is still lent as healthy")
	}
	p.Discard(d) // as the session does: the drain keeps the connection
	if v := metricValue(t, m.draining.WithLabelValues("2")); v != 1 {
		t.Fatalf("draining_connections = %v after the timeout, want 1", v)
	}
	done := make(chan string, 1)
	go func() { done <- do(p, []string{"SET", "k", "new"})[0] }()
	waitFor(t, "the next SET waiting for the drain, or sent", func() bool {
		select {
		case <-o.newCame:
			return true
		default:
			return p.drainWaiters.Load() == 1
		}
	})
	o.resume()
	if got := <-done; got != "+OK\r\n" {
		t.Fatalf("SET new = %q", got)
	}
	if v := o.value(); v != "new" {
		t.Fatalf("the server holds %q after SET new was acknowledged: the write that timed out ran after it", v)
	}
	waitFor(t, "the drain answered", func() bool { return metricValue(t, m.drains.WithLabelValues("2", "answered")) == 1 })
}
