package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// defaultTLSHandshakeTimeout bounds a client's TLS handshake when
// Config.TLSHandshakeTimeout is 0.
const defaultTLSHandshakeTimeout = 10 * time.Second

// plainClientReply is written to a client that speaks plain RESP to the TLS
// listener, so redis-cli and client libraries show why they were closed.
const plainClientReply = "-ERR rproxy: this port speaks TLS only: connect with TLS (redis-cli --tls)\r\n"

// tlsListener accepts TCP connections and returns them once their TLS
// handshake is done. Each handshake runs in a goroutine of its own under a
// timeout, so a client that connects and sends nothing holds up no one:
// the accept loop, and the accept callback that writes to a refused
// client, only ever see connections whose handshake has completed. What
// Accept returns is the *tls.Conn, so everything above it (limitedConn,
// the read loop, the session's writes with deadlines) reads and writes through
// TLS.
type tlsListener struct {
	net.Listener // TCP
	config       *tls.Config
	timeout      time.Duration
	maxPending   func() int64 // most handshakes in progress at once (limits.max_clients, reloadable)
	// refuse is called, on the handshake's goroutine, with each connection
	// whose handshake failed or was refused, before it is closed.
	refuse func(c net.Conn, reason string, err error)

	ctx      context.Context // cancelled by Close: aborts the handshakes in progress
	cancel   context.CancelFunc
	ready    chan net.Conn // handshake done
	errs     chan error    // the TCP listener's Accept errors
	loopDone chan struct{} // closed when acceptLoop returns
	pending  atomic.Int64
	wg       sync.WaitGroup // handshakes
}

func newTLSListener(ln net.Listener, config *tls.Config, timeout time.Duration, maxPending func() int64,
	refuse func(c net.Conn, reason string, err error)) *tlsListener {
	if timeout <= 0 {
		timeout = defaultTLSHandshakeTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &tlsListener{
		Listener:   ln,
		config:     config,
		timeout:    timeout,
		maxPending: maxPending,
		refuse:     refuse,
		ctx:        ctx,
		cancel:     cancel,
		ready:      make(chan net.Conn),
		errs:       make(chan error),
		loopDone:   make(chan struct{}),
	}
	go l.acceptLoop()
	return l
}

// Accept returns the next connection whose handshake has completed, or the
// TCP listener's error (the accept loop, through drainListener, handles it).
func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting, aborts the handshakes in progress and waits for
// their goroutines.
func (l *tlsListener) Close() error {
	l.cancel()
	err := l.Listener.Close()
	<-l.loopDone // no handshake starts after this
	l.wg.Wait()
	return err
}

func (l *tlsListener) acceptLoop() {
	defer close(l.loopDone)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			// Handed to Accept's caller one at a time, so drainListener's
			// pause after an error paces this loop too.
			select {
			case l.errs <- err:
			case <-l.ctx.Done():
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if max := l.maxPending(); l.pending.Add(1) > max {
			l.pending.Add(-1)
			l.refuse(c, fmt.Sprintf("%d TLS handshakes already in progress", max), nil)
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// handshake runs the server side of c's TLS handshake and hands the
// connection to Accept; a client that fails it, or does not finish it within
// the timeout, is closed with a log line.
func (l *tlsListener) handshake(c net.Conn) {
	defer l.wg.Done()
	defer l.pending.Add(-1)
	tc := tls.Server(c, l.config)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err := tc.HandshakeContext(ctx) // closes c if ctx ends first
	cancel()
	if err != nil {
		var rhe tls.RecordHeaderError
		switch {
		case l.ctx.Err() != nil:
			// shutting down: not the client's doing
		case errors.Is(err, context.DeadlineExceeded):
			l.refuse(c, fmt.Sprintf("no TLS handshake within %v", l.timeout), nil)
		case errors.As(err, &rhe) && rhe.Conn != nil:
			// Not TLS at all (rhe.Conn is set only then, before any alert
			// was sent): most likely a plain Redis client.
			l.refuse(c, "not a TLS client", err)
			rhe.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			rhe.Conn.Write([]byte(plainClientReply))
		default:
			l.refuse(c, "TLS handshake failed", err)
		}
		c.Close()
		return
	}
	select {
	case l.ready <- tc:
	case <-l.ctx.Done():
		c.Close()
	}
}
