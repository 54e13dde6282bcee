//go:build linux && !386

package sysio

import (
	"bytes"
	"net"
	"testing"

	"github.com/rproxy/rproxy/internal/socktest"
)

// benchInqRead reads 14 bytes at a time from a socket that always holds
// more: the cost of one read, with TCP_INQ on (recvmsg) or off (read).
func benchInqRead(b *testing.B, inq bool) {
	nc, srv := socktest.TCPPair(b)
	go func() {
		chunk := bytes.Repeat([]byte("*1\r\n$4\r\nPING\r\n"), 4096)
		for {
			if _, err := srv.Write(chunk); err != nil {
				return
			}
		}
	}()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	fd := uintptr(socktest.FD(b, nc))
	var r InqReader
	if inq && !r.Enable(rc) {
		b.Fatal("no TCP_INQ")
	}
	buf := make([]byte, 14)
	b.ResetTimer()
	for range b.N {
		for {
			if n, _, _ := r.Read(fd, buf); n > 0 {
				break
			}
		}
	}
}

func BenchmarkInqReadOff(b *testing.B) { benchInqRead(b, false) }
func BenchmarkInqReadOn(b *testing.B)  { benchInqRead(b, true) }
