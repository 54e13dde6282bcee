package upstream

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/resp"
)

// waitFor polls an observable condition (a counter of the code under
// test), failing after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// gatedDial dials normally, except that dials to gated wait until release
// is closed.
func gatedDial(gated func(addr string) bool, release <-chan struct{}) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if gated(addr) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return d.DialContext(ctx, network, addr)
	}
}

// TestPoolFirstCommandWaitsForDial: a command sent while the pool's first
// dial is still under way waits for it and gets Redis's reply, not
// "upstream unavailable: connecting"; once the first dial has failed, a
// command fails at once with the dial's error.
func TestPoolFirstCommandWaitsForDial(t *testing.T) {
	f := startFake(t, func([][]byte) string { return "+PONG\r\n" })
	release := make(chan struct{})
	p, err := NewPool(Config{Address: f.ln.Addr().String(), Connections: 2, Protocol: 2, DialTimeout: 5 * time.Second,
		Timeout: 5 * time.Second, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Dial: gatedDial(func(string) bool { return true }, release)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	got := make(chan string, 1)
	go func() {
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "PING"))
		p.Do(b)
		got <- string(b.Reply(0))
	}()
	waitFor(t, "the command waits for the first dial", func() bool { return p.dialWaiters.Load() == 1 })
	close(release)
	if r := <-got; r != "+PONG\r\n" {
		t.Fatalf("first command: %q, want +PONG", r)
	}

	// A server that is not there: the first dial fails, and so does the
	// command, with the dial's error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	down, err := NewPool(Config{Address: addr, Connections: 1, Protocol: 2, DialTimeout: time.Second,
		Timeout: 5 * time.Second, BackoffMin: time.Second, BackoffMax: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "PING"))
	down.Do(b)
	if r := string(b.Reply(0)); !strings.HasPrefix(r, "-ERR upstream unavailable: ") || strings.Contains(r, "connecting") {
		t.Fatalf("command to a server that is not there: %q, want the dial's error", r)
	}
}

// TestRouterMovedToNewNodeWaitsForItsDial: a MOVED to a node rproxy has
// never connected to (a master just added) waits for that node's first
// dial instead of failing with "upstream unavailable: connecting".
func TestRouterMovedToNewNodeWaitsForItsDial(t *testing.T) {
	fc := startFakeCluster(t)
	added := startFake(t, func(args [][]byte) string { return "$1\r\nD\r\n" })
	addedAddr := added.ln.Addr().String()
	release := make(chan struct{})
	c, err := NewCluster(Config{Connections: 1, DialTimeout: 5 * time.Second, Timeout: 5 * time.Second,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Dial: gatedDial(func(a string) bool { return a == addedAddr }, release)},
		ClusterConfig{Seeds: []string{fc.nodes[0].ln.Addr().String()}, Refresh: time.Hour, Protocols: []int{2}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := c.Router(2)
	waitFor(t, "cluster ready", r.Ready)
	k := []byte("moving")
	fc.mu.Lock()
	fc.movedAddr[Slot(k)] = addedAddr
	fc.mu.Unlock()
	got := make(chan string, 1)
	go func() {
		b := NewBatch()
		b.AddSlot(resp.AppendCommand(nil, []byte("GET"), k), Slot(k))
		r.Do(b)
		got <- string(b.Reply(0))
	}()
	waitFor(t, "the redirected command waits for the new node's dial", func() bool {
		c.mu.Lock()
		i, ok := c.byAddr[addedAddr]
		c.mu.Unlock()
		return ok && (*c.nodes.Load())[i].pools[2].dialWaiters.Load() == 1
	})
	close(release)
	if rep := <-got; rep != "$1\r\nD\r\n" {
		t.Fatalf("GET redirected to the new node: %q, want its value", rep)
	}
}

// TestRouterHidesEndlessRedirects: when redirects go on past MaxRedirects
// the client gets TRYAGAIN, never the MOVED naming a real node (clients
// see rproxy as the only node).
func TestRouterHidesEndlessRedirects(t *testing.T) {
	fc := startFakeCluster(t)
	c, m := testCluster(t, fc)
	k := []byte("pingpong")
	slot := Slot(k)
	// The slot's owner sends it to another node, which sends it back.
	fc.mu.Lock()
	fc.moved[slot] = (fc.owner(slot) + 1) % 3
	fc.mu.Unlock()
	back := startFake(t, func(args [][]byte) string {
		return "-MOVED " + strconv.Itoa(slot) + " " + fc.nodes[fc.owner(slot)].ln.Addr().String() + "\r\n"
	})
	fc.mu.Lock()
	fc.movedAddr[slot] = back.ln.Addr().String()
	fc.mu.Unlock()
	b := NewBatch()
	b.AddSlot(resp.AppendCommand(nil, []byte("GET"), k), slot)
	b.AddSlot(resp.AppendCommand(nil, []byte("GET"), []byte("other")), Slot([]byte("other")))
	c.Router(2).Do(b)
	if r := string(b.Reply(0)); !strings.HasPrefix(r, "-TRYAGAIN rproxy: slot "+strconv.Itoa(slot)+" ") {
		t.Fatalf("endlessly redirected GET: %q, want TRYAGAIN", r)
	}
	if r := string(b.Reply(1)); strings.HasPrefix(r, "-") {
		t.Fatalf("the other command of the batch: %q", r)
	}
	var mv dto.Metric
	if err := m.redirects.WithLabelValues("moved").Write(&mv); err != nil {
		t.Fatal(err)
	}
	if moved := mv.GetCounter().GetValue(); moved < float64(c.cfg.MaxRedirects) {
		t.Errorf("%v MOVED followed, want at least MaxRedirects (%d)", moved, c.cfg.MaxRedirects)
	}
}

// TestPoolRedialsALivedConnectionAtOnce: when Redis closes connections
// that lived a while (its idle timeout, CLIENT KILL, a restart), they are
// dialled again at once, and a command sent while none is up waits for
// those dials and gets Redis's reply, not "upstream unavailable: read:
// EOF" for the reconnect backoff (Redis's timeout 1 with a command every
// 1-2 s: 1 in 12 failed). A connection that ends sooner than
// quickRedialAfter still waits the backoff.
func TestPoolRedialsALivedConnectionAtOnce(t *testing.T) {
	f := startFake(t, func([][]byte) string { return "+PONG\r\n" })
	var (
		held    atomic.Bool
		release = make(chan struct{})
		skew    atomic.Int64 // added to the pool's clock
	)
	p, err := NewPool(Config{Address: f.ln.Addr().String(), Connections: 2, Protocol: 2, DialTimeout: 5 * time.Second,
		Timeout: 5 * time.Second, BackoffMin: time.Hour, BackoffMax: time.Hour,
		Now:  func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
		Dial: gatedDial(func(string) bool { return held.Load() }, release)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	// Both up, and both accepted by the server, which kills only those it
	// has accepted: a connection up after the skew would not have lived
	// long enough, and one accepted after the kill would live on.
	waitFor(t, "both connections up and accepted", func() bool { return p.conns[0].up() && p.conns[1].up() && f.accepted() == 2 })
	skew.Store(int64(quickRedialAfter)) // the connections have lived long enough
	held.Store(true)
	f.killConns()
	waitFor(t, "both connections lost", func() bool { return !p.conns[0].up() && !p.conns[1].up() })
	got := make(chan string, 1)
	go func() { got <- ping(p) }()
	waitFor(t, "the command waits for the redial", func() bool { return p.dialWaiters.Load() == 1 })
	close(release)
	select {
	case r := <-got:
		if r != "+PONG\r\n" {
			t.Fatalf("command sent while the connections redialled: %q, want +PONG", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the command still waits after the redial")
	}

	// Connections that end at once after their dial wait the backoff (an
	// hour here): a command then fails at once.
	skew.Store(0)
	waitFor(t, "both connections up and accepted", func() bool { return p.conns[0].up() && p.conns[1].up() && f.accepted() == 2 })
	f.killConns()
	waitFor(t, "both connections lost", func() bool { return !p.conns[0].up() && !p.conns[1].up() })
	if r := ping(p); !strings.HasPrefix(r, "-ERR upstream unavailable") {
		t.Fatalf("command while connections that just dialled are down: %q, want upstream unavailable", r)
	}
}
