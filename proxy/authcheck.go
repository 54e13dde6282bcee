package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// checkerConns bounds the connections passthrough mode checks credentials
// on, and so the checks in flight at once.
const checkerConns = 4

// errCheckersBusy: every checking connection stayed busy for
// upstream.timeout.
var errCheckersBusy = errors.New("every connection that checks credentials is busy")

// authChecker sends passthrough mode's AUTH and HELLO AUTH commands to
// Redis on at most checkerConns connections, which it keeps. A fresh
// connection per check let one client's pipeline of wrong passwords open
// and close a connection to Redis per guess, each left in TIME_WAIT here:
// enough of them use up the ephemeral ports to a remote Redis, and rproxy
// can then open no connection to it at all. A kept connection serves any
// later check: a wrong password leaves it as it was, a right one changes
// only the user it is logged in as (and HELLO its protocol), which no
// reply to AUTH or HELLO AUTH depends on. It is used for nothing else.
type authChecker struct {
	upstream upstream.Config
	slots    chan struct{} // one per check in flight

	mu     sync.Mutex
	idle   []*checkerConn
	closed bool
}

// checkerConn is a kept connection and what it was dialed to.
type checkerConn struct {
	nc     net.Conn
	rd     *bufio.Reader
	master string // the Sentinel master when dialed ("" without Sentinel)
}

func newAuthChecker(cfg upstream.Config) *authChecker {
	return &authChecker{upstream: cfg, slots: make(chan struct{}, checkerConns)}
}

// check sends args (AUTH, or HELLO with the AUTH option alone) and returns
// Redis's reply. It waits for a free connection up to upstream.timeout.
func (c *authChecker) check(args [][]byte) ([]byte, error) {
	timer := time.NewTimer(c.upstream.Timeout)
	select {
	case c.slots <- struct{}{}:
		timer.Stop()
	case <-timer.C:
		return nil, errCheckersBusy
	}
	defer func() { <-c.slots }()
	cc := c.take()
	r, cc, err := c.checkOn(cc, resp.AppendCommand(nil, args...))
	c.put(cc)
	return r, err
}

// checkOn sends cmd on cc, or on a fresh connection if cc is nil, was
// dialed to a master Sentinel no longer names, or fails (Redis closes an
// idle connection after its timeout, and a user's connections when the
// user is deleted): it returns the connection to keep (nil: none).
func (c *authChecker) checkOn(cc *checkerConn, cmd []byte) ([]byte, *checkerConn, error) {
	if cc != nil && c.upstream.Sentinel != nil && cc.master != c.upstream.Sentinel.Master() {
		cc.nc.Close()
		cc = nil
	}
	for {
		fresh := cc == nil
		if fresh {
			var err error
			if cc, err = c.dial(); err != nil {
				return nil, nil, err
			}
		}
		r, err := cc.do(cmd, c.upstream.Timeout)
		if err == nil {
			return r, cc, nil
		}
		cc.nc.Close()
		if fresh {
			return nil, nil, err
		}
		cc = nil // once more, on a fresh connection
	}
}

func (c *authChecker) dial() (*checkerConn, error) {
	var master string
	if c.upstream.Sentinel != nil {
		master = c.upstream.Sentinel.Master()
	}
	nc, err := upstream.Dial(context.Background(), c.upstream) // TLS too, when configured
	if err != nil {
		return nil, err
	}
	return &checkerConn{nc: nc, rd: bufio.NewReaderSize(nc, 1024), master: master}, nil
}

// do sends cmd and reads its reply, within timeout.
func (cc *checkerConn) do(cmd []byte, timeout time.Duration) ([]byte, error) {
	cc.nc.SetDeadline(time.Now().Add(timeout))
	if _, err := cc.nc.Write(cmd); err != nil {
		return nil, err
	}
	return resp.ReadReply(cc.rd, nil)
}

// take returns a kept connection (nil: none idle).
func (c *authChecker) take() *checkerConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.idle); n > 0 {
		cc := c.idle[n-1]
		c.idle = c.idle[:n-1]
		return cc
	}
	return nil
}

// put keeps cc (nil: nothing), unless the checker is closed.
func (c *authChecker) put(cc *checkerConn) {
	if cc == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cc.nc.Close()
		return
	}
	c.idle = append(c.idle, cc)
}

// close closes the kept connections, and any returned after.
func (c *authChecker) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cc := range c.idle {
		cc.nc.Close()
	}
	c.idle = nil
}
