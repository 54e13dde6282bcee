package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

var soakDuration = flag.Duration("soak", 12*time.Second, "how long TestSoak runs (make soak: 10m)")

// soakConn is a raw client that tolerates the errors an upstream restart
// causes and reports anything else.
type soakConn struct {
	addr string
	nc   net.Conn
	rd   *bufio.Reader
}

func (c *soakConn) dial() error {
	if c.nc != nil {
		c.nc.Close()
	}
	nc, err := net.Dial("tcp", c.addr)
	if err != nil {
		return err
	}
	c.nc, c.rd = nc, bufio.NewReader(nc)
	return nil
}

func (c *soakConn) close() {
	if c.nc != nil {
		c.nc.Close()
	}
}

// roundTrip sends raw and reads n replies, each within 10s.
func (c *soakConn) roundTrip(raw []byte, n int) ([]string, error) {
	return roundTrip(c.nc, c.rd, raw, n)
}

// roundTrip writes raw and reads n replies, for goroutines: failures are
// returned, with the replies read before them.
func roundTrip(nc net.Conn, rd *bufio.Reader, raw []byte, n int) ([]string, error) {
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(raw); err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i := range out {
		r, err := resp.ReadReply(rd, nil)
		if err != nil {
			return out[:i], err
		}
		out[i] = string(r)
	}
	return out, nil
}

// tolerable: errors that an upstream restart may cause.
func tolerable(r string) bool {
	return unavailable(r) || strings.HasPrefix(r, "-EXECABORT") || strings.HasPrefix(r, "-ERR EXEC without MULTI") ||
		strings.HasPrefix(r, "-ERR DISCARD without MULTI") || strings.HasPrefix(r, "-ERR MULTI calls can not be nested")
}

// TestSoak runs a mixed load (GET/SET with acknowledgement tracking,
// pipelines, MULTI/EXEC, pub/sub, blocking pops) through rproxy while Redis
// is killed and restarted every few seconds. At the end: no unexpected
// reply, no hang, every acknowledged write readable, and goroutines and
// Redis connections back to baseline. `make soak` runs it for 10 minutes.
func TestSoak(t *testing.T) {
	// Rewriting the AOF from 1 MB keeps it small (a few counters), so a
	// restart reloads in milliseconds however long the soak runs.
	rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-min-size", "1mb")
	p := proxytest.Start(t, rs.Addr)
	baseG := runtime.NumGoroutine()
	baseConns := redisClients(t, rs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	report := func(format string, args ...any) {
		mu.Lock()
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var pipelined, txns, messages, pops atomic.Int64

	lcs := make([]*loadClient, 8)
	for i := range lcs {
		lcs[i] = &loadClient{key: fmt.Sprintf("soak:%d", i)}
		wg.Add(1)
		go lcs[i].run(ctx, p.Addr, &wg)
	}
	// Pipelines of 16 GETs: 16 replies, each a bulk, a null or tolerable.
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &soakConn{addr: p.Addr}
			defer c.close()
			var raw []byte
			for j := 0; j < 16; j++ {
				raw = resp.AppendCommandString(raw, "GET", fmt.Sprintf("soak:%d", j%8))
			}
			for ctx.Err() == nil {
				if c.nc == nil && c.dial() != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				rs, err := c.roundTrip(raw, 16)
				if err != nil {
					report("pipeline: %v", err)
					c.close()
					c.nc = nil
					continue
				}
				for _, r := range rs {
					if r[0] != '$' && !tolerable(r) {
						report("pipeline reply %q", r)
					}
				}
				pipelined.Add(16)
			}
		}()
	}
	// MULTI INCR INCR EXEC: the two increments are consecutive.
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &soakConn{addr: p.Addr}
			defer c.close()
			raw := resp.AppendCommandString(nil, "MULTI")
			raw = resp.AppendCommandString(raw, "INCR", "soak:txn")
			raw = resp.AppendCommandString(raw, "INCR", "soak:txn")
			raw = resp.AppendCommandString(raw, "EXEC")
			for ctx.Err() == nil {
				if c.nc == nil && c.dial() != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				rs, err := c.roundTrip(raw, 4)
				if err != nil {
					// A session in MULTI whose pinned connection died with
					// Redis is closed, as a direct client's would be: it
					// reconnects. Anything else is a failure.
					if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
						report("multi: %v", err)
					}
					c.close()
					c.nc = nil
					continue
				}
				exec := rs[3]
				if strings.HasPrefix(exec, "*2\r\n") {
					var a, b int
					fmt.Sscanf(exec, "*2\r\n:%d\r\n:%d\r\n", &a, &b)
					if b != a+1 {
						report("EXEC increments not consecutive: %q", exec)
					}
					txns.Add(1)
					continue
				}
				for _, r := range rs {
					if r[0] == '-' && !tolerable(r) {
						report("multi reply %q", r)
					}
				}
				c.roundTrip(resp.AppendCommandString(nil, "DISCARD"), 1) // leave no transaction open
			}
		}()
	}
	// Pub/sub: a subscriber (reconnecting when its pinned connection dies
	// with Redis) and a publisher through rproxy.
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			c := &soakConn{addr: p.Addr}
			if c.dial() != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if r, err := c.roundTrip(resp.AppendCommandString(nil, "SUBSCRIBE", "soak:ch"), 1); err != nil || !strings.HasPrefix(r[0], "*3\r\n$9\r\nsubscribe") {
				if err == nil && !tolerable(r[0]) {
					report("subscribe = %q", r[0])
				}
				c.nc.Close()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			for ctx.Err() == nil {
				c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				r, err := resp.ReadReply(c.rd, nil)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						continue
					}
					break // the stream ended with Redis: resubscribe
				}
				if !strings.HasPrefix(string(r), "*3\r\n$7\r\nmessage\r\n$7\r\nsoak:ch\r\n") {
					report("pub/sub frame %q", r)
				}
				messages.Add(1)
			}
			c.nc.Close()
		}
	}()
	go func() {
		defer wg.Done()
		c := &soakConn{addr: p.Addr}
		defer c.close()
		for n := 0; ctx.Err() == nil; n++ {
			if c.nc == nil && c.dial() != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			r, err := c.roundTrip(resp.AppendCommandString(nil, "PUBLISH", "soak:ch", strconv.Itoa(n)), 1)
			if err != nil {
				report("publish: %v", err)
				c.close()
				c.nc = nil
			} else if r[0][0] != ':' && !tolerable(r[0]) {
				report("publish = %q", r[0])
			}
			time.Sleep(time.Millisecond)
		}
	}()
	// Blocking pops fed by a pusher.
	wg.Add(2)
	go func() {
		defer wg.Done()
		c := &soakConn{addr: p.Addr}
		defer c.close()
		for ctx.Err() == nil {
			if c.nc == nil && c.dial() != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			r, err := c.roundTrip(resp.AppendCommandString(nil, "BLPOP", "soak:q", "1"), 1)
			switch {
			case err != nil:
				report("blpop: %v", err)
				c.close()
				c.nc = nil
			case strings.HasPrefix(r[0], "*2\r\n$6\r\nsoak:q\r\n"):
				pops.Add(1)
			case r[0] != "*-1\r\n" && !tolerable(r[0]):
				report("blpop = %q", r[0])
			}
		}
	}()
	go func() {
		defer wg.Done()
		c := &soakConn{addr: p.Addr}
		defer c.close()
		for ctx.Err() == nil {
			if c.nc == nil && c.dial() != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if r, err := c.roundTrip(resp.AppendCommandString(nil, "LPUSH", "soak:q", "x"), 1); err != nil {
				report("lpush: %v", err)
				c.close()
				c.nc = nil
			} else if r[0][0] != ':' && !tolerable(r[0]) {
				report("lpush = %q", r[0])
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	restarts := 0
	end := time.Now().Add(*soakDuration)
	for time.Now().Before(end) {
		time.Sleep(min(4*time.Second, time.Until(end)))
		if time.Until(end) < time.Second {
			break
		}
		rs.Kill()
		time.Sleep(200 * time.Millisecond)
		rs.Restart(t)
		restarts++
	}
	waitFor(t, "proxy ready", p.Server.Ready)
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()

	for _, b := range bad {
		t.Error(b)
	}
	var ok, errs int
	for _, lc := range lcs {
		for _, b := range lc.bad {
			t.Errorf("%s: %s", lc.key, b)
		}
		ok, errs = ok+lc.ok, errs+lc.errs
		checkCounter(t, rs, lc.key, lc.acked, lc.tried)
	}
	t.Logf("soak %v, %d upstream restarts: %d GET/SET ok, %d unavailable; %d pipelined GETs, %d transactions, %d pub/sub messages, %d blocking pops",
		*soakDuration, restarts, ok, errs, pipelined.Load(), txns.Load(), messages.Load(), pops.Load())
	if ok == 0 || txns.Load() == 0 || messages.Load() == 0 || pops.Load() == 0 || pipelined.Load() == 0 {
		t.Error("a part of the mixed load never succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseG+2 {
		if time.Now().After(deadline) {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines left, baseline %d:\n%s", runtime.NumGoroutine(), baseG, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Released pinned connections are kept for reuse (up to 16 per
	// protocol): at most one per client that pinned (3 MULTI, 1 BLPOP),
	// and two spares per protocol's pool.
	waitFor(t, "Redis connections back to baseline", func() bool { return redisClients(t, rs) <= baseConns+8 })
	assertNoPins(t, p)
}
