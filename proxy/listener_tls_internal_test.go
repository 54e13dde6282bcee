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
	cfg := certs.ClientConfig(false)
	cfg.DynamicRecordSizingDisabled = true // full records: reads per record are the test's to count
	tc := tls.Client(client, cfg)
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
			lc.rb = funcBuffer{buf: func() []byte { asked.Add(1); return b }, put: put}
			n, err := lc.readLazy(nil, nil)
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

// tlsReads reads from lc in a goroutine of its own per call, into a
// buffer of size() bytes, counting in asked the times the read asks for it.
type tlsRead struct {
	b   []byte
	err error
}

func startTLSRead(lc *limitedConn, size int, asked *atomic.Int64, held bool) chan tlsRead {
	ch := make(chan tlsRead, 1)
	go func() {
		b := make([]byte, size)
		lc.rb = funcBuffer{buf: func() []byte { asked.Add(1); return b }, put: func() {}, held: held}
		n, err := lc.readLazy(nil, nil)
		ch <- tlsRead{b[:n], err}
	}()
	return ch
}

// TestTLSReadBufferFitsTheBatches: the buffer a TLS client's read waits
// in grows to the client's batches, so a pipeline larger than it is served
// in one batch from the second on, not cut where the buffer ends (which
// cost a fifth of the throughput of 16-GET pipelines over TLS); and while
// the reader holds its buffer (a command partly read), the read goes to it
// directly, so a large command is not read in pieces.
func TestTLSReadBufferFitsTheBatches(t *testing.T) {
	lc, tc := tlsPair(t) // the handshake runs in the first write and read
	var asked atomic.Int64
	held := false
	readAll := func(total int) int {
		reads := 0
		for n := 0; n < total; reads++ {
			r := <-startTLSRead(lc, 16<<10, &asked, held)
			if r.err != nil {
				t.Fatal(r.err)
			}
			n += len(r.b)
		}
		return reads
	}
	// The first 900-byte batch (a pipeline of 20 GETs): 512 bytes, then
	// the rest of the record (at once); the next ones: one read each.
	for i, want := range []int{2, 1, 1} {
		go tc.Write(make([]byte, 900))
		if reads := readAll(900); reads != want {
			t.Errorf("batch %d of 900 bytes read in %d reads, want %d", i, reads, want)
		}
	}
	// 40,000 bytes, three records, while the reader holds its buffer:
	// three reads, not six (the small buffer, then the rest of each record).
	held = true
	go tc.Write(make([]byte, 40_000))
	if reads := readAll(40_000); reads > 3 {
		t.Errorf("40,000 bytes read in %d reads while the buffer is held, want 3 (one per record)", reads)
	}
}
