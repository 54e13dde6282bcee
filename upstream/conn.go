package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/internal/sysio"
	"github.com/rproxy/rproxy/resp"
)

// maxWriteRetained bounds the write chunks a shared connection keeps for
// its next writes (writeQueue). There are only a few shared connections.
// Large commands are borrowed, not copied, on plain sockets; over TLS they
// are copied, and with 100 KB values one write of ten clients' commands
// passes 1 MB: dropping its chunks each time cost 9% of the proxy's CPU.
const maxWriteRetained = 8 << 20

// readBufSize is the reader's buffer: large enough that a burst of pipelined
// replies is framed from one read.
const readBufSize = 64 << 10

// conn is one shared upstream connection and the goroutine that keeps it up.
type conn struct {
	pool *Pool
	id   int

	mu          sync.Mutex
	nc          net.Conn   // nil while down
	downReason  string     // why the connection is down (for the clients' error)
	closeReason string     // set by whoever closes nc, read by run
	inflight    []*Batch   // batches sent or queued, oldest first
	head        int        // inflight[head] is the oldest
	wq          writeQueue // bytes queued for the next write
	wcount      int        // commands in wq
	wqNext      writeQueue // the previous write's queue, emptied: its slices reused
	freeChunks  [][]byte   // emptied chunks, reused (up to maxWriteRetained bytes)
	// rawOut: nc's socket when nc is a plain one (sysio.Conn), written by
	// vectored calls; then wq borrows large commands (writeQueue). nil
	// while down, or over TLS.
	rawOut syscall.RawConn

	// out is the queue the writer writes (swapped in from wq under mu and
	// wmu). wmu is held by the writer around each write call, and by a
	// drain while it recalls what out borrows (writeQueue.recall): so no
	// call reads a borrowed command once its batch is failed.
	wmu     sync.Mutex
	out     writeQueue
	iov     []syscall.Iovec    // the writer's vector, one call's
	werr    error              // the writer's last call's error
	writeFn func(uintptr) bool // writeVectored, made once
	wake    chan struct{}
	unsent  []*Batch // batches whose bytes are in wq, not yet taken by the writer

	lastProgress atomic.Int64 // unix nanos of the last reply bytes (or of the first request after idle)
	shut         atomic.Bool  // nc was shut down (closeLocked): its reader stops
	// backlog is the sizes (Batch.size: commands and expected replies) of
	// the batches in inflight (queued, or written and not all answered):
	// how much Redis has yet to read, run and write back before a batch
	// sent now is answered (Config.BacklogDivert).
	// Changed under mu, read without it.
	backlog atomic.Int64

	// isSpare: one of the pool's spare connections (StallDivert, BacklogDivert),
	// which neither counts for the pool's first dial nor calls OnState;
	// firstUp, made by each start of it, is closed when that run is first
	// up. stalled: the pool's watcher found it stalled for StallDivert.
	isSpare bool
	firstUp chan struct{}
	stalled atomic.Bool
	// gate: the pool's dial gate this connection's next dial reports to
	// (nil once reported; not for spares). redialNow: the master changed
	// (masterChanged): the next dial goes at once, without the backoff.
	gate      atomic.Pointer[dialGate]
	redialNow atomic.Bool
	// heldBefore: the watcher's last look past Timeout found Redis holding
	// the connection's command (a write pause): the watcher's own state.
	heldBefore atomic.Bool

	// draining (under mu): its requests timed out and were failed
	// (startDrain), but what was written sits in Redis's socket buffer and
	// runs once Redis reads it. The connection stays open, takes no new
	// batch, and its reader drops the replies to those commands; the
	// pool's sends wait meanwhile (Pool.awaitDrains), so that no command
	// written later runs before one reported failed. drainSince: when it
	// began; drainReason: the timeout's error.
	draining    bool
	drainSince  time.Time
	drainReason string

	// rmu is held by the reader while it frames a read, and by startDrain
	// while it takes the waiting batches from it: reader is its state.
	rmu    sync.Mutex
	reader replyReader
}

func newConn(p *Pool, id int) *conn {
	c := &conn{pool: p, id: id, downReason: "connecting", wake: make(chan struct{}, 1),
		iov: make([]syscall.Iovec, 0, sysio.MaxVec)}
	c.writeFn = c.writeVectored
	return c
}

// localAddr is the connection's local address (the addr Redis lists it
// by), "" while down.
func (c *conn) localAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc == nil {
		return ""
	}
	return c.nc.LocalAddr().String()
}

func (c *conn) up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc != nil
}

// send queues b on this connection and wakes its writer. It returns false,
// with the reason, when the connection is down.
func (c *conn) send(b *Batch) (string, bool) {
	c.mu.Lock()
	if c.nc == nil || c.closeReason != "" || c.draining {
		// Down, or closing: what is queued now would only fail with it
		// (or, after a change of master, reach the old one). Draining: it
		// would run after the commands that timed out.
		r := c.downReason
		switch {
		case c.draining:
			r = c.drainReason
		case c.nc != nil:
			r = c.closeReason
		}
		c.mu.Unlock()
		return r, false
	}
	if c.head == len(c.inflight) {
		c.lastProgress.Store(c.pool.cfg.Now().UnixNano())
	}
	c.inflight = append(c.inflight, b)
	c.unsent = append(c.unsent, b)
	borrow := c.rawOut != nil
	b.size = b.lastReplies
	for _, cmd := range b.cmds {
		c.wq.add(cmd, &c.freeChunks, borrow)
		b.size += len(cmd)
	}
	c.backlog.Add(int64(b.size))
	c.wcount += len(b.cmds)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default: // the writer is already due to run
	}
	return "", true
}

// writeLoop writes whatever is queued, as one write, each time it is woken,
// until the connection fails. The time it takes to wake up is what lets
// commands from many clients gather into one write: this is where upstream
// pipelining happens.
func (c *conn) writeLoop(nc net.Conn, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-c.wake:
		}
		c.gather()
		c.mu.Lock()
		if c.nc != nc {
			c.mu.Unlock()
			return
		}
		if c.wq.n == 0 && len(c.unsent) == 0 {
			// A wake for commands an earlier write already took (a send
			// during the gather leaves one behind): nothing to write, and
			// nothing to swap.
			c.mu.Unlock()
			continue
		}
		// Double buffering: senders fill the next queue while out is
		// written.
		count, size := c.wcount, c.wq.n
		c.wmu.Lock()
		c.out, c.wq = c.wq, c.wqNext
		c.wmu.Unlock()
		c.wcount, c.wqNext = 0, writeQueue{}
		rc := c.rawOut
		seq := c.pool.cfg.SendSeq.Add(1)
		for i, b := range c.unsent {
			b.sentSeq.Store(seq)
			b.sent.Store(true) // its bytes are in out, about to be written
			c.unsent[i] = nil
		}
		c.unsent = c.unsent[:0]
		c.mu.Unlock()
		err := c.writeOut(nc, rc)
		c.pool.metrics.observeWrite(count, size)
		c.mu.Lock()
		c.wmu.Lock()
		c.out.reset(&c.freeChunks)
		c.wqNext, c.out = c.out, writeQueue{}
		c.wmu.Unlock()
		if err != nil {
			c.pool.metrics.errors.WithLabelValues("write").Inc()
			c.closeLocked("write: " + err.Error())
			c.mu.Unlock()
			return // run fails everything queued, written or not
		}
		c.mu.Unlock()
	}
}

// writeOut writes c.out: by vectored calls on the plain socket rc, or
// segment by segment through nc (rc nil: TLS, where nothing is borrowed,
// so a drain's recall has nothing to change under it).
func (c *conn) writeOut(nc net.Conn, rc syscall.RawConn) error {
	if rc == nil {
		for _, s := range c.out.segs {
			if _, err := nc.Write(s); err != nil {
				return err
			}
		}
		return nil
	}
	c.werr = nil
	err := rc.Write(c.writeFn)
	if err == nil {
		err = c.werr
	}
	if err != nil {
		return sysio.OpError("write", nc, err)
	}
	return nil
}

// writeVectored is rc.Write's callback: it writes c.out until all is
// written (true) or the socket is full (false: wait for room).
func (c *conn) writeVectored(fd uintptr) bool {
	for {
		c.wmu.Lock()
		iov := c.out.next(c.iov, sysio.MaxCall)
		if len(iov) == 0 {
			c.wmu.Unlock()
			return true
		}
		n, err := sysio.Writev(fd, iov)
		if err == nil {
			c.out.advance(n)
		}
		clear(iov) // no reference to what was written outlives the call
		c.wmu.Unlock()
		if err == syscall.EAGAIN {
			return false
		}
		if err != nil {
			c.werr = os.NewSyscallError("writev", err)
			return true
		}
	}
}

// closeWith closes the live connection, if any, recording why.
func (c *conn) closeWith(reason string) {
	c.mu.Lock()
	c.closeLocked(reason)
	c.mu.Unlock()
}

func (c *conn) closeLocked(reason string) {
	if c.nc == nil {
		return
	}
	if c.closeReason == "" {
		c.closeReason = reason
	}
	// The reader may be inside its read waiting for c.mu (ReadEach), and
	// Close waits for the read to return: shut the socket down instead,
	// which ends the read once what came is read; run closes the socket.
	if sd, ok := c.nc.(shutdowner); ok {
		c.shut.Store(true) // before the shutdown, whose note wakes the reader
		sd.Shutdown()
		return
	}
	c.nc.Close()
}

// stalledSince returns how long requests have waited with no reply progress,
// or 0 when nothing waits.
func (c *conn) stalledSince(now int64) time.Duration {
	c.mu.Lock()
	waiting := c.nc != nil && c.head < len(c.inflight)
	c.mu.Unlock()
	if !waiting {
		return 0
	}
	return time.Duration(now - c.lastProgress.Load())
}

// markWaitingStalled marks every batch waiting on c, and the batch each
// was split from, stalled (Batch.Stalled): c is.
func (c *conn) markWaitingStalled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.inflight[c.head:] {
		b.stalled.Store(true)
		if b.parent != nil {
			b.parent.stalled.Store(true)
		}
	}
}

// startDrain fails the batches waiting on c, whose oldest request has had
// no reply for Config.Timeout, with reason, and keeps the connection to
// read the replies to what was written (draining). Closing it instead
// would not undo those commands: Redis has them in its socket buffer and
// runs them when it resumes, possibly after a later command of the same
// client sent on another connection that Redis happens to read first.
// The pool's sends wait until the replies are in, or the connection ends
// (Redis gone: nothing buffered can run any more), or the watcher gives
// up on it after drainLimit.
func (c *conn) startDrain(reason string) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	if c.nc == nil || c.closeReason != "" || c.draining {
		c.mu.Unlock()
		return
	}
	left := 0 // replies still to come for what was written
	for _, b := range c.inflight[c.head:] {
		if b.Sent() {
			left += len(b.cmds) - len(b.replyEnds)
		}
	}
	if left == 0 {
		// Nothing written waits: the writer itself is stuck. Reset the
		// connection as before drains; run fails what is queued.
		c.closeLocked(reason)
		c.mu.Unlock()
		return
	}
	failed := slices.Clone(c.inflight[c.head:])
	clear(c.inflight)
	c.inflight, c.head = c.inflight[:0], 0
	c.backlog.Store(0)
	c.wq.reset(&c.freeChunks) // the unsent batches' bytes: never written now
	c.wcount = 0
	// The written batches are failed below, and so are their callers'
	// again: the rest of their bytes is written from copies.
	c.wmu.Lock()
	c.out.recall()
	c.wmu.Unlock()
	clear(c.unsent)
	c.unsent = c.unsent[:0]
	c.draining, c.drainSince, c.drainReason = true, c.pool.cfg.Now(), reason
	c.mu.Unlock()
	r := &c.reader
	r.drainLeft = left
	if r.cur != nil && r.cur != &r.discard {
		// The reply under way goes on into the sink (a push's first bytes
		// with it).
		r.discard.replies = append(r.discard.replies[:0], r.cur.replies[r.start:]...)
		r.cur, r.start = &r.discard, 0
	}
	// The gate closes before any client hears of the failure, so that a
	// client's next command waits for it.
	c.pool.drainBegan()
	line := unavailable(reason)
	for _, b := range failed {
		b.sent.Store(true) // an unsent one is never written now; no one may join it
		b.truncateToComplete()
		b.fail(line)
	}
}

// endDrain marks the drain over (its replies are in, or the connection
// ended) and opens the pool's gate; answered: Redis answered every command
// that timed out, and the connection takes batches again.
func (c *conn) endDrain(answered bool) {
	c.mu.Lock()
	was := c.draining
	c.draining = false
	c.mu.Unlock()
	if was {
		c.pool.drainEnded(answered)
	}
}

// drainingFor is how long c has drained, or 0 when it does not.
func (c *conn) drainingFor(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.draining {
		return 0
	}
	return max(now.Sub(c.drainSince), time.Nanosecond)
}

// front returns the oldest waiting batch, or nil.
func (c *conn) front() *Batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head == len(c.inflight) {
		return nil
	}
	return c.inflight[c.head]
}

// popFront removes the oldest batch once all its replies are in.
func (c *conn) popFront() {
	c.mu.Lock()
	c.backlog.Add(-int64(c.inflight[c.head].size))
	c.inflight[c.head] = nil
	c.head++
	if c.head == len(c.inflight) {
		c.inflight, c.head = c.inflight[:0], 0
	}
	c.mu.Unlock()
}

// run dials, serves and redials the connection until ctx ends.
func (c *conn) run(ctx context.Context) {
	cfg := c.pool.cfg
	log := c.pool.log.With(zap.Int("conn", c.id))
	backoff := cfg.BackoffMin
	wasUp := true // log the first failure
	buf := make([]byte, readBufSize)
	first := true
	for ctx.Err() == nil {
		nc, err := c.dial(ctx)
		if err != nil {
			c.mu.Lock()
			c.downReason = err.Error()
			c.mu.Unlock()
			c.pool.metrics.errors.WithLabelValues("dial").Inc()
			if wasUp {
				log.Warn("upstream connect failed", zap.Error(err))
				wasUp = false
			} else {
				log.Debug("upstream connect failed", zap.Error(err), zap.Duration("backoff_seconds", backoff))
			}
			if c.redialNow.Swap(false) {
				// The master changed during the dial: dial the new one at
				// once. The gate masterChanged gave it waits for that dial,
				// not this one, which was to the old master.
				continue
			}
			if g := c.gate.Swap(nil); g != nil {
				g.dialed(false)
			}
			if !c.pool.backoff(ctx, backoff) {
				break
			}
			backoff = min(backoff*2, cfg.BackoffMax)
			continue
		}
		c.mu.Lock()
		if ctx.Err() != nil {
			// Close ran while this dial was finishing: it could not see nc.
			c.mu.Unlock()
			nc.Close()
			break
		}
		c.nc, c.closeReason = nc, ""
		c.rawOut = nil
		if sc, ok := nc.(*sysio.Conn); ok {
			c.rawOut, _ = sc.SyscallConn()
		}
		c.shut.Store(false)
		c.mu.Unlock()
		if first && c.isSpare {
			close(c.firstUp)
		}
		first = false
		if g := c.gate.Swap(nil); g != nil {
			g.dialed(true)
		}
		c.pool.metrics.connected.Inc()
		c.pool.metrics.connects.Inc()
		log.Info("upstream connected", zap.String("local", nc.LocalAddr().String()))
		if cfg.OnState != nil && !c.isSpare {
			cfg.OnState(true)
		}
		upSince := cfg.Now()
		stopWriter := make(chan struct{})
		writerDone := make(chan struct{})
		go func() {
			defer close(writerDone)
			c.writeLoop(nc, stopWriter)
		}()

		err = c.readLoop(nc, buf)
		nc.Close()
		close(stopWriter)
		<-writerDone
		c.endDrain(false) // what it had written can no longer run

		c.mu.Lock()
		reason := c.closeReason
		if reason == "" {
			reason = readErrorReason(err)
			c.pool.metrics.errors.WithLabelValues("read").Inc()
		}
		// A connection that lived a while (closed by Redis's idle timeout,
		// a CLIENT KILL, a restart) is dialled again at once, and commands
		// that find no connection up meanwhile wait for that dial: joined
		// before this one is marked down, so none fails in between.
		quick := c.redialNow.Load() || cfg.Now().Sub(upSince) >= quickRedialAfter
		if quick && ctx.Err() == nil && !c.isSpare && c.gate.Load() == nil {
			if g := c.pool.joinGate(); !c.gate.CompareAndSwap(nil, g) {
				g.dialed(false) // masterChanged gave it a gate meanwhile: this join is no dial of its own
			}
		}
		nc.Close()
		c.nc, c.downReason, c.rawOut = nil, reason, nil
		failed := c.inflight[c.head:]
		var resend []*Batch
		if n := len(c.unsent); c.redialNow.Load() && n <= len(failed) {
			// The master changed: what was never written goes to the new
			// one (the unsent batches are the newest in flight).
			failed, resend = failed[:len(failed)-n], slices.Clone(c.unsent)
		}
		c.inflight, c.head = nil, 0
		c.backlog.Store(0)
		c.wq.reset(&c.freeChunks)
		c.wcount = 0
		for _, b := range c.unsent {
			b.sent.Store(true) // never written now; no one may join it
		}
		c.unsent = nil
		c.mu.Unlock()
		if len(resend) > 0 {
			go func() {
				for _, b := range resend {
					c.pool.Send(b) // waits for the new master's first connection (the gate)
				}
			}()
		}
		c.pool.metrics.connected.Dec()
		if cfg.OnState != nil && !c.isSpare {
			cfg.OnState(false)
		}
		lost := log.Warn
		if ctx.Err() != nil {
			lost = log.Info // shutting down: expected
		}
		lost("upstream connection lost", zap.String("reason", reason), zap.Int("failed_batches", len(failed)))

		line := unavailable(reason)
		for _, b := range failed {
			b.truncateToComplete()
			b.fail(line)
		}
		wasUp = true
		if cfg.Now().Sub(upSince) > cfg.BackoffMax {
			backoff = cfg.BackoffMin
		}
		if c.redialNow.Swap(false) || quick {
			backoff = cfg.BackoffMin
			continue // a new master, or a connection that lived: dial at once
		}
		if !c.pool.backoff(ctx, backoff) {
			break
		}
		backoff = min(backoff*2, cfg.BackoffMax)
	}
	c.mu.Lock()
	c.downReason = "proxy shutting down"
	c.mu.Unlock()
	if g := c.gate.Swap(nil); g != nil {
		g.dialed(false)
	}
}

// quickRedialAfter: a connection up at least this long is dialled again
// at once when it ends; one that ends sooner (a server that accepts and
// drops) waits the reconnect backoff.
const quickRedialAfter = time.Second

func readErrorReason(err error) string {
	switch {
	case err == nil:
		return "connection closed"
	case errors.Is(err, errUnexpectedReply):
		return err.Error()
	default:
		return "read: " + err.Error()
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// dial connects and performs the handshake (HELLO 3 for RESP3 pools).
func (c *conn) dial(ctx context.Context) (net.Conn, error) {
	nc, err := c.pool.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.pool.setup(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// handshake sends one command and requires a non-error reply.
func handshake(nc net.Conn, deadline time.Time, cmd []byte) error {
	_, err := roundTrip(nc, deadline, cmd)
	return err
}

// roundTrip sends cmd on a connection nothing else uses and returns its one
// reply; an error reply is returned as an error.
func roundTrip(nc net.Conn, deadline time.Time, cmd []byte) ([]byte, error) {
	if err := nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(cmd); err != nil {
		return nil, err
	}
	var fr resp.Framer
	var reply []byte
	buf := make([]byte, 4096)
	for {
		n, err := nc.Read(buf)
		if n > 0 {
			k, done, ferr := fr.Next(buf[:n])
			if ferr != nil {
				return nil, ferr
			}
			reply = append(reply, buf[:k]...)
			if done {
				if k != n {
					return nil, errors.New("unexpected data after the reply")
				}
				if reply[0] == '-' || reply[0] == '!' {
					return nil, &errorReply{reply: reply}
				}
				return reply, nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

var errUnexpectedReply = errors.New("reply with no request waiting")

// errorReply is roundTrip's error for an error reply.
type errorReply struct{ reply []byte }

func (e *errorReply) Error() string { return fmt.Sprintf("server replied %q", string(e.reply)) }

// roleUnknown reports whether err is an error reply that tells nothing of
// the server's role: the upstream user may not run ROLE (NOPERM), or Redis
// runs a script past its busy threshold and answers few commands, ROLE not
// among them (BUSY).
func roleUnknown(err error) bool {
	var e *errorReply
	return errors.As(err, &e) && (bytes.HasPrefix(e.reply, []byte("-NOPERM")) || bytes.HasPrefix(e.reply, []byte("-BUSY")))
}

// errShut ends a read loop whose connection closeLocked shut down.
var errShut = errors.New("connection shut down by the proxy")

// readEacher is a connection that reads in a loop of its own and hands
// each read's bytes to a function (sysio.Conn: one system call per time
// bytes come, where Read's loop makes one more that finds nothing).
type readEacher interface {
	ReadEach(buf []byte, each func(p []byte) error) error
}

// shutdowner is a connection that can be shut down without waiting for a
// read under way (sysio.Conn).
type shutdowner interface {
	Shutdown() error
}

// readLoop frames replies and hands each to the oldest waiting batch, until
// the connection fails. Replies are appended to the batch byte for byte.
func (c *conn) readLoop(nc net.Conn, buf []byte) error {
	c.rmu.Lock()
	c.reader.reset(c)
	c.rmu.Unlock()
	r := &c.reader
	if re, ok := nc.(readEacher); ok {
		return re.ReadEach(buf, func(p []byte) error {
			if err := r.feed(p); err != nil {
				return err
			}
			if c.shut.Load() {
				// Shut down (closeLocked): its end may never set the
				// poller's note again once read past (TCP_INQ does not
				// report a local shutdown), so the loop stops here.
				return errShut
			}
			return nil
		})
	}
	for {
		n, err := nc.Read(buf)
		if n > 0 {
			if ferr := r.feed(buf[:n]); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			return err
		}
	}
}

// readOnlyPrefix starts a replica's refusal of a write (MasterFollow).
var readOnlyPrefix = []byte("-READONLY ")

// replyReader is readLoop's state: the replies framed so far.
type replyReader struct {
	c       *conn
	fr      resp.Framer
	cur     *Batch // batch receiving the current reply
	start   int    // where the current reply starts in cur.replies
	discard Batch  // receives out-of-band pushes when nothing waits, and a drain's replies
	// drainLeft: replies still to drop for the batches startDrain failed.
	drainLeft int
}

// reset readies the reader for a new connection of c.
func (r *replyReader) reset(c *conn) {
	r.c, r.fr, r.cur, r.start, r.drainLeft = c, resp.Framer{}, nil, 0, 0
	r.discard.replies = r.discard.replies[:0]
}

// feed frames the bytes of one read, which has just returned.
func (r *replyReader) feed(p []byte) error {
	c := r.c
	c.pool.metrics.bytesIn.Add(float64(len(p)))
	c.rmu.Lock()
	defer c.rmu.Unlock()
	readSeq := c.pool.cfg.SendSeq.Load() // writes numbered after this came after the read
	c.lastProgress.Store(c.pool.cfg.Now().UnixNano())
	for len(p) > 0 {
		if r.cur == nil && r.drainLeft > 0 {
			r.cur, r.start = &r.discard, 0
			r.discard.replies = r.discard.replies[:0]
		}
		if r.cur == nil {
			// A batch the writer took after this read returned
			// cannot be answered by it: such bytes are a stray
			// reply (the connection is then reset), not its answer.
			if r.cur = c.front(); r.cur == nil || !r.cur.Sent() || r.cur.SentSeq() > readSeq {
				r.cur = &r.discard
				r.discard.replies = r.discard.replies[:0]
			}
			r.start = len(r.cur.replies)
		}
		cur := r.cur
		k, done, ferr := r.fr.Next(p)
		if ferr != nil {
			return fmt.Errorf("%w: bad reply from upstream: %v", errUnexpectedReply, ferr)
		}
		cur.replies = append(cur.replies, p[:k]...)
		p = p[k:]
		if !done {
			continue
		}
		if r.fr.Kind() == '>' {
			// A push (RESP3 out-of-band data) belongs to no request.
			if onPush := c.pool.cfg.OnPush; onPush != nil {
				onPush(cur.replies[r.start:])
			}
			cur.replies = cur.replies[:r.start]
			if cur == &r.discard {
				r.cur = nil
			}
			continue
		}
		if cur == &r.discard {
			if r.drainLeft == 0 {
				return fmt.Errorf("%w: %q", errUnexpectedReply, truncate(cur.replies, 64))
			}
			r.cur = nil
			if r.drainLeft--; r.drainLeft == 0 {
				if cap(r.discard.replies) > maxRetained {
					r.discard.replies = nil // a large reply dropped: not kept for the pushes
				}
				c.endDrain(true)
			}
			continue
		}
		if r.fr.Kind() == '-' && c.pool.cfg.Follow != nil && bytes.HasPrefix(cur.replies[r.start:], readOnlyPrefix) {
			c.pool.cfg.Follow.readOnly(c.pool.cfg.Address)
		}
		cur.replyEnds = append(cur.replyEnds, len(cur.replies))
		r.start = len(cur.replies)
		if cur.complete() {
			c.popFront()
			cur.done <- struct{}{}
			r.cur = nil
		}
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// truncateToComplete drops a partially received reply before the batch is failed.
func (b *Batch) truncateToComplete() {
	end := 0
	if len(b.replyEnds) > 0 {
		end = b.replyEnds[len(b.replyEnds)-1]
	}
	b.replies = b.replies[:end]
}

// gather yields so that client goroutines made runnable in the same network
// poll queue their commands before this write, as twemproxy's event loop
// batches what one epoll cycle delivered. It keeps yielding while the queue
// grows, a few times at most.
func (c *conn) gather() {
	if c.pool.cfg.GatherYields <= 0 {
		return
	}
	n := c.queued()
	for i := 0; i < c.pool.cfg.GatherYields; i++ {
		runtime.Gosched()
		m := c.queued()
		if m == n {
			return
		}
		n = m
	}
}

// queued measures the activity gather watches: bytes queued, plus any
// progress the pool's config counts (reads joining coalesced flights).
func (c *conn) queued() uint64 {
	c.mu.Lock()
	n := uint64(c.wq.n)
	c.mu.Unlock()
	if p := c.pool.cfg.GatherProgress; p != nil {
		n += p()
	}
	return n
}
