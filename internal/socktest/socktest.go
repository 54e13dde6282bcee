// Package socktest gives socket read loops' tests a loopback TCP connection
// whose waits for readability are the test's to end (Lockstep), so a test
// can tell a read loop that waits for the poller from one that reads
// again, and can count its reads.
//
//	a, b := socktest.TCPPair(t)
//	raw := socktest.NewLockstep(socktest.FD(t, a))
//	// read a through raw (a syscall.RawConn); write b
//	<-raw.Waiting              // the loop asked to wait
//	b.Write(msg)
//	socktest.WaitQueued(t, raw.FD, len(msg))
//	raw.Ready <- struct{}{}    // and it reads on
package socktest

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Lockstep is a syscall.RawConn over the socket FD whose "poller" is the
// test: a Read callback that reports false waits until the test sends on
// Ready, after telling it so on Waiting. Control and Write call their
// callback directly (Write until it reports true).
type Lockstep struct {
	FD      int
	Waiting chan struct{}
	Ready   chan struct{}
}

// NewLockstep returns a Lockstep over fd.
func NewLockstep(fd int) *Lockstep {
	return &Lockstep{FD: fd, Waiting: make(chan struct{}), Ready: make(chan struct{})}
}

// Control calls f with the socket.
func (r *Lockstep) Control(f func(uintptr)) error { f(uintptr(r.FD)); return nil }

// Read calls f until it reports true, waiting for the test between calls.
func (r *Lockstep) Read(f func(uintptr) bool) error {
	for !f(uintptr(r.FD)) {
		r.Waiting <- struct{}{}
		<-r.Ready
	}
	return nil
}

// Write calls f until it reports true.
func (r *Lockstep) Write(f func(uintptr) bool) error {
	for !f(uintptr(r.FD)) {
	}
	return nil
}

// TCPPair returns both ends of a TCP connection on loopback, closed when
// the test ends.
func TCPPair(t testing.TB) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err = ln.Accept()
	if err != nil {
		dialed.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// FD returns the descriptor of c, a TCP connection (still c's to close).
func FD(t testing.TB, c net.Conn) int {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("socktest.FD of a %T", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	if err := rc.Control(func(f uintptr) { fd = f }); err != nil {
		t.Fatal(err)
	}
	return int(fd)
}

// WaitQueued waits until the socket fd holds at least n unread bytes: a
// loopback write may reach the other end's queue only after it returns.
func WaitQueued(t testing.TB, fd, n int) {
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
