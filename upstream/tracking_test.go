package upstream

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	p := testPool(t, rs.Addr, 3, func(c *Config) {
		c.Connections = 1
		c.Setup = [][]byte{resp.AppendCommandString(nil, "CLIENT", "TRACKING", "ON")}
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
	get := func() string {
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "GET", "k"))
		p.Do(b)
		return string(b.Reply(0))
	}
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
	p := testPool(t, rs.Addr, 3, func(c *Config) {
		c.Connections = 1
		c.Setup = [][]byte{resp.AppendCommandString(nil, "CLIENT", "TRACKING", "ON")}
		c.OnPush = func([]byte) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
	})
	get := func() string {
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "GET", "k"))
		p.Do(b)
		return string(b.Reply(0))
	}
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
	sc, ok := c.nc.(syscall.Conn)
	c.mu.Unlock()
	if !ok {
		t.Fatal("the connection has no socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		var ierr error
		rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		if ierr != nil {
			t.Fatal(ierr)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no reply came to the socket")
		}
		time.Sleep(time.Millisecond)
	}
}
