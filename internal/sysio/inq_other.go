//go:build !linux || 386

package sysio

import "syscall"

// InqReader is Linux's (inq_linux.go; not on 386, whose recvmsg goes
// through socketcall). Here it cannot tell whether a next read would find
// anything, and says it might.
type InqReader struct{}

// Enable reports false: no TCP_INQ here.
func (r *InqReader) Enable(rc syscall.RawConn) bool { return false }

// Read is Read, with unread always true.
func (r *InqReader) Read(fd uintptr, p []byte) (n int, unread bool, err error) {
	n, err = Read(fd, p)
	return n, true, err
}

// Unread returns 0: unknown here.
func (r *InqReader) Unread() int { return 0 }
