package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/resp"
)

// writeBufSize is the size of a pooled reply buffer; writeFlushAt is how
// much a batch's replies may gather before they are written, so that one
// pipeline's buffer stays bounded.
const (
	writeBufSize = 16 << 10
	writeFlushAt = 64 << 10
)

// keepCommands is the longest batch whose command slice a connection keeps
// for the next.
const keepCommands = 64

// writeBufs holds reply buffers between batches: an idle connection holds
// none.
var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, writeBufSize); return &b }}

// clientConn is one client connection: the socket (a *limitedConn), the
// request parser that owns its read buffer, and the buffer its replies
// gather in during a batch. Both buffers are taken when needed and given
// back when a batch is done, so an idle client holds neither.
type clientConn struct {
	nc     net.Conn
	addr   string
	ss     *session
	parser resp.RequestParser
	cmds   []resp.Command
	wbuf   *[]byte // nil between batches
	werr   error   // the first write error; later writes are dropped
	closed bool    // Close was called: the read loop ends
}

func newClientConn(nc net.Conn) *clientConn {
	c := &clientConn{nc: nc, addr: nc.RemoteAddr().String()}
	if lc, ok := nc.(*limitedConn); ok {
		lc.rb = &c.parser
	}
	return c
}

// NetConn returns the client's socket.
func (c *clientConn) NetConn() net.Conn { return c.nc }

// RemoteAddr returns the client's address, as host:port.
func (c *clientConn) RemoteAddr() string { return c.addr }

// WriteRaw queues reply bytes, written by the next Flush (or at once when
// enough have gathered).
func (c *clientConn) WriteRaw(b []byte) {
	if c.werr != nil {
		return
	}
	if c.wbuf == nil {
		c.wbuf = writeBufs.Get().(*[]byte)
	}
	*c.wbuf = append(*c.wbuf, b...)
	if len(*c.wbuf) >= writeFlushAt {
		c.Flush()
	}
}

// Flush writes the queued replies in one write. A write error is kept and
// returned by later calls; the read loop closes the connection.
func (c *clientConn) Flush() error {
	if c.werr != nil {
		return c.werr
	}
	if c.wbuf == nil || len(*c.wbuf) == 0 {
		return nil
	}
	_, c.werr = c.nc.Write(*c.wbuf)
	*c.wbuf = (*c.wbuf)[:0]
	return c.werr
}

// release gives the reply buffer back (after a Flush).
func (c *clientConn) release() {
	if c.wbuf == nil {
		return
	}
	if cap(*c.wbuf) <= 4*writeBufSize {
		*c.wbuf = (*c.wbuf)[:0]
		writeBufs.Put(c.wbuf)
	}
	c.wbuf = nil
}

// Close writes what is queued and closes the connection; the read loop
// then ends.
func (c *clientConn) Close() error {
	c.Flush()
	c.closed = true
	return c.nc.Close()
}

// serveClients accepts clients on ln until it returns net.ErrClosed (after
// Shutdown's drain), then closes the connections still open. Each client
// gets a goroutine running its read loop.
func (s *Server) serveClients(ln net.Listener) error {
	defer func() {
		s.sessions.each(func(ss *session) { ss.conn.nc.Close() })
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.log.Warn("accept failed", zap.Error(err))
			continue
		}
		c := newClientConn(nc)
		if !s.accept(c) {
			nc.Close()
			continue
		}
		if lc, ok := nc.(*limitedConn); ok && lc.poller != nil {
			lc.resume = func() {
				s.metrics.parked.Dec()
				s.serveConn(c)
			}
		}
		go s.serveConn(c)
	}
}

// serveConn runs one client's read loop, then closes it and reports why.
func (s *Server) serveConn(c *clientConn) {
	err := s.readLoop(c)
	if err == errParked {
		return // the client's socket waits in the idle poller (park.go)
	}
	c.release()
	c.nc.Close()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	s.closed(c, err)
	// The read buffer goes back to the pool: the read that saw the client
	// leave took one, and left to the collector it costs every short-lived
	// connection a fresh 16 KB buffer.
	c.parser.Release()
}

// readLoop reads the client's bytes, parses each read into a batch of
// commands, serves the batch and writes its replies in one write. It
// returns what ended the connection (nil: closed by the proxy).
//
// Over TCP the batches are served from inside the socket's read (serveRead
// as limitedConn.readLazy's step): after a read that drained the socket the
// next waits for the poller's word that more has come, instead of reading
// once more to find nothing, as it would from a fresh read (listener.go,
// rawRead).
func (s *Server) readLoop(c *clientConn) error {
	lc, _ := c.nc.(*limitedConn)
	var stepErr error
	step := func(n int) bool {
		stepErr = s.serveRead(c, lc, n)
		return stepErr == nil && !c.parser.Buffered()
	}
	for {
		n := 0
		if !c.parser.Buffered() {
			var err error
			if lc != nil {
				n, err = lc.readLazy(nil, step)
			} else {
				n, err = c.nc.Read(c.parser.ReadBuffer())
			}
			if stepErr != nil {
				return loopEnd(stepErr)
			}
			if n == 0 {
				if err == nil {
					continue
				}
				if err == errPark {
					if s.park(c, lc) {
						return errParked // c is the resumed loop's now
					}
					continue
				}
				if err == errWake {
					s.stream.woken(c.ss)
					continue
				}
				return err
			}
			// A read that returned bytes and an error: the bytes are
			// served first; the next read returns the error again.
		}
		if err := s.serveRead(c, lc, n); err != nil {
			return loopEnd(err)
		}
	}
}

// errClosedByProxy ends the read loop of a client the proxy closed.
var errClosedByProxy = errors.New("closed by the proxy")

// loopEnd is what readLoop returns for serveRead's err.
func loopEnd(err error) error {
	if err == errClosedByProxy {
		return nil
	}
	return err
}

// serveRead parses n more bytes (0: those still buffered), serves the
// commands, writes their replies and gives the buffers back. A non-nil
// error ends the connection.
func (s *Server) serveRead(c *clientConn, lc *limitedConn, n int) error {
	ss := c.ss
	// The limits in force when the bytes came, as Redis applies a
	// CONFIG SET of proto-max-bulk-len to connected clients too.
	lim := s.limits.Load()
	rl := resp.RequestLimits{MaxBulkLen: lim.MaxBulkLen, MaxQueryBuffer: lim.MaxQueryBuffer,
		AuthRequired: s.cfg.Users != nil && !ss.authed, ResetDeauths: s.cfg.Users != nil}
	var perr error
	c.cmds, perr = c.parser.Parse(n, rl, c.cmds[:0])
	if len(c.cmds) > 0 {
		s.handle(c, c.cmds)
		clear(c.cmds) // no references into the read buffer while idle
		if cap(c.cmds) > keepCommands {
			c.cmds = nil // a long pipeline's slice is not kept
		}
		if c.closed {
			return errClosedByProxy
		}
		if lc != nil {
			if err := lc.overLimit(); err != nil {
				c.release() // its replies are dropped
				return err
			}
		}
	}
	if perr != nil {
		return s.protocolError(c, perr)
	}
	if err := c.Flush(); err != nil {
		return err
	}
	c.release()
	if !c.parser.Buffered() {
		c.parser.Release()
	}
	return nil
}

// protocolError answers a request the parser refused as Redis does (its
// error reply, if any, after the replies before it) and returns the error
// that closes the connection.
func (s *Server) protocolError(c *clientConn, err error) error {
	var le *resp.LimitError
	if !errors.As(err, &le) {
		return err
	}
	if le.Reply != "" {
		c.WriteRaw([]byte(le.Reply))
	}
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.Flush()
	return &limitError{reason: le.Reason}
}
