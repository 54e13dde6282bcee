package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rproxy/rproxy/internal/idlepoll"
	"github.com/rproxy/rproxy/internal/sysio"
)

// drainListener lets Shutdown stop accepting without ending the accept
// loop, which closes every client connection as soon as Accept fails: after
// stopAccepting the port is closed, but Accept only returns net.ErrClosed
// once release is called, after the drain.
type drainListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn

	once     sync.Once
	stopped  chan struct{}
	released chan struct{}
	rOnce    sync.Once
}

func newDrainListener(ln net.Listener, wrap func(net.Conn) net.Conn) *drainListener {
	return &drainListener{Listener: ln, wrap: wrap, stopped: make(chan struct{}), released: make(chan struct{})}
}

func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		return l.wrap(c), nil
	}
	select {
	case <-l.stopped:
		<-l.released
		return nil, net.ErrClosed
	default:
	}
	if !errors.Is(err, net.ErrClosed) {
		// The accept loop retries at once; out of file descriptors that
		// would spin.
		time.Sleep(5 * time.Millisecond)
	}
	return nil, err
}

func (l *drainListener) stopAccepting() {
	l.once.Do(func() {
		close(l.stopped)
		l.Listener.Close()
	})
}

func (l *drainListener) release() {
	l.stopAccepting()
	l.rOnce.Do(func() { close(l.released) })
}

// limitedConn closes idle clients: each read of the client gets a deadline of
// the idle timeout in force (limits.idle_timeout, read at each read), and
// a reload that changes it moves the deadline of a read under way
// (setIdle), so it applies to connected clients at once. A client blocked
// in a command (BLPOP...) or in pub/sub is never idle, as on Redis.
//
// Over TCP it waits for the client's bytes without holding a buffer
// (readLazy), so an idle client costs no read buffer; over TLS it waits
// in a small buffer of its own (readTLS).
type limitedConn struct {
	net.Conn
	raw syscall.RawConn // the TCP socket's, nil over TLS
	// rb is the buffer readLazy reads into, taken once bytes are ready
	// (the client's request parser; set once, by newClientConn).
	rb readBuffer
	// readTLS's state: the buffer an idle TLS client's read waits in,
	// sized to the client's batches.
	tlsFirst []byte
	// read's state for its RawConn callback (rawRead), set per read.
	rawFn   func(uintptr) bool
	rawStep func(n int) bool
	rawN    int
	rawErr  error
	inq     sysio.InqReader         // rawRead's reads: whether a next read could find anything
	w       sysio.Writer            // over raw: Write
	limits  *atomic.Pointer[Limits] // the server's, for the idle timeout and the query buffer limit
	clock   func() time.Time

	// While the session waits on a blocking command, a watcher reads the
	// client so that a client that leaves is noticed (Redis unblocks it);
	// what it reads is kept in pending (up to the query buffer limit, as
	// Redis buffers a blocked client's input) and returned first.
	mu        sync.Mutex
	pending   []byte
	watchErr  error
	watching  bool      // a watcher reads: no idle deadline
	noIdle    bool      // pub/sub (stream mode): never idle
	reading   bool      // Read waits on the client, since readSince
	armed     bool      // a read deadline for the idle timeout is set, at deadline
	deadline  time.Time // valid while armed
	readSince time.Time
	// stepping: rawRead's step runs, holding the socket's read, and Close
	// only shuts the socket down. closing: Close has begun; no step starts
	// after it (Close's wait for the read would wait for the step).
	stepping   bool
	closing    bool
	rawStepped bool // rawStep asked to stop: read returns (0, nil)
	// idleTimedOut: a read ended on the idle deadline (the close callback
	// tells an idle client from one whose replies could not be written).
	idleTimedOut atomic.Bool

	// Parking (park.go): an idle client has its read loop end and its
	// socket wait in the idle poller, without a goroutine; the server's park
	// sweep asks it (parkAsked, and a read deadline of now, which wakes the
	// read), so a busy client's reads set no deadline. resume starts the
	// read loop again. Set while parked: fd, token.
	poller    *idlepoll.Poller // nil: never parked (TLS, or parking off)
	parkAsked bool
	resume    func()
	fd        int
	token     idlepoll.Token
	parked    bool
	expired   bool // parked longer than the idle timeout: the next read reports it

	// wakeAsked: another goroutine has work for the session's own goroutine
	// (wake): the read under way, or the next, ends with errWake.
	wakeAsked bool
}

// errWake ends a read that wake interrupted: the read loop calls the
// session's woken and reads on.
var errWake = errors.New("woken")

// wake interrupts the read under way (a read deadline of now), or the
// next one, so that the read loop runs the session's woken: a stream-mode
// session's shard channels that Redis unsubscribed are subscribed again
// from its own goroutine (shardmove.go), whose state no other may touch.
func (c *limitedConn) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wakeAsked || c.closing {
		return
	}
	c.wakeAsked = true
	if c.reading {
		now := time.Now()
		c.Conn.SetReadDeadline(now)
		c.armed, c.deadline = true, now
	}
}

// armIdleLocked sets, or clears, the read deadline for idle timeout d from
// the start of the read under way. Setting a deadline costs about as much
// as a small read, so a deadline already set is kept when it is not later
// than the one wanted: it may then fire early, and Read re-arms it when it
// does (staleDeadline). A client reading often thus sets its deadline
// about once per idle timeout, not once per read.
func (c *limitedConn) armIdleLocked(d time.Duration) {
	want, ok := c.wantDeadlineLocked(d)
	switch {
	case ok:
		if c.armed && !c.deadline.After(want) {
			return
		}
		c.Conn.SetReadDeadline(want)
		c.armed, c.deadline = true, want
	case c.armed:
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
}

// wantDeadlineLocked returns the read deadline the read under way needs
// for the idle timeout d.
func (c *limitedConn) wantDeadlineLocked(d time.Duration) (time.Time, bool) {
	if c.noIdle || c.watching || d <= 0 {
		return time.Time{}, false
	}
	return c.readSince.Add(d), true
}

// deadlineAction is what a read that ended on its deadline does next.
type deadlineAction uint8

const (
	deadlineIdle    deadlineAction = iota // the idle timeout: the client is closed
	deadlinePark                          // asked to park by the sweep: the read loop parks
	deadlineRearmed                       // early (armed for an earlier read, or moved by a reload): read on
	deadlineWake                          // asked by wake: the read loop runs the session's woken
)

// afterDeadlineLocked is called when a read ended on its deadline. If the
// read under way has not waited the whole idle timeout and was not asked to
// park, it moves the deadline, and the read goes on.
func (c *limitedConn) afterDeadlineLocked() deadlineAction {
	if c.wakeAsked {
		c.wakeAsked = false
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
		return deadlineWake
	}
	d := c.limits.Load().IdleTimeout
	if c.noIdle || c.watching {
		return deadlineIdle
	}
	// Wall-clock time, as the deadline that fired: the coarse clock may lag
	// it and make a read that waited the whole timeout look shorter.
	waited := time.Since(c.readSince)
	switch {
	case d > 0 && waited >= d:
		return deadlineIdle // the client has been idle the whole timeout
	case c.parkAsked:
		c.parkAsked = false
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
		return deadlinePark
	}
	want, ok := c.wantDeadlineLocked(d)
	if !ok {
		return deadlineIdle
	}
	c.Conn.SetReadDeadline(want)
	c.armed, c.deadline = true, want
	return deadlineRearmed
}

// setIdle applies a new idle timeout to a read under way (a reload); the
// next reads load it themselves.
func (c *limitedConn) setIdle(d time.Duration) {
	c.mu.Lock()
	if c.reading {
		c.armIdleLocked(d)
	}
	c.mu.Unlock()
	c.expireParked(d)
}

// exemptIdle stops idle closing (and parking): the session is in pub/sub
// mode, where Redis never closes an idle client either.
func (c *limitedConn) exemptIdle() {
	c.mu.Lock()
	c.noIdle = true
	c.armIdleLocked(0)
	c.mu.Unlock()
}

// restoreIdle undoes exemptIdle: the session left stream mode (RESET). The
// next read sets the idle deadline.
func (c *limitedConn) restoreIdle() {
	c.mu.Lock()
	c.noIdle = false
	c.mu.Unlock()
}

// watch starts reading the client in the background and calls gone if the
// client closes or fails. The returned stop ends the watch and must be
// called before the read loop reads again.
func (c *limitedConn) watch(gone func()) (stop func()) {
	// The client is blocked, not idle: no idle deadline while it waits.
	c.mu.Lock()
	c.watching = true
	if c.armed {
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
	c.mu.Unlock()
	var (
		mu      sync.Mutex
		src     readDeadliner // once the watcher has it
		stopped bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Made here, not before the blocking command is sent: its system
		// calls would delay the command, and another client's command sent
		// just after it would overtake it more often.
		s, err := c.watchSource()
		mu.Lock()
		if stopped {
			mu.Unlock()
			if err == nil && s != c.Conn {
				s.Close()
			}
			return
		}
		src = s
		mu.Unlock()
		if err != nil {
			// No descriptor to spare: the client is taken as gone, as one
			// that failed would be, rather than waited on unwatched.
			c.mu.Lock()
			c.watchErr = err
			c.mu.Unlock()
			gone()
			return
		}
		buf := make([]byte, 4096)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				c.mu.Lock()
				c.pending = append(c.pending, buf[:n]...)
				over := int64(len(c.pending)) > c.limits.Load().MaxQueryBuffer
				if over {
					c.watchErr = &limitError{reason: "query buffer limit exceeded while blocked"}
				}
				c.mu.Unlock()
				if over {
					gone()
					return
				}
			}
			if err != nil {
				mu.Lock()
				interrupted := stopped
				mu.Unlock()
				if interrupted {
					return // stop's deadline, not the client
				}
				var pe *os.PathError
				if errors.As(err, &pe) { // the duplicate's, as the socket's would be
					err = sysio.OpError("read", c, os.NewSyscallError("read", pe.Err))
				}
				c.mu.Lock()
				c.watchErr = err
				c.mu.Unlock()
				gone()
				return
			}
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		s := src
		mu.Unlock()
		if s != nil {
			s.SetReadDeadline(time.Now())
		}
		<-done
		switch {
		case s == c.Conn:
			c.Conn.SetReadDeadline(time.Time{})
		case s != nil:
			s.Close()
		}
		c.mu.Lock()
		c.watching = false
		c.mu.Unlock()
	}
}

// readDeadliner is what a watcher reads the client through.
type readDeadliner interface {
	io.ReadCloser
	SetReadDeadline(time.Time) error
}

// watchSource returns what a watcher reads the client through. Over TCP
// the read loop may be waiting inside the socket's own read (rawRead's
// step runs the blocking command), which holds the socket's read lock, so
// the watcher reads a duplicate of its descriptor: the same socket, with a
// poller registration of its own. It is closed when the watch stops.
func (c *limitedConn) watchSource() (readDeadliner, error) {
	if c.raw == nil {
		return c.Conn, nil
	}
	dup, errno := -1, syscall.Errno(0)
	if err := c.raw.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		dup, errno = int(r), e
	}); err != nil {
		return nil, sysio.OpError("read", c, err)
	}
	if errno != 0 {
		return nil, sysio.OpError("read", c, os.NewSyscallError("fcntl", errno))
	}
	// The duplicate shares the socket's non-blocking mode, so os.NewFile
	// waits for it in the runtime's poller, deadlines included.
	return os.NewFile(uintptr(dup), "client"), nil
}

// overLimit returns the limit error that ended a watch, if one did: the
// client is then closed without its replies, as Redis closes a client whose
// query buffer overflows.
func (c *limitedConn) overLimit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if le, ok := c.watchErr.(*limitError); ok {
		return le
	}
	return nil
}

// limitError is returned from the read loop when a limit or a protocol
// error closes the client; the server's close callback logs its reason.
type limitError struct{ reason string }

func (e *limitError) Error() string { return "client input limit: " + e.reason }

// readBuffer is what a client's reads go into when the buffer should not
// be held while the client is idle: resp.RequestParser's. An interface
// over the parser, not functions made from it, since each of those would
// be an allocation every connection keeps.
type readBuffer interface {
	// ReadBufferFor returns the buffer to read into, given how many bytes
	// the socket is known to hold (0: unknown).
	ReadBufferFor(unread int) []byte
	// Release gives the buffer back: the read that took it brought none.
	Release()
	// Holding reports whether the reader holds its buffer already (a
	// command partly read).
	Holding() bool
}

func (c *limitedConn) Read(p []byte) (int, error) {
	if p == nil {
		p = []byte{} // nil asks readLazy for c.rb's buffer
	}
	return c.readLazy(p, nil)
}

// buffer is the buffer a read goes into: p, or if p is nil c.rb's.
func (c *limitedConn) buffer(p []byte) []byte {
	if p != nil {
		return p
	}
	return c.rb.ReadBufferFor(c.inq.Unread())
}

// readLazy is Read, into p; with p nil, for a caller whose buffer should
// not be held while the client is idle: c.rb's buffer is taken only once
// bytes are ready, and released when a read that took it brought none.
// Over TLS it reads into that buffer at once.
//
// With a step (and p nil), over TCP, the bytes of each read are handed to
// step from inside the socket's read, and the read goes on while step
// reports true: readLazy then returns (0, nil) once step reports false, or
// the read's error (rawRead says why). Bytes a watcher kept are returned
// as without a step, for the caller to serve.
func (c *limitedConn) readLazy(p []byte, step func(n int) bool) (int, error) {
	c.mu.Lock()
	if le, ok := c.watchErr.(*limitError); ok {
		c.mu.Unlock()
		return 0, le // over the limit while blocked: what came is dropped
	}
	if len(c.pending) > 0 {
		n := copy(c.buffer(p), c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		c.mu.Unlock()
		return n, nil
	}
	if err := c.watchErr; err != nil {
		c.mu.Unlock()
		return 0, err
	}
	if c.expired {
		// Parked past the idle timeout (the sweep resumed it to close).
		c.expired = false
		c.mu.Unlock()
		c.idleTimedOut.Store(true)
		return 0, sysio.OpError("read", c, os.ErrDeadlineExceeded)
	}
	if c.wakeAsked {
		c.wakeAsked = false
		c.mu.Unlock()
		return 0, errWake
	}
	if c.parkAsked {
		// The sweep asked while the last read returned bytes: the client
		// is not idle.
		c.parkAsked = false
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
	c.reading, c.readSince = true, c.clock()
	c.armIdleLocked(c.limits.Load().IdleTimeout)
	c.mu.Unlock()
	n, err := c.read(p, step)
	for {
		c.mu.Lock()
		timedOut := false
		if err != nil && c.armed {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				timedOut = true
			}
		}
		action := deadlineIdle
		if timedOut && n == 0 {
			action = c.afterDeadlineLocked()
		}
		if action == deadlineRearmed {
			c.mu.Unlock()
			n, err = c.read(p, step) // the client was not idle that long
			continue
		}
		c.reading = false
		c.mu.Unlock()
		if action == deadlinePark {
			return 0, errPark
		}
		if action == deadlineWake {
			return 0, errWake
		}
		if timedOut {
			c.idleTimedOut.Store(true)
		}
		break
	}
	return n, err
}

// read reads the socket once bytes are ready, into p, or with p nil into
// c.rb's buffer. Then, over TCP, the wait holds no buffer: the runtime's
// poller waits for readability and the buffer is taken only to read what
// has come.
func (c *limitedConn) read(p []byte, step func(n int) bool) (int, error) {
	if p != nil {
		return c.Conn.Read(p)
	}
	if c.raw == nil {
		return c.readTLS()
	}
	if c.rawFn == nil {
		c.rawFn = c.rawRead // one closure for the connection, not one per read
	}
	c.rawStep, c.rawStepped = step, false
	err := c.raw.Read(c.rawFn)
	n, rerr, stepped := c.rawN, c.rawErr, c.rawStepped
	c.rawStep, c.rawErr = nil, nil
	switch {
	case err != nil:
		return 0, sysio.OpError("read", c, err) // the deadline, or the socket closed
	case stepped:
		return 0, nil
	case rerr != nil:
		return 0, sysio.OpError("read", c, os.NewSyscallError("read", rerr))
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}

// tlsFirstMin and tlsFirstMax bound the buffer an idle TLS client's read
// waits in (readTLS): a few small commands, up to the parser's own read
// buffer.
const (
	tlsFirstMin = 512
	tlsFirstMax = 16 << 10
)

// readTLS is read over TLS, for a caller whose buffer should not be held
// while the client is idle. A *tls.Conn decrypts into the reader's buffer
// only once a record has come, and whether one has cannot be asked
// without reading: so the read waits in a buffer of the connection's own
// and what came is copied into c.rb's buffer (what does not fit is kept in
// pending, as a watcher's bytes are). That buffer is sized to the
// client's batches, from tlsFirstMin: doubled after a read that filled it
// (so a pipeline is served in one batch from then on, not cut where the
// buffer ends), halved after one that used an eighth of it. When the
// reader holds its buffer anyway (a command partly read), the read goes
// to it directly, so the rest of a large command is not read in pieces.
func (c *limitedConn) readTLS() (int, error) {
	if c.rb.Holding() {
		return c.Conn.Read(c.buffer(nil))
	}
	if c.tlsFirst == nil {
		c.tlsFirst = make([]byte, tlsFirstMin)
	}
	first := c.tlsFirst
	n, err := c.Conn.Read(first)
	switch {
	case n == len(first) && n < tlsFirstMax:
		c.tlsFirst = make([]byte, 2*len(first)) // what came is copied out of first below
	case n > 0 && n <= len(first)/8 && len(first) > tlsFirstMin:
		c.tlsFirst = make([]byte, len(first)/2)
	}
	if n == 0 {
		return 0, err
	}
	b := c.buffer(nil)
	m := copy(b, first[:n])
	if m < n {
		c.mu.Lock()
		c.pending = append(c.pending, first[m:n]...)
		c.mu.Unlock()
	}
	return m, err
}

// rawRead is the RawConn.Read callback of read: it reports false, having
// given the buffer back, while the socket has nothing to read.
//
// With a step, it serves each read's bytes itself and goes on. RawConn.Read
// clears the poller's note that the socket became readable before its
// first call of rawRead, so a fresh read must read once to see what came
// meanwhile; but between the calls of one RawConn.Read the note is kept,
// and the runtime's poller is edge-triggered: after a read that left the
// socket empty and open (sysio.InqReader: TCP_INQ), any byte or end that
// comes later sets the note. So such a read is followed by the wait (false)
// instead of a read that would find nothing, one system call less for each
// batch. A read that left bytes, or the client's end, is followed by
// another read. (A short read cannot tell: a client that sends and hangs
// up sets the note once, before the read of its last bytes.)
func (c *limitedConn) rawRead(fd uintptr) bool {
	for {
		b := c.buffer(nil)
		var unread bool
		c.rawN, unread, c.rawErr = c.inq.Read(fd, b) // retries EINTR itself
		if c.rawErr == syscall.EAGAIN {
			c.rb.Release() // nothing yet: wait holding no buffer
			return false
		}
		// A buffer larger than one read takes (sized for a pipeline of
		// large commands: resp.RequestParser.ReadBufferFor) is filled while
		// the socket holds bytes, so that they are served as one batch.
		for c.rawErr == nil && unread && c.rawN >= sysio.MaxCall && c.rawN < len(b) {
			n, more, err := c.inq.Read(fd, b[c.rawN:])
			if err == syscall.EAGAIN {
				unread = false
				break
			}
			if err != nil || n <= 0 {
				break // the next read returns the error, or the end, again
			}
			c.rawN += n
			unread = more
		}
		if c.rawStep == nil || c.rawErr != nil || c.rawN <= 0 {
			return true
		}
		c.mu.Lock()
		c.reading = false
		closing := c.closing
		c.stepping = !closing
		c.mu.Unlock()
		if closing {
			c.rawN = 0 // Close is closing the socket: what came is dropped
			return true
		}
		more := c.rawStep(c.rawN)
		if !c.readOn(more) {
			c.rawStepped = true
			return true
		}
		if !unread {
			return false
		}
	}
}

// readOn ends rawRead's step and reports whether its read may go on: the
// step asked to (more), Close did not begin meanwhile (its shutdown's note
// may have come before a read of bytes still queued, and no note would
// follow that read), nothing came from a watcher meanwhile and the sweep
// asked nothing; the next read then counts as idle from now.
func (c *limitedConn) readOn(more bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stepping = false
	if !more || c.closing || len(c.pending) > 0 || c.watchErr != nil || c.expired || c.parkAsked || c.wakeAsked {
		return false
	}
	c.reading, c.readSince = true, c.clock()
	c.armIdleLocked(c.limits.Load().IdleTimeout)
	return true
}

// Write writes all of p: over TCP through sysio (the scheduler keeps the
// P through the system call), else through the wrapped connection.
func (c *limitedConn) Write(p []byte) (int, error) {
	if c.raw == nil {
		return c.Conn.Write(p)
	}
	n, err := c.w.Write(p)
	if err != nil {
		return n, sysio.OpError("write", c, err)
	}
	return n, nil
}
