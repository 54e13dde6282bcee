package upstream

import (
	"bytes"
	"context"
	"fmt"
	"net"
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

// pool starts a pool of conns connections to the stand-in, with timeout.
func (o *orderFake) pool(t *testing.T, conns int, timeout time.Duration) (*Pool, *Metrics) {
	t.Helper()
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: o.ln.Addr().String(), Connections: conns, Protocol: 2, DialTimeout: time.Second,
		Timeout: timeout, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, m
}

// checkNewWins waits until the SET of "new" whose reply done carries has
// reached the server, or waits in p for a drain; then resumes the server,
// and requires that SET acknowledged and its value the one kept: the SET
// of "old" that timed out did not run after it.
func (o *orderFake) checkNewWins(t *testing.T, p *Pool, done <-chan string) {
	t.Helper()
	waitFor(t, "the SET of new waiting for the drain, or sent", func() bool {
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
}

// setOldTimesOut sends the SET of "old", which the stand-in holds, and
// requires it to fail for the pool's timeout.
func setOldTimesOut(t *testing.T, p *Pool, timeout time.Duration) {
	t.Helper()
	want := fmt.Sprintf("-ERR upstream unavailable: no reply within %v\r\n", timeout)
	if got := do(p, []string{"SET", "k", "old"})[0]; got != want {
		t.Fatalf("SET old = %q, want %q", got, want)
	}
}

// acquire lends a dedicated connection of p.
func acquire(t *testing.T, p *Pool) *Dedicated {
	t.Helper()
	d, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
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
	p, m := o.pool(t, 2, 200*time.Millisecond)
	waitFor(t, "both connections up", func() bool { return p.conns[0].up() && p.conns[1].up() })
	connects := metricValue(t, m.connects.WithLabelValues("2"))

	setOldTimesOut(t, p, 200*time.Millisecond)
	if d := metricValue(t, m.draining.WithLabelValues("2")); d != 1 {
		t.Fatalf("draining_connections = %v after the timeout, want 1", d)
	}
	done := make(chan string, 1)
	go func() { done <- do(p, []string{"SET", "k", "new"})[0] }()
	o.checkNewWins(t, p, done)
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
	p, m := o.pool(t, 1, 50*time.Millisecond)
	waitReady(t, p)
	d := acquire(t, p)
	start := time.Now()
	setOldTimesOut(t, p, 50*time.Millisecond)
	if got := do(p, []string{"PING"})[0]; got != "-ERR upstream unavailable: no reply within 50ms to earlier commands that timed out\r\n" {
		t.Fatalf("PING while draining = %q", got)
	}
	// A lent connection's command that outwaits the drain fails the same
	// way, and the connection is given up (its session takes the error
	// for a reply).
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "PING"))
	d.Do(b, time.Second)
	if got := string(b.Reply(0)); got != "-ERR upstream unavailable: no reply within 50ms to earlier commands that timed out\r\n" || !d.Broken() {
		t.Fatalf("lent connection's PING while draining = %q, broken %v", got, d.Broken())
	}
	p.Discard(d)
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
	p, m := o.pool(t, 1, 100*time.Millisecond)
	waitReady(t, p)
	setOldTimesOut(t, p, 100*time.Millisecond)
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
	p, m := o.pool(t, 2, 100*time.Millisecond)
	waitFor(t, "both connections up", func() bool { return p.conns[0].up() && p.conns[1].up() })
	setOldTimesOut(t, p, 100*time.Millisecond)
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
	p, m := o.pool(t, 1, 200*time.Millisecond)
	waitReady(t, p)
	d := acquire(t, p)
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
	o.checkNewWins(t, p, done)
	waitFor(t, "the drain answered", func() bool { return metricValue(t, m.drains.WithLabelValues("2", "answered")) == 1 })
}

// stallingFake is a RESP3 Redis stand-in that answers ECHO with its
// argument, each reply preceded now and then by a push and written in two
// parts, and that stops answering anything (stop) until resume: a stopped
// Redis, met between commands or in the middle of a reply.
type stallingFake struct {
	*fakeRedis
	stopMu  sync.Mutex    // apart from the fakeRedis's own mu, which guards its connections
	stopped chan struct{} // nil while running; closed by resume
}

func startStallingFake(t *testing.T) *stallingFake {
	f := &stallingFake{}
	f.fakeRedis = startFakeServing(t, nil, f.serve)
	t.Cleanup(f.resume) // before the fake closes: its goroutines end
	return f
}

func (f *stallingFake) stop() {
	f.stopMu.Lock()
	if f.stopped == nil {
		f.stopped = make(chan struct{})
	}
	f.stopMu.Unlock()
}

func (f *stallingFake) resume() {
	f.stopMu.Lock()
	if f.stopped != nil {
		close(f.stopped)
		f.stopped = nil
	}
	f.stopMu.Unlock()
}

// wait returns once the server runs.
func (f *stallingFake) wait() {
	f.stopMu.Lock()
	ch := f.stopped
	f.stopMu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (f *stallingFake) serve(c net.Conn) {
	var rd resp.RequestParser
	var cmds []resp.Command
	for n := 0; ; n++ {
		k, err := c.Read(rd.ReadBuffer())
		if err != nil {
			return
		}
		if cmds, err = rd.Parse(k, resp.RequestLimits{}, cmds[:0]); err != nil {
			return
		}
		for _, cmd := range cmds {
			f.wait()
			var out []byte
			switch strings.ToUpper(string(cmd.Args[0])) {
			case "HELLO":
				out = []byte("%1\r\n+proto\r\n:3\r\n")
			case "ECHO":
				if n%3 == 0 {
					out = append(out, ">2\r\n+message\r\n+unasked\r\n"...)
				}
				out = resp.AppendBulk(out, cmd.Args[1])
			default:
				out = []byte("+PONG\r\n")
			}
			half := len(out) / 2
			if _, err := c.Write(out[:half]); err != nil {
				return
			}
			f.wait() // a stop may fall in the middle of a reply
			if _, err := c.Write(out[half:]); err != nil {
				return
			}
		}
	}
}

// Drains never hand a reply to the wrong batch: clients pipelining ECHOs
// of tokens of their own through a server that stops now and then, for
// longer than the timeout (so that connections drain), get either their
// own tokens, in order, or the upstream-unavailable error, never another
// batch's reply. A drain that dropped one reply too few would answer the
// next batch with the old one's.
func TestDrainsNeverMisattributeReplies(t *testing.T) {
	f := startStallingFake(t)
	m := NewMetrics(nil)
	p, err := NewPool(Config{Address: f.ln.Addr().String(), Connections: 2, Protocol: 3, DialTimeout: time.Second,
		Timeout: 60 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitReady(t, p)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var okReplies, failed atomic.Int64
	for client := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := NewBatch()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				b.Reset()
				n := 1 + (seq+client)%4
				for i := range n {
					b.Add(resp.AppendCommandString(nil, "ECHO", fmt.Sprintf("c%d-%d-%d", client, seq, i)))
				}
				p.Do(b)
				for i := range n {
					got, want := string(b.Reply(i)), string(resp.AppendBulk(nil, []byte(fmt.Sprintf("c%d-%d-%d", client, seq, i))))
					switch {
					case got == want:
						okReplies.Add(1)
					case strings.HasPrefix(got, "-ERR upstream unavailable"):
						failed.Add(1)
					default:
						t.Errorf("client %d batch %d reply %d = %q, want %q", client, seq, i, got, want)
						return
					}
				}
			}
		}()
	}
	for round := range 6 {
		time.Sleep(time.Duration(20+round*7) * time.Millisecond)
		f.stop()
		time.Sleep(time.Duration(90+round*25) * time.Millisecond) // past the timeout and the probe
		f.resume()
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	answered := metricValue(t, m.drains.WithLabelValues("3", "answered"))
	t.Logf("%d replies ok, %d failed, %v drains answered, %v closed, %v timeouts", okReplies.Load(), failed.Load(), answered, metricValue(t, m.drains.WithLabelValues("3", "closed")), metricValue(t, m.errors.WithLabelValues("3", "timeout")))
	if answered == 0 || failed.Load() == 0 || okReplies.Load() == 0 {
		t.Fatalf("the stops were not exercised: %d ok, %d failed, %v drains answered", okReplies.Load(), failed.Load(), answered)
	}
	// Every drain ends answered (the server always resumes within the
	// limit), and no connection meets a reply it did not expect (a stray
	// one resets it: a drain that dropped too few).
	if closed := metricValue(t, m.drains.WithLabelValues("3", "closed")); closed != 0 {
		t.Errorf("%v drains closed, want every one answered", closed)
	}
	if stray := metricValue(t, m.errors.WithLabelValues("3", "read")); stray != 0 {
		t.Errorf("%v connections reset by a read error (a stray reply), want none", stray)
	}
}

// A session's connection lent before a drain (a tracked one it kept, a
// WATCH) waits for the drain too: its next command must not overtake the
// write that timed out on a shared connection.
func TestLentConnectionWaitsForADrain(t *testing.T) {
	o := startOrderFake(t)
	p, _ := o.pool(t, 1, 200*time.Millisecond)
	waitReady(t, p)
	d := acquire(t, p)
	t.Cleanup(func() { p.Discard(d) })
	setOldTimesOut(t, p, 200*time.Millisecond)
	done := make(chan string, 1)
	go func() {
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "SET", "k", "new"))
		d.Do(b, time.Second)
		done <- string(b.Reply(0))
	}()
	o.checkNewWins(t, p, done)
	if d.Broken() {
		t.Error("the lent connection broke")
	}
}

// TestDrainRecallsBorrowedCommands: a large command is written to Redis
// from where its caller holds it (writeQueue borrows it). When its batch
// is failed by a drain while Redis reads nothing, the caller may change
// those bytes at once, as Do's contract allows, and Redis, once it reads
// again, still gets the command as it was sent.
func TestDrainRecallsBorrowedCommands(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{})
	got := make(chan []byte, 1)
	f := startFake(t, func(args [][]byte) string {
		if !strings.EqualFold(string(args[0]), "SET") {
			<-release // the watcher's probe: a stopped Redis answers none, so the connection drains
			return "+PONG\r\n"
		}
		switch string(args[1]) {
		case "hold":
			close(held)
			<-release // reads nothing meanwhile
		case "big":
			got <- bytes.Clone(args[2])
		}
		return "+OK\r\n"
	})
	var releaseOnce sync.Once
	resume := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(resume)
	p, err := NewPool(Config{Address: f.ln.Addr().String(), Connections: 1, Protocol: 2, DialTimeout: time.Second,
		Timeout: time.Second, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, NewMetrics(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)

	hold := NewBatch()
	hold.Add(resp.AppendCommandString(nil, "SET", "hold", "x"))
	holdDone := make(chan struct{})
	go func() {
		defer close(holdDone)
		p.Do(hold)
	}()
	<-held
	// Far more than the sockets buffer: the writer is inside this command
	// when the drain fails it.
	value := bytes.Repeat([]byte("v"), 16<<20)
	raw := resp.AppendCommand(nil, []byte("SET"), []byte("big"), value)
	big := NewBatch()
	big.Add(raw)
	p.Do(big)
	<-holdDone
	if r := big.Reply(0); !bytes.HasPrefix(r, []byte("-ERR upstream unavailable")) {
		t.Fatalf("the large SET, written in part while Redis read nothing, got %q; want the drain's error", r)
	}
	clear(raw) // the caller's again
	resume()
	select {
	case v := <-got:
		if !bytes.Equal(v, value) {
			t.Fatalf("Redis got a value of %d bytes, not the one sent (%d bytes of %q)", len(v), len(value), value[:1])
		}
	case <-time.After(20 * time.Second): // the drain ends at 10 timeouts, closing the connection
		t.Fatal("Redis never got the large SET whole: its bytes were changed under the writer")
	}
}
