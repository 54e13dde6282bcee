package upstream

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/socktest"
	"github.com/rproxy/rproxy/internal/sysio"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// Setup commands run on every new connection, pushes reach OnPush in stream
// order, and OnState follows the connection down and up again.
func TestSetupPushAndState(t *testing.T) {
	rs := redistest.Start(t)
	var mu sync.Mutex
	var pushes []string
	var states []bool
	_, get := trackingPool(t, rs.Addr, func(c *Config) {
		c.OnPush = func(b []byte) {
			mu.Lock()
			pushes = append(pushes, string(b))
			mu.Unlock()
		}
		c.OnState = func(up bool) {
			mu.Lock()
			states = append(states, up)
			mu.Unlock()
		}
	})
	rs.Do(t, "SET", "k", "v1")
	if r := get(); r != "$2\r\nv1\r\n" {
		t.Fatalf("GET = %q", r)
	}
	rs.Do(t, "SET", "k", "v2") // a tracked key changed by another client
	// The push is read before the reply to the next command.
	if r := get(); r != "$2\r\nv2\r\n" {
		t.Fatalf("GET = %q", r)
	}
	mu.Lock()
	got := append([]string(nil), pushes...)
	mu.Unlock()
	want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("pushes = %q, want [%q]", got, want)
	}
	// Kill the connection: OnState(false), then a reconnect with tracking on.
	list := string(rs.Do(t, "CLIENT", "LIST"))
	var id string
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "flags=t") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "id=") {
					id = f[3:]
				}
			}
		}
	}
	if id == "" {
		t.Fatalf("no tracking client in CLIENT LIST:\n%s", list)
	}
	rs.Do(t, "CLIENT", "KILL", "ID", id)
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		s := append([]bool(nil), states...)
		mu.Unlock()
		if len(s) >= 3 {
			if !s[0] || s[1] || !s[2] {
				t.Fatalf("states = %v, want [true false true]", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("states = %v after 5s", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(string(rs.Do(t, "CLIENT", "LIST")), "flags=t") {
		t.Fatal("reconnected connection does not track")
	}
}

// A failing Setup command keeps the pool down with the reason.
func TestSetupFailureKeepsPoolDown(t *testing.T) {
	rs := redistest.Start(t)
	p, err := NewPool(Config{Address: rs.Addr, Connections: 1, Protocol: 2, DialTimeout: time.Second,
		Timeout: time.Second, BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Setup: [][]byte{resp.AppendCommandString(nil, "NOSUCHCOMMAND")}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	time.Sleep(100 * time.Millisecond)
	if p.Ready() {
		t.Fatal("pool ready although its setup command fails")
	}
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "PING"))
	p.Do(b)
	if r := string(b.Reply(0)); !strings.Contains(r, "setup") || !strings.Contains(r, "unknown command") {
		t.Fatalf("reply %q does not say the setup failed", r)
	}
}

// TestCloseDoesNotWaitForTheReader: closing a shared connection does not
// wait for its reader. The reader frames replies inside the socket's read
// (sysio.Conn.ReadEach), and the runtime's close waits for that read to
// return: a closer holding the connection's lock (the writer after a failed
// write, closeWith) deadlocked with a reader about to take it. Here the
// reader is held in OnPush, inside the read, while the connection closes.
func TestCloseDoesNotWaitForTheReader(t *testing.T) {
	rs := redistest.Start(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	p, get := trackingPool(t, rs.Addr, func(c *Config) {
		c.OnPush = func([]byte) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
	})
	rs.Do(t, "SET", "k", "v1")
	if r := get(); r != "$2\r\nv1\r\n" {
		t.Fatalf("GET = %q", r)
	}
	rs.Do(t, "SET", "k", "v2") // the invalidation push holds the reader
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no invalidation push reached OnPush")
	}
	// A reply comes while the reader is held: the note it sets and the
	// shutdown's are one for the reader, which reads the reply past them.
	held := make(chan string, 1)
	go func() { held <- get() }()
	waitUnread(t, p.conns[0])
	closed := make(chan struct{})
	go func() {
		p.conns[0].closeWith("closed by the test")
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		releaseOnce.Do(func() { close(release) })
		t.Fatal("closing the connection waited for its reader")
	}
	releaseOnce.Do(func() { close(release) })
	if r := <-held; r != "$2\r\nv2\r\n" && !strings.HasPrefix(r, "-") {
		t.Fatalf("GET sent while the reader was held = %q, want v2 or an error", r)
	}
	// The connection is redialled and serves again.
	deadline := time.Now().Add(5 * time.Second)
	for r := get(); r != "$2\r\nv2\r\n"; r = get() {
		if time.Now().After(deadline) {
			t.Fatalf("GET after the close = %q, want v2 once redialled", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitUnread waits until c's socket holds unread bytes.
func waitUnread(t *testing.T, c *conn) {
	t.Helper()
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	sc, ok := nc.(*sysio.Conn)
	if !ok {
		t.Fatalf("the connection is a %T, not a *sysio.Conn", nc)
	}
	socktest.WaitQueued(t, socktest.FD(t, sc.Conn), 1)
}

// trackingPool is a RESP3 pool of one connection with client tracking on,
// pushes going to onPush, and get, a GET of "k" through it.
func trackingPool(t *testing.T, addr string, edit func(*Config)) (p *Pool, get func() string) {
	t.Helper()
	p = testPool(t, addr, 3, func(c *Config) {
		c.Connections = 1
		c.Setup = [][]byte{resp.AppendCommandString(nil, "CLIENT", "TRACKING", "ON")}
		edit(c)
	})
	return p, func() string {
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "GET", "k"))
		p.Do(b)
		return string(b.Reply(0))
	}
}
