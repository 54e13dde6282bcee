package upstream

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// fakeSentinelSetup is a fake Sentinel naming one of several fake
// servers as the master, each answering ROLE as master or replica and
// PING with its name.
type fakeSentinelSetup struct {
	mu      sync.Mutex
	master  string          // address the Sentinel names
	roles   map[string]bool // address -> answers ROLE as master
	sent    *fakeRedis
	servers map[string]*fakeRedis
	// hold, when set, is called by the next SENTINEL question after it
	// has read the master, before it answers (and is then cleared).
	hold    func()
	answers int // SENTINEL questions answered
}

func startFakeSentinel(t *testing.T, names ...string) (*fakeSentinelSetup, []string) {
	t.Helper()
	fs := &fakeSentinelSetup{roles: map[string]bool{}, servers: map[string]*fakeRedis{}}
	var addrs []string
	for _, name := range names {
		var addr string
		f := startFake(t, func(args [][]byte) string {
			switch strings.ToUpper(string(args[0])) {
			case "ROLE":
				fs.mu.Lock()
				master := fs.roles[addr]
				fs.mu.Unlock()
				if master {
					return "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
				}
				return "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:1\r\n$9\r\nconnected\r\n:0\r\n"
			case "PING":
				return "+" + name + "\r\n"
			}
			return "+OK\r\n"
		})
		addr = f.ln.Addr().String()
		fs.servers[addr] = f
		addrs = append(addrs, addr)
	}
	fs.sent = startFake(t, func(args [][]byte) string {
		switch strings.ToUpper(string(args[0])) {
		case "SENTINEL":
			fs.mu.Lock()
			host, port, _ := net.SplitHostPort(fs.master)
			hold := fs.hold
			fs.hold = nil
			fs.mu.Unlock()
			if hold != nil {
				hold()
			}
			fs.mu.Lock()
			fs.answers++
			fs.mu.Unlock()
			return fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
		case "SUBSCRIBE":
			return "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
		}
		return "-ERR unknown\r\n"
	})
	return fs, addrs
}

// startSentinelOnA starts a fake Sentinel over servers A and B, with A the
// master, and a Sentinel client of it that asks every check.
func startSentinelOnA(t *testing.T, check time.Duration) (*fakeSentinelSetup, []string, *Sentinel) {
	t.Helper()
	fs, addrs := startFakeSentinel(t, "A", "B")
	fs.promote(addrs[0])
	sen, err := NewSentinel(SentinelConfig{MasterName: "mymaster", Addresses: []string{fs.sent.ln.Addr().String()},
		Check: check}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	return fs, addrs, sen
}

func (fs *fakeSentinelSetup) promote(addr string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for a := range fs.roles {
		fs.roles[a] = false
	}
	fs.roles[addr] = true
	fs.master = addr
}

func ping(p *Pool) string {
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "PING"))
	p.Do(b)
	return string(b.Reply(0))
}

// TestSentinelPoolFollowsMaster: a pool with a Sentinel dials the master
// the Sentinel names, and when the Sentinel names another, its shared and
// dedicated connections move there; a server that answers ROLE as a
// replica is never used, even when named.
func TestSentinelPoolFollowsMaster(t *testing.T) {
	fs, addrs, sen := startSentinelOnA(t, 5*time.Millisecond)
	if got := sen.Master(); got != addrs[0] {
		t.Fatalf("master after start: %q, want %s", got, addrs[0])
	}
	p := testPool(t, "sentinel/mymaster", 2, func(c *Config) { c.Sentinel = sen })
	if got := ping(p); got != "+A\r\n" {
		t.Fatalf("PING: %q, want A", got)
	}
	d, err := p.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	fs.promote(addrs[1])
	waitFor(t, "the Sentinel names B", func() bool { return sen.Master() == addrs[1] })
	if sen.Failovers() != 1 {
		t.Errorf("failovers: %d, want 1", sen.Failovers())
	}
	waitFor(t, "the pool reaches B", func() bool { return ping(p) == "+B\r\n" })
	// masterChanged breaks the lent connections last, after closing the
	// shared ones, which may be up again on B by then (make test once
	// checked in between).
	waitFor(t, "a dedicated connection lent before the failover broken", d.Broken)
	p.Release(d)
	d2, err := p.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "PING"))
	d2.Do(b, time.Second)
	if got := string(b.Reply(0)); got != "+B\r\n" {
		t.Errorf("dedicated connection after the failover: %q, want B", got)
	}
	p.Release(d2)

	// Named, but a replica: ROLE keeps the pool off it.
	fs.mu.Lock()
	fs.master = addrs[0]
	fs.mu.Unlock()
	waitFor(t, "the Sentinel names A again", func() bool { return sen.Master() == addrs[0] })
	for range 3 {
		if got := ping(p); got == "+A\r\n" {
			t.Fatalf("PING reached A, which answers ROLE as a replica")
		}
	}
}

// TestSentinelDialRacingAChange: a connection whose dial began before the
// master changed is not kept (it may have reached the old master after
// the other connections were moved).
func TestSentinelDialRacingAChange(t *testing.T) {
	fs, addrs, sen := startSentinelOnA(t, time.Hour)
	// Only the first dial waits, whenever it comes: the pool dials in the
	// background, possibly before this goroutine reaches <-entered.
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	p, err := NewPool(Config{Address: "sentinel/mymaster", Connections: 1, Protocol: 2, DialTimeout: 5 * time.Second,
		Timeout: 5 * time.Second, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond, Sentinel: sen,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if first.CompareAndSwap(false, true) {
				close(entered)
				<-release
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	<-entered // the first dial is on its way to A
	// B becomes the master; A still says master (not demoted yet), so
	// only the change itself can tell the dial it is stale.
	fs.mu.Lock()
	fs.roles[addrs[1]], fs.master = true, addrs[1]
	fs.mu.Unlock()
	sen.set(addrs[1], "test")
	close(release)
	waitFor(t, "PING reaches B", func() bool {
		got := ping(p)
		if got == "+A\r\n" {
			t.Fatal("PING reached A: a dial that raced the change was kept")
		}
		return got == "+B\r\n"
	})
}

// TestSentinelStaleAnswerKeepsAChange: a +switch-master that arrives
// while a question to a Sentinel is out is not undone by the question's
// answer, which may predate it: the Sentinel is asked again instead.
func TestSentinelStaleAnswerKeepsAChange(t *testing.T) {
	fs, addrs, sen := startSentinelOnA(t, time.Hour)
	asked, release := make(chan struct{}), make(chan struct{})
	fs.mu.Lock()
	fs.hold = func() { close(asked); <-release }
	fs.mu.Unlock()
	sen.Check() // or the subscription's own check, whichever comes first
	<-asked     // the answer (A) is read, not sent
	fs.promote(addrs[1])
	sen.set(addrs[1], "test: +switch-master")
	fs.mu.Lock()
	answered := fs.answers
	fs.mu.Unlock()
	close(release)
	waitFor(t, "the Sentinel asked again after the stale answer", func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return fs.answers >= answered+2
	})
	waitFor(t, "the Sentinel names B", func() bool { return sen.Master() == addrs[1] })
	if got := sen.Failovers(); got != 1 {
		t.Errorf("%d failovers, want 1: the stale answer moved the pools back to A and again", got)
	}
}

// TestSentinelAuthenticates: with the Sentinels' own credentials set,
// every connection to a Sentinel sends AUTH user password before asking;
// a Sentinel that refuses them names no master, and the error says so
// without the secret.
func TestSentinelAuthenticates(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	sent := startFake(t, func(args [][]byte) string {
		mu.Lock()
		seen = append(seen, strings.ToUpper(string(args[0])))
		mu.Unlock()
		switch strings.ToUpper(string(args[0])) {
		case "AUTH":
			if len(args) == 3 && string(args[1]) == "sentineluser" && string(args[2]) == "s3cret" {
				return "+OK\r\n"
			}
			return "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
		case "SENTINEL":
			return "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n"
		}
		return "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
	})
	addr := sent.ln.Addr().String()
	sen, err := NewSentinel(SentinelConfig{MasterName: "m", Addresses: []string{addr}, Username: "sentineluser",
		Password: "s3cret", Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sen.Close()
	if sen.Master() != "127.0.0.1:6379" {
		t.Fatalf("master %q, want 127.0.0.1:6379", sen.Master())
	}
	mu.Lock()
	if len(seen) < 2 || seen[0] != "AUTH" || seen[1] != "SENTINEL" {
		t.Errorf("commands the Sentinel received: %v, want AUTH first", seen)
	}
	mu.Unlock()

	bad, err := NewSentinel(SentinelConfig{MasterName: "m", Addresses: []string{addr}, Username: "sentineluser",
		Password: "wrong", Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	if bad.Master() != "" || !strings.Contains(bad.LastError(), "AUTH to the Sentinel failed") || strings.Contains(bad.LastError(), "wrong") {
		t.Errorf("with a wrong password: master %q, error %q", bad.Master(), bad.LastError())
	}
}

// TestSentinelChangeDropsLiveConnections: a master change closes shared
// connections even when the old master is still up (a manual failover
// before it is demoted), so state kept per connection (the tier's
// tracking connection: OnState(false) empties the tier) goes with it.
func TestSentinelChangeDropsLiveConnections(t *testing.T) {
	fs, addrs, sen := startSentinelOnA(t, time.Hour)
	var downs atomic.Int32
	p := testPool(t, "sentinel/mymaster", 2, func(c *Config) {
		c.Sentinel = sen
		c.Connections = 1
		c.OnState = func(up bool) {
			if !up {
				downs.Add(1)
			}
		}
	})
	if got := ping(p); got != "+A\r\n" {
		t.Fatalf("PING: %q, want A", got)
	}
	fs.mu.Lock()
	fs.roles[addrs[1]], fs.master = true, addrs[1] // A still says master
	fs.mu.Unlock()
	sen.set(addrs[1], "test")
	waitFor(t, "the connection to A is dropped", func() bool { return downs.Load() == 1 })
	waitFor(t, "the pool reaches B", func() bool { return ping(p) == "+B\r\n" })
}

// TestSentinelReplicasHealthyOnly: SENTINEL REPLICAS is read into the
// replicas that are up and linked to the master; a ReplicaRouter sends
// only all-ReplicaRead batches to them.
func TestSentinelReplicasHealthyOnly(t *testing.T) {
	rep := startFake(t, func(args [][]byte) string { return "+replica\r\n" })
	master := startFake(t, func(args [][]byte) string {
		if strings.EqualFold(string(args[0]), "ROLE") {
			return "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
		}
		return "+master\r\n"
	})
	entry := func(addr, flags, link string) string {
		host, port, _ := net.SplitHostPort(addr)
		kv := []string{"name", addr, "ip", host, "port", port, "flags", flags, "master-link-status", link}
		out := fmt.Sprintf("*%d\r\n", len(kv))
		for _, s := range kv {
			out += fmt.Sprintf("$%d\r\n%s\r\n", len(s), s)
		}
		return out
	}
	sent := startFake(t, func(args [][]byte) string {
		if len(args) >= 2 && strings.EqualFold(string(args[1]), "REPLICAS") {
			return "*3\r\n" + entry(rep.ln.Addr().String(), "slave", "ok") +
				entry("127.0.0.1:1", "slave,s_down", "ok") + entry("127.0.0.1:2", "slave", "err")
		}
		if len(args) >= 2 && strings.EqualFold(string(args[1]), "GET-MASTER-ADDR-BY-NAME") {
			host, port, _ := net.SplitHostPort(master.ln.Addr().String())
			return fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
		}
		return "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
	})
	sen, err := NewSentinel(SentinelConfig{MasterName: "m", Addresses: []string{sent.ln.Addr().String()}, Replicas: true, Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	if got := sen.Replicas(); len(got) != 1 || got[0] != rep.ln.Addr().String() {
		t.Fatalf("replicas %v, want only the healthy %s", got, rep.ln.Addr())
	}
	cfg := Config{Address: "sentinel/m", Connections: 1, Protocol: 2, DialTimeout: time.Second, Timeout: time.Second,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	mp := testPool(t, "sentinel/m", 2, func(c *Config) { c.Sentinel = sen; c.Connections = 1 })
	r := NewReplicaRouter(mp, sen, cfg, nil, nil)
	t.Cleanup(r.Close)
	do := func(slots ...int) []string {
		b := NewBatch()
		for _, s := range slots {
			b.AddSlot(resp.AppendCommandString(nil, "PING"), s)
		}
		r.Do(b)
		var out []string
		for i := range slots {
			out = append(out, string(b.Reply(i)))
		}
		return out
	}
	waitFor(t, "a read reaches the replica", func() bool { return do(ReplicaRead)[0] == "+replica\r\n" })
	if got := do(ReplicaRead, SlotAny); got[0] != "+master\r\n" || got[1] != "+master\r\n" {
		t.Errorf("a batch with a command for the master: %q, want the master for both", got)
	}
	if got := do(SlotAny); got[0] != "+master\r\n" {
		t.Errorf("a plain command: %q, want the master", got)
	}
}

// TestSentinelFailoverHold: from a failover leader's
// +failover-state-send-slaveof-noone for the monitored master, a pool's
// sends and Acquires wait: at the +switch-master they go to the new
// master (never the old one, which would acknowledge a write and lose
// it); an abort of the promotion, or FailoverHold passing, sends them to
// the master as known. Events about another master name hold nothing.
func TestSentinelFailoverHold(t *testing.T) {
	fs, addrs := startFakeSentinel(t, "A", "B")
	fs.promote(addrs[0])
	sen, err := NewSentinel(SentinelConfig{MasterName: "mymaster", Addresses: []string{fs.sent.ln.Addr().String()},
		Check: time.Hour, FailoverHold: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	p := testPool(t, "sentinel/mymaster", 2, func(c *Config) { c.Sentinel = sen })
	if got := ping(p); got != "+A\r\n" {
		t.Fatalf("PING: %q, want A", got)
	}
	hostPort := func(addr string) string { h, port, _ := net.SplitHostPort(addr); return h + " " + port }
	promoting := "slave " + addrs[1] + " " + hostPort(addrs[1]) + " @ mymaster " + hostPort(addrs[0])
	from := "test"

	sen.event(eventPromoting, strings.Replace(promoting, "mymaster", "other", 1), from)
	if sen.hold.Load() != nil {
		t.Fatal("an event about another master holds commands")
	}

	// Held until the switch, then run on the new master.
	sen.event(eventPromoting, promoting, from)
	if !(sen.hold.Load() != nil) {
		t.Fatal("no hold after +failover-state-send-slaveof-noone")
	}
	got := make(chan string, 2)
	go func() { got <- ping(p) }()
	go func() {
		d, err := p.Acquire(t.Context())
		if err != nil {
			got <- err.Error()
			return
		}
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "PING"))
		d.Do(b, time.Second)
		p.Release(d)
		got <- string(b.Reply(0))
	}()
	waitFor(t, "both wait in the hold", func() bool { return sen.held.Load() == 2 })
	fs.promote(addrs[1])
	sen.event(eventSwitchMaster, "mymaster "+hostPort(addrs[0])+" "+hostPort(addrs[1]), from)
	for range 2 {
		select {
		case r := <-got:
			if r != "+B\r\n" {
				t.Errorf("a command held during the failover: %q, want the new master's +B", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a held command still waits after the switch")
		}
	}
	if (sen.hold.Load() != nil) || sen.holds.Load() != 1 || sen.holdsOut.Load() != 0 {
		t.Errorf("after the switch: holding %v, holds %d, expired %d; want false, 1, 0", (sen.hold.Load() != nil), sen.holds.Load(), sen.holdsOut.Load())
	}

	// An aborted promotion ends the hold at once.
	promotingA := "slave " + addrs[0] + " " + hostPort(addrs[0]) + " @ mymaster " + hostPort(addrs[1])
	sen.event(eventPromoting, promotingA, from)
	go func() { got <- ping(p) }()
	waitFor(t, "the PING waits in the hold", func() bool { return sen.held.Load() == 1 })
	sen.event(eventPromotionLost, "master mymaster "+hostPort(addrs[1]), from)
	if r := <-got; r != "+B\r\n" {
		t.Errorf("after the abort: %q, want +B", r)
	}

	// No switch and no abort: the hold ends after FailoverHold.
	sen.event(eventPromoting, promotingA, from)
	start := time.Now()
	if r := ping(p); r != "+B\r\n" {
		t.Errorf("after the hold expired: %q, want +B", r)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("a command waited %v in a hold of 300ms", waited)
	}
	if sen.holds.Load() != 3 || sen.holdsOut.Load() != 1 {
		t.Errorf("holds %d, expired %d; want 3, 1", sen.holds.Load(), sen.holdsOut.Load())
	}
}

// TestSentinelChangeWhileWaitingForADial: a command waiting for a redial
// to the old master (its connection ended, the dial hangs) when the
// Sentinel names a new one waits on for the new master's dial and gets
// its reply, rather than failing when the old master's wait ends; the
// hung dial, finished after the change, is not counted as the new
// master's.
func TestSentinelChangeWhileWaitingForADial(t *testing.T) {
	fs, addrs := startFakeSentinel(t, "A", "B")
	fs.promote(addrs[0])
	sen, err := NewSentinel(SentinelConfig{MasterName: "mymaster", Addresses: []string{fs.sent.ln.Addr().String()},
		Check: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	var (
		held    atomic.Bool
		release = make(chan struct{})
		skew    atomic.Int64
	)
	p := testPool(t, "sentinel/mymaster", 2, func(c *Config) {
		c.Sentinel, c.Connections, c.Timeout, c.BackoffMin, c.BackoffMax = sen, 1, 5*time.Second, time.Hour, time.Hour
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		c.Dial = gatedDial(func(addr string) bool { return addr == addrs[0] && held.Load() }, release)
	})
	if got := ping(p); got != "+A\r\n" {
		t.Fatalf("PING: %q, want A", got)
	}
	skew.Store(int64(quickRedialAfter))
	held.Store(true)
	fs.servers[addrs[0]].killConns()
	waitFor(t, "the connection lost", func() bool { return !p.conns[0].up() })
	got := make(chan string, 1)
	go func() { got <- ping(p) }()
	waitFor(t, "the command waits for the redial", func() bool { return p.dialWaiters.Load() == 1 })
	fs.promote(addrs[1])
	hostPort := func(addr string) string { h, port, _ := net.SplitHostPort(addr); return h + " " + port }
	sen.event(eventSwitchMaster, "mymaster "+hostPort(addrs[0])+" "+hostPort(addrs[1]), "test")
	close(release) // the dial to A ends, after the change: refused, and B is dialled
	select {
	case r := <-got:
		if r != "+B\r\n" {
			t.Fatalf("the command waiting across the change: %q, want the new master's +B", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the command still waits")
	}
}
