//go:build linux && !386

package sysio

import (
	"bytes"
	"net"
	"testing"
)

// benchInqRead reads 14 bytes at a time from a socket that always holds
// more: the cost of one read, with TCP_INQ on (recvmsg) or off (read).
func benchInqRead(b *testing.B, inq bool) {
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
		chunk := bytes.Repeat([]byte("*1\r\n$4\r\nPING\r\n"), 4096)
		for {
			if _, err := s.Write(chunk); err != nil {
				return
			}
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	rc, _ := nc.(*net.TCPConn).SyscallConn()
	var fd uintptr
	rc.Control(func(f uintptr) { fd = f })
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
