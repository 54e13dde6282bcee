package command

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
