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

	"github.com/rproxy/rproxy/internal/socktest"
)

// TestReadEachWaitsOnceEmpty: after a read that left the socket empty and
// open, ReadEach waits for the poller instead of reading again (the
// runtime's poller is edge-triggered, so bytes that come later wake it):
// each writes the next message while it runs, and ReadEach waits with that
// message unread. A read that left bytes behind is followed by another at
// once.
func TestReadEachWaitsOnceEmpty(t *testing.T) {
	tc, srv := pair(t) // TCP: TCP_INQ
	raw := socktest.NewLockstep(socktest.FD(t, tc.Conn))
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
	<-raw.Waiting // nothing came yet
	if _, err := srv.Write([]byte(msgs[0])); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"one"}, {"one", "two"}, {"one", "two", "01234567", "89abcdef", "+"}}
	for i := 0; ; i++ {
		if i < len(msgs) {
			socktest.WaitQueued(t, raw.FD, len(msgs[i]))
		}
		raw.Ready <- struct{}{}
		select {
		case err := <-done:
			if err != errStop || len(got) != 6 || i != len(want) {
				t.Fatalf("ReadEach = %v after reads %q and %d waits, want each's error after 6 reads and %d waits", err, got, i+1, len(want)+1)
			}
			return
		case <-raw.Waiting:
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
//
// Both with TCP_INQ and without it (another kernel or socket type), where
// ReadEach reads until a read finds nothing.
func TestReadEachSeesTheEndAfterData(t *testing.T) {
	for _, inq := range []bool{true, false} {
		t.Run(map[bool]string{true: "TCP_INQ", false: "without"}[inq], func(t *testing.T) {
			readEachSeesTheEndAfterData(t, inq)
		})
	}
}

func readEachSeesTheEndAfterData(t *testing.T, inq bool) {
	c, srv := pair(t)
	switch {
	case inq && !c.inq.on:
		t.Fatal("TCP_INQ is not on for a TCP connection")
	case !inq:
		c.inq = InqReader{} // off: ReadEach reads until a read finds nothing
	}
	if _, err := srv.Write([]byte("+OK\r\n")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	// Wait until the end has come (the socket is in CLOSE_WAIT), so that
	// the bytes and the end are both there before ReadEach's first read.
	fd := socktest.FD(t, c.Conn)
	for {
		info, err := unix.GetsockoptTCPInfo(fd, unix.SOL_TCP, unix.TCP_INFO)
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
