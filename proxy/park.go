package proxy

import (
	"errors"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/internal/sysio"
)

// Parking idle clients. A client's read loop runs on a goroutine of its
// own, and a goroutine that has served requests keeps a stack of 4 KB or
// more while it waits (the runtime shrinks a parked stack only when under a
// quarter of it is in use), about as much as the rest of an idle
// connection's memory.
// So a client that has sent nothing for Config.IdleParkAfter is parked: its
// read loop returns, its goroutine ends, and its socket waits in the idle
// poller (internal/idlepoll, one goroutine for all of them). When the
// client sends again (or hangs up, or is closed by the proxy) a new
// goroutine runs the read loop from the top: every state it needs is in
// clientConn and session, not on the stack.
//
// Which clients are idle is found by the park sweep (parkSweep): every
// IdleParkAfter/2 it asks each client whose read has waited IdleParkAfter
// to park, by setting that read's deadline to now. A busy client's reads
// thus set no deadline of their own, and no timer fires for them. A shorter
// IdleParkAfter parks clients sooner, at the price of a new goroutine for
// each request of a client that pauses longer: fewer goroutines are alive
// at once while clients connect, and the runtime keeps the descriptor of
// every goroutine ever alive at once (about 0.5 KB each).
//
// Parked clients do not read, so the same sweep closes those idle for the
// idle timeout, and a reload that lowers it closes them at once (setIdle).

// defaultIdleParkAfter is Config.IdleParkAfter's default.
const defaultIdleParkAfter = 250 * time.Millisecond

// The stacks of the goroutines that parked clients ended go back to the
// heap only at a garbage collection, and from the heap to the system only
// down to the scavenger's goal, which with the GOGC of 400 main sets is
// five times the live heap: a burst of parked clients would keep their
// stacks' memory. So parkReleaseAfter parks start a collection that
// returns all free memory (debug.FreeOSMemory), once no client has parked
// for parkReleaseDelay: after the burst, whose parks it covers. It holds
// the heap lock while it returns the memory (9-13 ms after 3,000 parks on
// the 2-core VM), once per burst.
const (
	parkReleaseAfter = 1024
	parkReleaseDelay = time.Second
)

// errPark ends a read that waited IdleParkAfter: the read loop parks.
var errPark = errors.New("idle: park")

// errParked is what a parked read loop returns: the session goes on.
var errParked = errors.New("parked")

// park hands c's socket to the idle poller and reports true; the caller's
// read loop must then return without touching c again, since c may resume
// on another goroutine at once. False (the session holds something for the
// read loop, or the poller refused) leaves the read loop reading.
func (s *Server) park(c *clientConn, lc *limitedConn) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if c.parser.Buffered() || c.wbuf != nil || len(lc.pending) > 0 || lc.watchErr != nil || lc.noIdle || lc.watching {
		return false
	}
	var fd int
	if err := lc.raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return false // closed meanwhile: the next read says so
	}
	c.parser.Release()
	c.cmds = nil
	c.ss.releaseIdle()
	tok, err := lc.poller.Wait(fd, lc)
	if err != nil {
		s.log.Warn("idle client not parked: parking turned off for it", zap.Error(err))
		lc.poller = nil
		return false
	}
	lc.fd, lc.token, lc.parked = fd, tok, true
	s.metrics.parked.Inc()
	s.lastPark.Store(time.Now().UnixNano())
	if s.parks.Add(1) == parkReleaseAfter {
		s.releaseAfterParks()
	}
	return true
}

// Ready is the idle poller's call: the parked client sent something, hung
// up, or both. Its read loop runs again on a new goroutine.
func (c *limitedConn) Ready() {
	c.mu.Lock()
	c.parked = false
	c.mu.Unlock()
	go c.resume()
}

// Close closes the socket; a parked client's read loop is started again to
// find it closed and end the session, as a reading one would.
//
// While the read loop serves a batch from inside the socket's read
// (rawRead's step), the runtime's close would wait for that read to
// return: from the step's own goroutine never, and from another one holding
// a lock the step needs (CLIENT LIST's) a deadlock. So then Close only
// shuts the socket down, which the client sees at once and every read of it
// (the read loop's, a watcher's duplicate) finds as the end, and the read
// loop closes the socket when it ends, as it always does. No step starts
// once Close has begun, so otherwise the close waits at most for a read
// that the close itself wakes.
func (c *limitedConn) Close() error {
	c.mu.Lock()
	wasParked := c.unparkLocked()
	inStep := c.stepping
	c.closing = true
	c.mu.Unlock()
	if inStep {
		sysio.Shutdown(c.raw)
		return nil
	}
	// Only after the poller has let go of the descriptor: closed first, its
	// number could be reused by a connection the poller then confuses.
	err := c.Conn.Close()
	if wasParked {
		go c.resume()
	}
	return err
}

// unparkLocked takes a parked client back from the poller, reporting
// whether it was parked (false: not parked, or Ready is on its way).
func (c *limitedConn) unparkLocked() bool {
	if !c.parked || !c.poller.Cancel(c.fd, c.token) {
		return false
	}
	c.parked = false
	return true
}

// expireParked closes a parked client idle for the idle timeout d or more,
// by resuming its read loop to report the timeout.
func (c *limitedConn) expireParked(d time.Duration) {
	c.mu.Lock()
	expired := c.expireLocked(time.Now(), d)
	c.mu.Unlock()
	if expired {
		go c.resume()
	}
}

// expireLocked takes back from the poller a parked client idle for d or
// more and marks it expired; the caller then resumes it (true).
func (c *limitedConn) expireLocked(now time.Time, d time.Duration) bool {
	if d <= 0 || !c.parked || now.Sub(c.readSince) < d || !c.unparkLocked() {
		return false
	}
	c.expired = true
	return true
}

// releaseAfterParks returns the free memory to the system once no client
// has parked for parkReleaseDelay.
func (s *Server) releaseAfterParks() {
	time.AfterFunc(parkReleaseDelay, func() {
		if quiet := time.Duration(time.Now().UnixNano() - s.lastPark.Load()); quiet < parkReleaseDelay {
			s.releaseAfterParks() // the burst goes on
			return
		}
		n := s.parks.Swap(0) // parks from now on count towards the next
		start := time.Now()
		debug.FreeOSMemory()
		s.log.Debug("memory of parked clients' goroutines returned", zap.Int64("parks", n), zap.Duration("took_seconds", time.Since(start)))
	})
}

// parkSweep runs every parkAfter/2 until stop is closed: it asks each
// client whose read has waited parkAfter to park, and closes the parked
// clients idle for the idle timeout.
func (s *Server) parkSweep(stop <-chan struct{}) {
	t := time.NewTicker(s.parkAfter / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// Not the coarse clock: reading it would keep its ticker going
		// while the proxy is idle (clock.go).
		now := time.Now()
		idle := s.limits.Load().IdleTimeout
		s.sessions.each(func(ss *session) {
			if lc, ok := ss.conn.nc.(*limitedConn); ok && lc.poller != nil {
				lc.sweep(now, s.parkAfter, idle)
			}
		})
	}
}

// sweep is the park sweep's visit to one client, under one lock: a read
// that has waited after is woken to park; a parked client idle for the idle
// timeout idle is resumed to be closed.
func (c *limitedConn) sweep(now time.Time, after, idle time.Duration) {
	c.mu.Lock()
	if c.reading && !c.parkAsked && !c.noIdle && !c.watching && now.Sub(c.readSince) >= after {
		c.parkAsked = true
		c.Conn.SetReadDeadline(now)
		c.armed, c.deadline = true, now
	}
	expired := c.expireLocked(now, idle)
	c.mu.Unlock()
	if expired {
		go c.resume()
	}
}
