//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// peekConn looks, without blocking and without consuming anything, at
// whether the peer has sent bytes or closed the connection.
func peekConn(nc net.Conn) peekResult {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return peekUnknown
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekUnknown
	}
	res := peekUnknown
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			res = peekData
		case rerr == nil:
			res = peekClosed // an orderly shutdown: EOF
		case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK):
			res = peekNothing
		case errors.Is(rerr, syscall.EINTR):
			return false
		default:
			res = peekClosed // reset, or another error: not usable
		}
		return true // never wait for readiness
	})
	if err != nil {
		return peekClosed
	}
	return res
}
