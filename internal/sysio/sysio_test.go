package sysio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/socktest"
)

// pair returns a wrapped client end and the server end of a TCP
// connection on loopback.
func pair(t testing.TB) (*Conn, net.Conn) {
	t.Helper()
	nc, srv := socktest.TCPPair(t)
	c, ok := Wrap(nc).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) did not wrap", nc)
	}
	return c, srv
}

// TestConnReadWrite: bytes go both ways whole, a write bigger than the
// socket buffers completes once the peer reads (the EAGAIN wait), and the
// peer's close reads as io.EOF.
func TestConnReadWrite(t *testing.T) {
	c, srv := pair(t)
	if _, err := srv.Write([]byte("+PONG\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MB: fills the buffers
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(srv, int64(len(big))))
		got <- b
	}()
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(big))
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("peer read %d bytes, not the %d written", len(b), len(big))
	}
	srv.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v; want 0, io.EOF", n, err)
	}
}

// TestConnDeadlinesAndClose: the read deadline ends a wait with the error
// net.Conn gives (os.ErrDeadlineExceeded, a *net.OpError "read"), and a
// closed connection reads and writes net.ErrClosed.
func TestConnDeadlinesAndClose(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 8))
	var oe *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("Read past the deadline = %v, want a read OpError wrapping os.ErrDeadlineExceeded", err)
	}
	c.Close()
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("Write after Close = %v, want a write OpError wrapping net.ErrClosed", err)
	}
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
	}
}

// TestWrapLeavesOthers: only TCP connections are wrapped.
func TestWrapLeavesOthers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(net.Pipe end) = %T, want it unchanged", got)
	}
}

// BenchmarkConnRoundTrip: one small write and its echo read, through the
// wrapped connection.
func BenchmarkConnRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(s, s)
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := Wrap(nc)
	defer c.Close()
	msg, buf := []byte("*1\r\n$4\r\nPING\r\n"), make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConnConcurrentWrites: writes from several goroutines each arrive
// whole, as through net.Conn.
func TestConnConcurrentWrites(t *testing.T) {
	c, srv := pair(t)
	const writers, each = 4, 200
	msg := func(w int) []byte { return bytes.Repeat([]byte{byte('a' + w)}, 1000) }
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for range each {
				if _, err := c.Write(msg(w)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	got := make([]byte, writers*each*1000)
	if _, err := io.ReadFull(srv, got); err != nil {
		t.Fatal(err)
	}
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < len(got); i += 1000 {
		if !bytes.Equal(got[i:i+1000], msg(int(got[i]-'a'))) {
			t.Fatalf("write at byte %d interleaved with another", i)
		}
	}
}

// TestShutdownDoesNotWaitForReadEach: Shutdown returns while each runs
// (Close would wait for it) and ReadEach then ends with io.EOF; the peer
// sees the connection end.
func TestShutdownDoesNotWaitForReadEach(t *testing.T) {
	c, srv := pair(t)
	inEach, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.ReadEach(make([]byte, 64), func([]byte) error {
			close(inEach)
			<-release
			return nil
		})
	}()
	if _, err := srv.Write([]byte("+OK\r\n")); err != nil {
		t.Fatal(err)
	}
	<-inEach
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown() }()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Shutdown waited for each to return")
	}
	close(release)
	if err := <-done; err != io.EOF {
		t.Fatalf("ReadEach after Shutdown = %v, want io.EOF", err)
	}
	if n, err := srv.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("the peer read %d, %v after Shutdown; want 0, io.EOF", n, err)
	}
}
