package proxy

import (
	"bytes"
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/tlstest"
)

// tlsPair is a limitedConn over the server side of a TLS connection on a
// pipe, and the client side, its handshake done.
func tlsPair(t *testing.T) (*limitedConn, *tls.Conn) {
	t.Helper()
	certs := tlstest.New(t)
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	var limits atomic.Pointer[Limits]
	limits.Store(&Limits{MaxClients: 1, MaxBulkLen: 1 << 20, MaxQueryBuffer: 1 << 20, IdleTimeout: time.Hour})
	lc := &limitedConn{Conn: tls.Server(server, certs.ServerConfig(false)), limits: &limits, clock: time.Now}
	tc := tls.Client(client, certs.ClientConfig(false))
	return lc, tc
}

// TestTLSReadWaitsWithoutTheBuffer: an idle TLS client's read waits in the
// connection's small buffer; the caller's buffer (16 KB from a pool) is
// asked for only once bytes have come. Records of every size around the
// small buffer's, and a caller's buffer smaller than what came, give the
// bytes in order.
func TestTLSReadWaitsWithoutTheBuffer(t *testing.T) {
	lc, tc := tlsPair(t)
	var asked atomic.Int64
	bufSize := 16 << 10
	put := func() {}
	type result struct {
		b   []byte
		err error
	}
	read := func() chan result {
		ch := make(chan result, 1)
		go func() {
			b := make([]byte, bufSize)
			n, err := lc.readLazy(func() []byte { asked.Add(1); return b }, put, nil)
			ch <- result{b[:n], err}
		}()
		return ch
	}
	first := read()
	// The handshake runs inside the read; once the client's is done (a
	// pipe hands each write over only when the other side reads it), the
	// read waits for application data.
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the read asked for the buffer %d times before any byte came", n)
	}
	ping := "*1\r\n$4\r\nPING\r\n"
	tc.Write([]byte(ping))
	if r := <-first; r.err != nil || string(r.b) != ping || asked.Load() != 1 {
		t.Fatalf("read %q, %v, the buffer asked for %d times; want %q, once", r.b, r.err, asked.Load(), ping)
	}

	// Records of 511, 512, 513, 2000 and 40,000 bytes (the last in several
	// records), then caller buffers of 100 bytes.
	var sent, got bytes.Buffer
	for _, size := range []int{511, 512, 513, 2000, 40_000} {
		rec := []byte(strings.Repeat(string(rune('a'+size%26)), size))
		sent.Write(rec)
		go tc.Write(rec)
		for got.Len() < sent.Len() {
			r := <-read()
			if r.err != nil {
				t.Fatalf("after %d of %d bytes: %v", got.Len(), sent.Len(), r.err)
			}
			got.Write(r.b)
		}
	}
	bufSize = 100
	rec := []byte(strings.Repeat("z", 450))
	sent.Write(rec)
	go tc.Write(rec)
	for got.Len() < sent.Len() {
		r := <-read()
		if r.err != nil || len(r.b) > 100 {
			t.Fatalf("after %d of %d bytes: %d bytes, %v", got.Len(), sent.Len(), len(r.b), r.err)
		}
		got.Write(r.b)
	}
	if !bytes.Equal(got.Bytes(), sent.Bytes()) {
		t.Fatalf("read %d bytes, not the %d sent in order", got.Len(), sent.Len())
	}
}
