//go:build linux && !386

package sysio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inqSpace is the control buffer for one TCP_CM_INQ message (an int).
var inqSpace = syscall.CmsgSpace(4)

// InqReader reads a TCP socket and tells whether a next read could find
// anything, so that a loop reading the socket inside one RawConn.Read can
// wait for the runtime's poller instead of making a read that finds
// nothing. A short read cannot tell it: the peer's end (FIN) that came with
// or just before the last bytes sets the poller's note before that read,
// and no note follows, so a loop that waited after a short read would wait
// for ever on a client that sent its commands and hung up. With TCP_INQ
// (Linux 4.18) the kernel reports with each read the bytes it still holds,
// and 1 when it holds none but the peer's end. Without it (an older kernel,
// another socket type) every read is followed by another until one finds
// nothing.
//
// Not reported: a reset (RST) that came with the last bytes, which the next
// write to the socket fails on, and this side's own shutdown, which its
// caller knows of (upstream's conn stops its loop itself).
//
// An InqReader is for one goroutine at a time.
type InqReader struct {
	on  bool
	msg syscall.Msghdr
	iov syscall.Iovec
	oob [32]byte // at least inqSpace
}

// Enable turns TCP_INQ on for rc's socket and reports whether it took.
func (r *InqReader) Enable(rc syscall.RawConn) bool {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ, 1)
	}); cerr != nil || err != nil {
		return false
	}
	r.on = true
	return true
}

// Read is Read above (read(2) of at most maxCall bytes, EAGAIN when there
// is nothing), plus unread: false when the socket held nothing else and
// was not at its end after this read, so that only a later arrival, which
// sets the poller's note, can make a next read find anything.
func (r *InqReader) Read(fd uintptr, p []byte) (n int, unread bool, err error) {
	if !r.on || len(p) == 0 {
		n, err = Read(fd, p)
		return n, true, err
	}
	if len(p) > maxCall {
		p = p[:maxCall]
	}
	r.iov.Base = &p[0]
	r.iov.SetLen(len(p))
	r.msg.Iov = &r.iov
	r.msg.Iovlen = 1
	r.msg.Control = &r.oob[0]
	for {
		r.msg.SetControllen(inqSpace)
		r.msg.Flags = 0
		m, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.msg)), 0)
		if e == syscall.EINTR {
			continue
		}
		r.iov.Base = nil // not to keep p alive
		if e != 0 {
			return -1, false, e
		}
		afterRead(fd)
		return int(m), r.inq() != 0, nil
	}
}

// Unread returns the bytes the socket held after the last Read, as TCP_INQ
// reported them: 0 when unknown (TCP_INQ off, no read yet) or none.
func (r *InqReader) Unread() int {
	if !r.on {
		return 0
	}
	if n := r.inq(); n > 1 {
		return int(n)
	}
	return 0 // 1 also stands for the peer's end
}

// inq is the TCP_CM_INQ the last read returned, or 1 (read again) if it
// returned none.
func (r *InqReader) inq() int32 {
	if int(r.msg.Controllen) < syscall.CmsgLen(4) {
		return 1
	}
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&r.oob[0]))
	if h.Level != unix.SOL_TCP || h.Type != unix.TCP_CM_INQ {
		return 1
	}
	return *(*int32)(unsafe.Pointer(&r.oob[syscall.CmsgLen(0)]))
}
