package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/rproxy/rproxy/resp"
)

// Histogram range and precision, in microseconds.
const (
	histMin    = 1
	histMax    = 60_000_000 // 60 s
	histDigits = 3
)

// op is one command of the batch in flight.
type op struct {
	// intended is the open-loop send time, in nanoseconds since the run's
	// base time: latency counts from it, so time spent waiting behind a
	// stall is charged to the command.
	intended int64
	get      bool
	measured bool // sent (or, in open loop, due) after the warm-up
}

// clientStats is what one client measured; Run merges them.
type clientStats struct {
	ops, reads, writes, hits, nulls, errors int64

	// errorsByType has pointer values so that counting a known error word
	// is a lookup, which does not allocate, rather than an assignment.
	errorsByType map[string]*int64

	total  int64 // commands sent, warm-up included
	unsent int64 // open loop: due before the end but never sent
	endAt  int64 // ns since base when the client stopped

	hist    *hdrhistogram.Histogram // latency as reported: from the intended send in open loop
	service *hdrhistogram.Histogram // open loop only: from the actual send
	lag     *hdrhistogram.Histogram // open loop only: actual minus intended send

	connErr     error // why the connection broke, if it did
	interrupted bool  // the caller's context ended the run
}

// client drives one connection. Everything the hot path touches is
// allocated in newClient and reused.
type client struct {
	id   int
	cfg  *Config
	gen  KeyGen
	rng  *rand.Rand
	conn net.Conn
	w    *wire
	base time.Time

	key        []byte // KeyPrefix, then the decimal rank, rewritten per command
	out        []byte // the batch being written
	ops        []op   // len Pipeline
	cmdGet     []byte
	cmdSet     []byte
	cmdEX      []byte
	ttl        []byte // decimal TTL, or nil for no EX
	value      []byte
	readRatio  float64
	timer      *time.Timer // reused by sleepUntil
	warmupNs   int64
	endNs      int64 // end of measurement; 0 when only Requests limits the run
	graceNs    int64 // Timeout: how long past endNs an open-loop backlog may still be sent
	quota      int64 // measured commands still to send; -1 for no limit
	open       bool
	intervalNs float64 // open loop: per-client gap between intended sends
	phaseNs    float64 // open loop: this client's offset, to spread clients evenly
	k          int64   // open loop: index of the next command in the schedule

	stats clientStats
}

// newClient sets up client id, the slot-th of peers connected clients
// (slot 0..peers-1). The seed depends on id alone, so a client issues the
// same commands whichever others connected; the quota and the open-loop
// schedule are shared among the clients that did connect.
func newClient(id, slot, peers int, cfg *Config, gen KeyGen, conn net.Conn, base time.Time) *client {
	c := &client{
		id:        id,
		cfg:       cfg,
		gen:       gen,
		rng:       rand.New(rand.NewPCG(cfg.Seed, uint64(id))),
		conn:      conn,
		w:         newWire(conn, base),
		base:      base,
		key:       append(make([]byte, 0, len(cfg.KeyPrefix)+20), cfg.KeyPrefix...),
		out:       make([]byte, 0, cfg.Pipeline*(64+len(cfg.KeyPrefix)+cfg.ValueSize)),
		ops:       make([]op, cfg.Pipeline),
		cmdGet:    []byte("GET"),
		cmdSet:    []byte("SET"),
		cmdEX:     []byte("EX"),
		value:     makeValue(cfg.ValueSize),
		readRatio: cfg.ReadRatio,
		timer:     time.NewTimer(time.Hour),
		warmupNs:  int64(cfg.Warmup),
		graceNs:   int64(cfg.Timeout),
		quota:     -1,
		open:      cfg.Rate > 0,
		stats: clientStats{
			errorsByType: map[string]*int64{},
			hist:         newHist(),
		},
	}
	c.timer.Stop() // armed only by sleepUntil
	if cfg.TTL > 0 {
		c.ttl = strconv.AppendInt(nil, int64(cfg.TTL), 10)
	}
	if cfg.Duration > 0 {
		c.endNs = int64(cfg.Warmup + cfg.Duration)
	}
	if cfg.Requests > 0 {
		// Split the total as evenly as whole numbers allow.
		n := int64(peers)
		c.quota = cfg.Requests / n
		if int64(slot) < cfg.Requests%n {
			c.quota++
		}
	}
	if c.open {
		c.intervalNs = float64(peers) / cfg.Rate * 1e9
		c.phaseNs = c.intervalNs * float64(slot) / float64(peers)
		c.stats.service = newHist()
		c.stats.lag = newHist()
	}
	return c
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// record adds a latency in nanoseconds to h, in microseconds, clamped to
// the histogram's range so it always fits.
func record(h *hdrhistogram.Histogram, ns int64) {
	_ = h.RecordValue(min(max(ns/1000, histMin), histMax))
}

// makeValue returns n printable bytes; their content does not matter.
func makeValue(n int) []byte {
	const pattern = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	v := make([]byte, n)
	for i := range v {
		v[i] = pattern[i%len(pattern)]
	}
	return v
}

func (c *client) now() int64 { return int64(time.Since(c.base)) }

// run sends batches until the schedule, the quota or a context ends it.
// ctx is the caller's context; hard also expires Timeout after the end, so
// a server that stops answering cannot hold the run forever.
func (c *client) run(ctx, hard context.Context) {
	defer func() { c.stats.endAt = c.now() }()
	// Unblock reads and writes when either context ends.
	stop := context.AfterFunc(hard, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	defer c.timer.Stop()

	for {
		var n int
		if c.open {
			n = c.planOpen(hard.Done())
		} else {
			n = c.planClosed(hard.Done())
		}
		if n == 0 {
			break
		}
		c.out = c.out[:0]
		for i := range c.ops[:n] {
			c.out = c.appendOp(c.out, &c.ops[i])
		}
		c.stats.total += int64(n)
		sentAt := c.now()
		var err error
		if _, err = c.conn.Write(c.out); err == nil {
			err = c.readBatch(n, sentAt)
		}
		if err != nil {
			c.fail(ctx, hard, err)
			return
		}
	}
	if ctx.Err() != nil {
		c.stats.interrupted = true
	}
}

// fail records why the connection ended: the caller's cancellation is an
// interruption, anything else a broken connection.
func (c *client) fail(ctx, hard context.Context, err error) {
	switch {
	case ctx.Err() != nil:
		c.stats.interrupted = true
	case hard.Err() != nil:
		c.stats.connErr = fmt.Errorf("client %d: no reply within %v after the end: %w", c.id, c.cfg.Timeout, err)
	default:
		c.stats.connErr = fmt.Errorf("client %d: %w", c.id, err)
	}
}

// planClosed fills c.ops for the next closed-loop batch and returns its
// size, 0 when the client is done.
func (c *client) planClosed(done <-chan struct{}) int {
	select {
	case <-done:
		return 0
	default:
	}
	now := c.now()
	if c.endNs > 0 && now >= c.endNs {
		return 0
	}
	measured := now >= c.warmupNs
	n := len(c.ops)
	if measured && c.quota >= 0 {
		n = int(min(int64(n), c.quota))
		c.quota -= int64(n)
	}
	for i := range c.ops[:n] {
		c.ops[i] = op{measured: measured}
	}
	return n
}

// intended is the open-loop send time of the k-th command of this client.
func (c *client) intended(k int64) int64 {
	return int64(c.phaseNs + float64(k)*c.intervalNs)
}

// earlyNs is how far ahead of its intended time an open-loop command may
// go out. Go timers on Linux fire up to about 1 ms late (the netpoller
// sleeps in whole milliseconds), and latency counts from the intended time,
// so waiting for the exact time would add that lateness to every command.
// Waking this much early and sending at once keeps the generator's own
// delay out of the figures; such a command's latency counts from its
// actual send instead (see readBatch).
const earlyNs = int64(time.Millisecond)

// planOpen waits until the next command is due (or nearly, see earlyNs),
// then fills c.ops with it and every later command already due, up to
// Pipeline, and returns how many, 0 when the client is done. If the client
// has fallen behind, due commands go out back to back, each still timed
// from its intended send time.
func (c *client) planOpen(done <-chan struct{}) int {
	next := c.intended(c.k)
	if c.endNs > 0 && next >= c.endNs {
		// Nothing more is due in the window; stay until it closes so the
		// run's elapsed time is the window, not the last send.
		c.sleepUntil(c.endNs, done)
		return 0
	}
	if c.quota == 0 {
		return 0
	}
	now := c.now()
	if next-now > earlyNs {
		if !c.sleepUntil(next-earlyNs, done) {
			return 0
		}
		now = c.now()
	} else {
		select {
		case <-done:
			return 0
		default:
		}
	}
	if c.endNs > 0 && now >= c.endNs+c.graceNs {
		// Too far behind to catch up: give up on the rest and say so.
		last := int64(math.Ceil((float64(c.endNs) - c.phaseNs) / c.intervalNs))
		c.stats.unsent += max(0, last-c.k)
		return 0
	}
	n := 0
	for n < len(c.ops) {
		t := c.intended(c.k)
		// The first command goes now (it is due within earlyNs); the rest
		// only if already due, so pipelining never sends ahead of schedule.
		if (n > 0 && t > now) || (c.endNs > 0 && t >= c.endNs) {
			break
		}
		measured := t >= c.warmupNs
		if measured && c.quota >= 0 {
			if c.quota == 0 {
				break
			}
			c.quota--
		}
		c.ops[n] = op{intended: t, measured: measured}
		n++
		c.k++
	}
	return n
}

// sleepUntil waits until t (ns since base) and reports false if done
// closed first. It reuses one timer, so waiting allocates nothing.
func (c *client) sleepUntil(t int64, done <-chan struct{}) bool {
	d := time.Duration(t - c.now())
	if d <= 0 {
		return true
	}
	c.timer.Reset(d)
	select {
	case <-c.timer.C:
		return true
	case <-done:
		c.timer.Stop()
		return false
	}
}

// appendOp picks GET or SET and a key for o and appends the command.
func (c *client) appendOp(dst []byte, o *op) []byte {
	o.get = c.rng.Float64() < c.readRatio
	c.key = strconv.AppendUint(c.key[:len(c.cfg.KeyPrefix)], c.gen.Next(c.rng), 10)
	switch {
	case o.get:
		return resp.AppendCommand(dst, c.cmdGet, c.key)
	case c.ttl == nil:
		return resp.AppendCommand(dst, c.cmdSet, c.key, c.value)
	default:
		return resp.AppendCommand(dst, c.cmdSet, c.key, c.value, c.cmdEX, c.ttl)
	}
}

// readBatch reads the replies to the n commands in c.ops, sent at sentAt,
// in order, and records the measured ones.
func (c *client) readBatch(n int, sentAt int64) error {
	s := &c.stats
	for i := range c.ops[:n] {
		kind, head, err := c.w.next()
		if err != nil {
			return fmt.Errorf("reading reply %d of %d: %w", i+1, n, err)
		}
		o := &c.ops[i]
		if !o.measured {
			continue
		}
		s.ops++
		if c.open {
			// From the intended send, or the actual one if that was
			// earlier (see earlyNs): whichever came first, so a late send
			// is charged and an early one is not credited.
			record(s.hist, c.w.readAt-min(o.intended, sentAt))
			record(s.service, c.w.readAt-sentAt)
			record(s.lag, max(0, sentAt-o.intended))
		} else {
			record(s.hist, c.w.readAt-sentAt)
		}
		if o.get {
			s.reads++
		} else {
			s.writes++
		}
		switch {
		case kind == '-':
			s.errors++
			word := errorWord(head)
			if p := s.errorsByType[string(word)]; p != nil {
				*p++
			} else {
				one := int64(1)
				s.errorsByType[string(word)] = &one
			}
		case !o.get:
		case isNull(kind, head):
			s.nulls++
		default:
			s.hits++
		}
	}
	if !c.w.drained() {
		// A RESP2 server only speaks when spoken to.
		return fmt.Errorf("server sent bytes that answer no request")
	}
	return nil
}
