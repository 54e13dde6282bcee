//go:build linux && !386

package sysio

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lockstepRawConn is a syscall.RawConn over one end of a socket pair whose
// waits for readability are the test's to end: Read signals waiting each
// time its callback asks to wait, and calls it again once told ready.
type lockstepRawConn struct {
	fd      int
	waiting chan struct{}
	ready   chan struct{}
}

func (r *lockstepRawConn) Control(f func(uintptr)) error { f(uintptr(r.fd)); return nil }

func (r *lockstepRawConn) Read(f func(uintptr) bool) error {
	for !f(uintptr(r.fd)) {
		r.waiting <- struct{}{}
		<-r.ready
	}
	return nil
}

func (r *lockstepRawConn) Write(f func(uintptr) bool) error {
	for !f(uintptr(r.fd)) {
	}
	return nil
}

// TestReadEachWaitsOnceEmpty: after a read that left the socket empty and
// open, ReadEach waits for the poller instead of reading again (the
// runtime's poller is edge-triggered, so bytes that come later wake it):
// each writes the next message while it runs, and ReadEach waits with that
// message unread. A read that left bytes behind is followed by another at
// once.
func TestReadEachWaitsOnceEmpty(t *testing.T) {
	tc, srv := pair(t) // TCP: TCP_INQ
	var fd uintptr
	tc.rc.Control(func(f uintptr) { fd = f })
	raw := &lockstepRawConn{fd: int(fd), waiting: make(chan struct{}), ready: make(chan struct{})}
	c := &Conn{Conn: tc.Conn, rc: raw}
	if !c.inq.Enable(raw) {
		t.Fatal("TCP_INQ could not be turned on")
	}

	// The third message is two full buffers and a byte.
	msgs := []string{"one", "two", "0123456789abcdef+", "three"}
	var got []string
	read, sent := 0, 1 // bytes read; messages written
	errStop := errors.New("stop")
	done := make(chan error, 1)
	go func() {
		done <- c.ReadEach(make([]byte, 8), func(p []byte) error {
			got = append(got, string(p))
			read += len(p)
			if sent == len(msgs) {
				return errStop
			}
			if read == len(strings.Join(msgs[:sent], "")) {
				if _, err := srv.Write([]byte(msgs[sent])); err != nil {
					return err
				}
				sent++
			}
			return nil
		})
	}()
	<-raw.waiting // nothing came yet
	if _, err := srv.Write([]byte(msgs[0])); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"one"}, {"one", "two"}, {"one", "two", "01234567", "89abcdef", "+"}}
	for i := 0; ; i++ {
		if i < len(msgs) {
			waitQueued(t, raw.fd, len(msgs[i]))
		}
		raw.ready <- struct{}{}
		select {
		case err := <-done:
			if err != errStop || len(got) != 6 || i != len(want) {
				t.Fatalf("ReadEach = %v after reads %q and %d waits, want each's error after 6 reads and %d waits", err, got, i+1, len(want)+1)
			}
			return
		case <-raw.waiting:
		}
		if i >= len(want) || strings.Join(got, ",") != strings.Join(want[i], ",") {
			t.Fatalf("ReadEach waited after reads %q, with message %d written; want a wait after each message", got, sent)
		}
	}
}

// TestReadEachSeesTheEndAfterData: bytes and the peer's end that came
// together, before the read, end ReadEach with io.EOF once the bytes are
// handed over. The end sets the poller's note only once, before the read
// of the bytes: a ReadEach that waited after a short read waited for ever.
func TestReadEachSeesTheEndAfterData(t *testing.T) {
	c, srv := pair(t)
	if _, err := srv.Write([]byte("+OK\r\n")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	// Wait until the end has come (the socket is in CLOSE_WAIT), so that
	// the bytes and the end are both there before ReadEach's first read.
	var fd uintptr
	c.rc.Control(func(f uintptr) { fd = f })
	for {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == unix.BPF_TCP_CLOSE_WAIT {
			break
		}
		runtime.Gosched()
	}
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- c.ReadEach(make([]byte, 64), func(p []byte) error {
			got = append(got, string(p))
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != io.EOF || len(got) != 1 || got[0] != "+OK\r\n" {
			t.Fatalf("ReadEach = %v after reads %q, want io.EOF after \"+OK\\r\\n\"", err, got)
		}
	case <-time.After(5 * time.Second):
		c.Close()
		t.Fatalf("ReadEach still waits 5 s after the peer's end (read %q)", got)
	}
}

// waitQueued waits until the socket fd holds n unread bytes: a loopback
// write may reach the other end's queue only after it returns.
func waitQueued(t *testing.T, fd, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		q, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued after 5 s, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}
