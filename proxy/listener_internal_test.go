package proxy

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// deadlineCounter is a net.Conn that counts SetReadDeadline calls.
type deadlineCounter struct {
	net.Conn
	sets atomic.Int64
}

func (c *deadlineCounter) SetReadDeadline(t time.Time) error {
	c.sets.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func idleConn(t *testing.T, idle time.Duration, clock func() time.Time) (*limitedConn, *deadlineCounter, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	counted := &deadlineCounter{Conn: server}
	var limits atomic.Pointer[Limits]
	limits.Store(&Limits{MaxClients: 1, MaxBulkLen: 1 << 20, MaxQueryBuffer: 1 << 20, IdleTimeout: idle})
	lc := &limitedConn{Conn: counted, limits: &limits, clock: clock}
	return lc, counted, client
}

// TestIdleDeadlineSetOncePerTimeout: a client that sends a command per read
// has its read deadline set once, not once per read.
func TestIdleDeadlineSetOncePerTimeout(t *testing.T) {
	now := time.Now()
	lc, counted, client := idleConn(t, time.Hour, func() time.Time { return now })
	go func() {
		for range 100 {
			client.Write([]byte("*1\r\n$4\r\nPING\r\n"))
		}
	}()
	buf := make([]byte, 64)
	for range 100 {
		if _, err := lc.Read(buf); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	if n := counted.sets.Load(); n != 1 {
		t.Fatalf("SetReadDeadline called %d times for 100 reads within the idle timeout, want 1", n)
	}
}

// TestStaleIdleDeadline: the deadline armed by an early read fires while a
// later read has waited less than the idle timeout; the read goes on. A
// read that waits the whole timeout ends with a timeout.
func TestStaleIdleDeadline(t *testing.T) {
	const idle = 150 * time.Millisecond
	lc, _, client := idleConn(t, idle, time.Now)
	buf := make([]byte, 64)
	go client.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	if _, err := lc.Read(buf); err != nil { // arms the deadline at about start+idle
		t.Fatal(err)
	}
	time.Sleep(idle / 2)
	// This read begins halfway to the first deadline; the client writes
	// after that deadline has passed, but before this read's own.
	go func() {
		time.Sleep(idle * 3 / 4)
		client.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	}()
	if _, err := lc.Read(buf); err != nil {
		t.Fatalf("a read that waited %v of a %v idle timeout failed: %v", idle*3/4, idle, err)
	}
	if lc.idleTimedOut.Load() {
		t.Fatal("the stale deadline was taken for an idle client")
	}
	start := time.Now()
	_, err := lc.Read(buf)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("an idle read ended with %v, want a timeout", err)
	}
	if waited := time.Since(start); waited < idle*9/10 {
		t.Fatalf("idle read timed out after %v, before the %v idle timeout", waited, idle)
	}
	if !lc.idleTimedOut.Load() {
		t.Fatal("the idle timeout was not recorded")
	}
}
