package redistest

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// Relay sits between a proxy and a Redis server and lets a test stage what
// is in flight: it records every byte sent towards Redis, and can hold the
// replies coming back, so that a command is known to be written upstream
// (Redis even ran it) while its reply has not arrived.
type Relay struct {
	Addr string // where the proxy should connect instead of the server

	mu   sync.Mutex
	cond *sync.Cond
	held bool
	sent []byte // everything written towards Redis, every connection
	done bool
}

// StartRelay relays connections on a free port to target until the test
// ends.
func StartRelay(tb testing.TB, target string) *Relay {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("relay: listen: %v", err)
	}
	r := &Relay{Addr: ln.Addr().String()}
	r.cond = sync.NewCond(&r.mu)
	var conns sync.WaitGroup
	var live []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			live = append(live, c, up)
			r.mu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); r.pipe(up, c, false) }()
			go func() { defer conns.Done(); r.pipe(c, up, true) }()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		r.done = true
		r.cond.Broadcast()
		for _, c := range live {
			c.Close()
		}
		r.mu.Unlock()
		conns.Wait()
	})
	return r
}

// pipe copies src to dst. Towards Redis it records the bytes; towards the
// proxy it waits while replies are held.
func (r *Relay) pipe(dst, src net.Conn, replies bool) {
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			if replies {
				for r.held && !r.done {
					r.cond.Wait()
				}
			} else {
				r.sent = append(r.sent, buf[:n]...)
			}
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // dst is closed on the way out, which ends the other direction
		}
	}
}

// Hold keeps replies from reaching the proxy until Release.
func (r *Relay) Hold() {
	r.mu.Lock()
	r.held = true
	r.mu.Unlock()
}

// Release lets held and later replies through.
func (r *Relay) Release() {
	r.mu.Lock()
	r.held = false
	r.cond.Broadcast()
	r.mu.Unlock()
}

// Count is how many times cmd (raw RESP bytes) was sent towards Redis.
func (r *Relay) Count(cmd []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Count(r.sent, cmd)
}

// WaitCount waits until cmd was sent towards Redis at least n times, and
// fails the test if that does not happen within 5 seconds.
func (r *Relay) WaitCount(tb testing.TB, cmd []byte, n int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.Count(cmd) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("relay: %q was sent %d times, want %d", cmd, r.Count(cmd), n)
		}
		time.Sleep(time.Millisecond)
	}
}
