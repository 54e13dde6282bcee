// Package sysio reads and writes non-blocking sockets with
// syscall.RawSyscall: without the scheduler's system-call bookkeeping.
//
// Through syscall.Read and syscall.Write, a call that lasts past one of
// sysmon's ticks (20 µs while the process is busy) may have its P taken
// and handed to another thread, and always does when no other P is idle
// (GOMAXPROCS 1); a loopback write lasts that long whenever it runs the
// receiver's TCP input. The goroutine then waits for a P again on a thread
// hop: context switches and latency on every slow call. A read or write of a non-blocking socket never blocks (it returns
// EAGAIN instead), so keeping the P through it costs the other goroutines
// at most the call's own few microseconds.
package sysio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// maxCall bounds the bytes one call copies, and so how long it keeps the
// P from other goroutines; larger reads and writes take several calls.
const maxCall = 256 << 10

// MaxCall is maxCall, for a caller that fills a larger buffer in several
// reads.
const MaxCall = maxCall

// Read is read(2) of fd into p (at most maxCall bytes): n >= 0 and a nil
// error, or -1 and the errno (EAGAIN when there is nothing to read). EINTR
// is retried.
func Read(fd uintptr, p []byte) (int, error) {
	n, err := call(syscall.SYS_READ, fd, p)
	if err == nil {
		afterRead(fd)
	}
	return n, err
}

// Write is write(2) of p to fd (at most maxCall bytes), as Read.
func Write(fd uintptr, p []byte) (int, error) {
	beforeWrite(fd)
	return call(syscall.SYS_WRITE, fd, p)
}

// MaxVec bounds the slices one Writev call takes.
const MaxVec = 64

// Writev is writev(2) of the slices iov points to, as Write: the caller
// keeps them within MaxCall bytes and MaxVec slices in all, so that one
// call holds the P no longer than one Write.
func Writev(fd uintptr, iov []syscall.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	beforeWrite(fd)
	return rawCall(syscall.SYS_WRITEV, fd, unsafe.Pointer(&iov[0]), len(iov))
}

func call(trap, fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > maxCall {
		p = p[:maxCall]
	}
	return rawCall(trap, fd, unsafe.Pointer(&p[0]), len(p))
}

// rawCall makes the system call trap(fd, ptr, n) without the scheduler's
// bookkeeping, retrying EINTR: n >= 0 and a nil error, or -1 and the errno.
func rawCall(trap, fd uintptr, ptr unsafe.Pointer, n int) (int, error) {
	for {
		r, _, e := syscall.RawSyscall(trap, fd, uintptr(ptr), uintptr(n))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(r), nil
	}
}

// Conn is a TCP connection whose Read and Write use Read and Write above,
// waiting in the runtime's poller (deadlines apply as usual) only when the
// socket has nothing to read or no room to write. Like any net.Conn it may
// be used from several goroutines at once.
type Conn struct {
	net.Conn
	rc syscall.RawConn
	w  Writer

	// Read's state for its RawConn callback, made once, under rmu.
	rmu  sync.Mutex
	rFn  func(uintptr) bool
	rBuf []byte
	rN   int
	rErr error
	inq  InqReader // ReadEach's reads
}

// Wrap returns nc as a *Conn when it is a TCP connection, else nc itself.
func Wrap(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &Conn{Conn: nc, rc: rc}
	c.inq.Enable(rc)
	c.w.Init(rc)
	c.rFn = c.read
	return c
}

// SyscallConn returns the socket's RawConn, as the TCP connection's does.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// Read reads what the socket holds, up to len(p), waiting until it holds
// something; io.EOF once the peer has closed.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rBuf, c.rN, c.rErr = p, 0, nil
	err := c.rc.Read(c.rFn)
	n, rerr := c.rN, c.rErr
	c.rBuf, c.rErr = nil, nil
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, OpError("read", c, err)
	case rerr != nil:
		return 0, OpError("read", c, os.NewSyscallError("read", rerr))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) read(fd uintptr) bool {
	n, err := Read(fd, c.rBuf)
	if err == syscall.EAGAIN {
		return false
	}
	c.rN, c.rErr = n, err
	return true
}

// ReadEach reads the socket into buf, over and over, and hands each read's
// bytes to each, until each or a read fails; it returns that error (io.EOF
// once the peer has closed). The bytes are each's to use until it returns.
//
// It reads once per time bytes come: RawConn.Read clears the poller's note
// that the socket became readable only before its first callback, and the
// runtime's poller is edge-triggered, so after a read that left the socket
// empty and open (InqReader) any byte or end that comes later sets the
// note, and ReadEach waits for it instead of reading again to find nothing.
// Read cannot do that: each Read is a new RawConn.Read, which must read
// once to see what came meanwhile.
//
// Close waits for ReadEach to return, and so for each: a goroutine that
// each may wait for should end the reading with Shutdown instead, and each
// should then stop the loop itself (see Shutdown).
func (c *Conn) ReadEach(buf []byte, each func(p []byte) error) error {
	if len(buf) == 0 {
		return errors.New("sysio: ReadEach with an empty buffer")
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var err error
	rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, unread, e := c.inq.Read(fd, buf)
			switch {
			case e == syscall.EAGAIN:
				return false
			case e != nil:
				err = OpError("read", c, os.NewSyscallError("read", e))
				return true
			case n == 0:
				err = io.EOF
				return true
			}
			if err = each(buf[:n]); err != nil {
				return true
			}
			if !unread {
				return false
			}
		}
	})
	if rerr != nil {
		return OpError("read", c, rerr)
	}
	return err
}

// Shutdown shuts the socket down both ways without closing it: the peer
// sees the connection end, and a read waiting in the poller wakes. Unlike
// Close it does not wait for a read under way to return. A ReadEach that
// then reads bytes which were still queued may wait again for ever (the
// shutdown's note came before that read, and TCP_INQ does not report this
// side's shutdown): its each should stop the loop once Shutdown is called.
func (c *Conn) Shutdown() error {
	if err := Shutdown(c.rc); err != nil {
		return OpError("shutdown", c, err)
	}
	return nil
}

// Shutdown is shutdown(2) of rc's socket, both ways (Conn.Shutdown; the
// proxy's client connections, which read their own way, use it directly).
func Shutdown(rc syscall.RawConn) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = syscall.Shutdown(int(fd), syscall.SHUT_RDWR)
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("shutdown", err)
	}
	return nil
}

// Write writes all of p, waiting while the socket has no room.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		return n, OpError("write", c, err)
	}
	return n, nil
}

// Writer is the write half of a Conn, for a connection type of its own
// (the proxy's client connections read their own way). Writes from several
// goroutines are serialised, each written whole.
type Writer struct {
	mu  sync.Mutex
	rc  syscall.RawConn
	fn  func(uintptr) bool // w.write, made once
	buf []byte
	n   int
	err error
}

// Init makes w write to rc's socket.
func (w *Writer) Init(rc syscall.RawConn) {
	w.rc, w.fn = rc, w.write
}

// Write writes all of p. Its error is RawConn's (the deadline, a closed
// socket) or the system call's, for the caller to wrap (OpError).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf, w.n, w.err = p, 0, nil
	err := w.rc.Write(w.fn)
	n, werr := w.n, w.err
	w.buf, w.err = nil, nil
	w.mu.Unlock()
	if err != nil {
		return n, err
	}
	if werr != nil {
		return n, os.NewSyscallError("write", werr)
	}
	return n, nil
}

func (w *Writer) write(fd uintptr) bool {
	for w.n < len(w.buf) {
		n, err := Write(fd, w.buf[w.n:])
		if err == syscall.EAGAIN {
			return false
		}
		if err != nil {
			w.err = err
			return true
		}
		w.n += n
	}
	return true
}

// OpError gives err the shape net.Conn's errors have: a *net.OpError
// naming op (RawConn's own errors say raw-read, raw-write).
func OpError(op string, c net.Conn, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		e := *oe
		e.Op = op
		return &e
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
