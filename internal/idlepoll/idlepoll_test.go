//go:build linux

package idlepoll

import (
	"net"
	"testing"
	"time"
)

type chanWaiter chan struct{}

func (c chanWaiter) Ready() { c <- struct{}{} }

// pair returns a connected client and the server side's descriptor.
func pair(t *testing.T) (net.Conn, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); srv.Close() })
	rc, err := srv.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return cl, fd
}

func newPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// waitOnPair starts a Poller and a Wait on the server side of a new pair.
func waitOnPair(t *testing.T) (*Poller, net.Conn, int, chanWaiter, Token) {
	t.Helper()
	p := newPoller(t)
	cl, fd := pair(t)
	w := make(chanWaiter, 1)
	tok, err := p.Wait(fd, w)
	if err != nil {
		t.Fatal(err)
	}
	return p, cl, fd, w, tok
}

func expectReady(t *testing.T, w chanWaiter, want bool) {
	t.Helper()
	wait := 2 * time.Second
	if !want {
		wait = 100 * time.Millisecond // a report would come within microseconds
	}
	select {
	case <-w:
		if !want {
			t.Fatal("Ready called")
		}
	case <-time.After(wait):
		if want {
			t.Fatal("Ready not called")
		}
	}
}

func TestReadyWhenReadable(t *testing.T) {
	p, cl, fd, w, tok := waitOnPair(t)
	expectReady(t, w, false)
	if p.Len() != 1 {
		t.Fatalf("Len = %d, want 1", p.Len())
	}
	cl.Write([]byte("PING\r\n"))
	expectReady(t, w, true)
	if p.Cancel(fd, tok) {
		t.Fatal("Cancel after Ready reported the Wait pending")
	}
	if p.Len() != 0 {
		t.Fatalf("Len = %d after Ready, want 0", p.Len())
	}
	// Unread bytes: a new Wait reports at once.
	if _, err := p.Wait(fd, w); err != nil {
		t.Fatal(err)
	}
	expectReady(t, w, true)
}

func TestReadyWhenHungUp(t *testing.T) {
	_, cl, _, w, _ := waitOnPair(t)
	cl.Close()
	expectReady(t, w, true)
}

func TestCancel(t *testing.T) {
	p, cl, fd, w, tok := waitOnPair(t)
	if !p.Cancel(fd, tok) {
		t.Fatal("Cancel of a pending Wait reported false")
	}
	if p.Cancel(fd, tok) {
		t.Fatal("second Cancel reported true")
	}
	cl.Write([]byte("PING\r\n"))
	expectReady(t, w, false)
	// A stale token does not cancel a later Wait of the same descriptor.
	if _, err := p.Wait(fd, w); err != nil {
		t.Fatal(err)
	}
	if p.Cancel(fd, tok) {
		t.Fatal("a stale token cancelled a later Wait")
	}
	expectReady(t, w, true)
}

func TestWaitTwiceRefused(t *testing.T) {
	p, _, fd, w, _ := waitOnPair(t)
	if _, err := p.Wait(fd, w); err == nil {
		t.Fatal("a second Wait of one descriptor was accepted")
	}
}

func TestCloseEndsTheLoop(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	_, fd := pair(t)
	if _, err := p.Wait(fd, make(chanWaiter, 1)); err != nil {
		t.Fatal(err)
	}
	p.Close() // returns once the goroutine has ended
	p.Close()
	if _, err := p.Wait(fd, make(chanWaiter, 1)); err == nil {
		t.Fatal("Wait after Close accepted")
	}
}
