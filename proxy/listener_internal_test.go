package proxy

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/socktest"
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

// lockstepConn returns a limitedConn reading one end of a TCP connection on
// loopback through a socktest.Lockstep (with TCP_INQ on, as the server
// does), and the other end's descriptor, for the test to write.
func lockstepConn(t *testing.T) (*limitedConn, *socktest.Lockstep, int) {
	t.Helper()
	dialed, accepted := socktest.TCPPair(t)
	raw := socktest.NewLockstep(socktest.FD(t, accepted))
	lc, _, _ := idleConn(t, 0, time.Now)
	lc.raw = raw
	if !lc.inq.Enable(raw) {
		t.Fatal("TCP_INQ could not be turned on")
	}
	return lc, raw, socktest.FD(t, dialed)
}

// TestReadServesBatchesWithoutEmptyReads: with a step, the read loop serves
// each read's bytes inside the socket's read and, after a read that left
// the socket empty (TCP_INQ says so), waits for the poller instead of
// reading again (which would find nothing); a read that left bytes is
// followed by another at once, or the rest would wait for the client's
// next bytes. (The client's end after its bytes:
// TestHalfClosedClientSeesTheEnd.)
func TestReadServesBatchesWithoutEmptyReads(t *testing.T) {
	lc, raw, peer := lockstepConn(t)

	const batches = 20
	buf := make([]byte, 8)
	var bufs, puts int
	var got []string
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		lc.rb = funcBuffer{buf: func() []byte { bufs++; return buf }, put: func() { puts++ }}
		n, err := lc.readLazy(nil,
			func(n int) bool {
				got = append(got, string(buf[:n]))
				return len(got) < batches+3 // the last write comes in three reads
			})
		done <- result{n, err}
	}()
	for i := range batches + 1 {
		<-raw.Waiting // the read loop waits: the socket is empty
		msg := []byte("ping")
		if i == batches {
			msg = []byte("0123456789abcdef+") // two full buffers and one byte
		}
		if _, err := syscall.Write(peer, msg); err != nil {
			t.Fatal(err)
		}
		socktest.WaitQueued(t, raw.FD, len(msg))
		raw.Ready <- struct{}{}
	}
	var r result
	select {
	case r = <-done:
	case <-raw.Waiting:
		t.Fatalf("the read loop waited with bytes unread after %d batches: %q", len(got), got)
	}
	if r.n != 0 || r.err != nil {
		t.Fatalf("readLazy returned (%d, %v) after its step stopped, want (0, nil)", r.n, r.err)
	}
	if want := batches + 3; len(got) != want || got[batches] != "01234567" || got[batches+2] != "+" {
		t.Fatalf("step got %d reads, want %d ending in the three reads of the last write: %q", len(got), want, got)
	}
	// One read found the socket empty: the first, before anything came.
	if puts != 1 || bufs != len(got)+1 {
		t.Fatalf("%d reads for %d batches, %d of them empty; want %d, 1 empty", bufs, len(got), puts, len(got)+1)
	}
}

// TestNoStepAfterClose: bytes that come once Close has begun are not
// served. The runtime's close waits for the socket's read to return, so a
// step started then would keep a closer waiting, and deadlock one that
// holds a lock the step needs (the server's, which CLIENT LIST takes).
func TestNoStepAfterClose(t *testing.T) {
	lc, raw, peer := lockstepConn(t)
	buf := make([]byte, 64)
	steps := 0
	done := make(chan error, 1)
	go func() {
		lc.rb = funcBuffer{buf: func() []byte { return buf }, put: func() {}}
		_, err := lc.readLazy(nil, func(int) bool { steps++; return true })
		done <- err
	}()
	<-raw.Waiting
	if _, err := syscall.Write(peer, []byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	lc.Close() // before the read loop has seen the bytes
	raw.Ready <- struct{}{}
	select {
	case err := <-done:
		if err != io.EOF {
			t.Fatalf("the read after Close ended with %v, want io.EOF", err)
		}
	case <-raw.Waiting:
		t.Fatal("the read went on waiting after Close")
	}
	if steps != 0 {
		t.Fatalf("%d steps ran after Close", steps)
	}
}

// TestNoWaitAfterCloseInAStep: a Close during a step (another client's
// CLIENT KILL, the server's shutdown) only shuts the socket down, and the
// read loop then stops instead of waiting for the poller: the shutdown's
// note may have come before a read of bytes the client had sent, and no
// note follows such a read.
func TestNoWaitAfterCloseInAStep(t *testing.T) {
	lc, raw, peer := lockstepConn(t)
	buf := make([]byte, 64)
	steps := 0
	done := make(chan error, 1)
	go func() {
		lc.rb = funcBuffer{buf: func() []byte { return buf }, put: func() {}}
		_, err := lc.readLazy(nil, func(int) bool {
			steps++
			closed := make(chan struct{})
			go func() { lc.Close(); close(closed) }() // another goroutine's
			<-closed
			if _, err := syscall.Write(peer, []byte("*1\r\n$4\r\nPING\r\n")); err != nil {
				t.Error(err)
			}
			return true
		})
		done <- err
	}()
	<-raw.Waiting
	msg := []byte("*1\r\n$4\r\nPING\r\n")
	if _, err := syscall.Write(peer, msg); err != nil {
		t.Fatal(err)
	}
	socktest.WaitQueued(t, raw.FD, len(msg))
	raw.Ready <- struct{}{}
	select {
	case err := <-done:
		if err != nil && err != io.EOF {
			t.Fatalf("the read ended with %v, want (0, nil) or io.EOF", err)
		}
	case <-raw.Waiting:
		raw.Ready <- struct{}{} // let it end
		t.Fatal("the read waited for the poller after a Close during its step")
	}
	if steps != 1 {
		t.Fatalf("%d steps, want 1", steps)
	}
}

// TestWakeEndsTheRead: wake ends a read that waits for the client with
// errWake, with idle closing off as in stream mode, and closes nothing:
// the client's bytes are read next; a wake asked while no read waits ends
// the next read at once. Without it a session's goroutine, waiting for its
// client, could not subscribe again a shard channel whose slot moved.
func TestWakeEndsTheRead(t *testing.T) {
	lc, _, peer := idleConn(t, 0, time.Now)
	lc.exemptIdle()
	buf := make([]byte, 16)
	read := func() (int, error) { return lc.readLazy(buf, nil) }
	done := make(chan error, 1)
	go func() {
		_, err := read()
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lc.mu.Lock()
		reading := lc.reading
		lc.mu.Unlock()
		if reading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the read did not start")
		}
		time.Sleep(time.Millisecond)
	}
	lc.wake()
	select {
	case err := <-done:
		if err != errWake {
			t.Fatalf("woken read: %v, want errWake", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wake did not end the read")
	}
	go peer.Write([]byte("ping"))
	if n, err := read(); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read after the wake: %q %v, want the client's bytes", buf[:n], err)
	}
	lc.wake()
	if _, err := read(); err != errWake {
		t.Fatalf("read after a wake asked between reads: %v, want errWake", err)
	}
	if lc.idleTimedOut.Load() {
		t.Fatal("a wake counted as the idle timeout")
	}
}

// funcBuffer is a readBuffer made of two functions, for the read tests;
// held is what Holding reports.
type funcBuffer struct {
	buf  func() []byte
	put  func()
	held bool
}

func (f funcBuffer) ReadBufferFor(int) []byte { return f.buf() }
func (f funcBuffer) Release()                 { f.put() }
func (f funcBuffer) Holding() bool            { return f.held }
