package upstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rproxy/rproxy/internal/sysio"
	"github.com/rproxy/rproxy/resp"
	"go.uber.org/zap"
)

// A pool keeps the dedicated connections its sessions give back for the
// next ones: up to maxIdleDedicated, so that as many sessions as pin at a
// time (workers in blocking pops, transactions under WATCH) find one
// without a dial each time. Past keepIdleDedicated, one idle for
// idleDedicatedTTL is closed (trimIdle): a burst's connections do not stay.
const (
	keepIdleDedicated = 16
	maxIdleDedicated  = 1024
	idleDedicatedTTL  = 30 * time.Second
)

// spareDedicated is how many idle connections a pool that has pinned keeps
// dialled ahead: clients that block or subscribe in a burst (two deferred
// BRPOPLPUSH then an LPUSH, as Redis's own tests do) get connections
// without waiting for a dial, so their commands reach Redis in the order
// they were sent, as they would directly.
const spareDedicated = 2

// Dedicated is an upstream connection lent to one session while that session
// holds connection state (a transaction, WATCH, a database other than 0, a
// blocking command). Only the session uses it, one batch at a time, so it
// needs no writer or reader goroutine: Do writes and reads in place.
type Dedicated struct {
	pool   *Pool
	nc     net.Conn
	buf    []byte // read buffer; buf[r:w] is read but not yet framed
	r, w   int
	gather []byte // write's buffer for a batch of small commands
	fr     resp.Framer
	broken atomic.Bool // set on any failure: the connection is closed, not reused
	// idleSince: when it went idle (the pool's dmu guards it).
	idleSince time.Time
	// streamed: a StreamTo ended at what its writer judged the stream's end
	// (ErrStreamEnd); reset checks that no reply is left unread.
	streamed bool
	// lastDone: when its holder's last Do ended (the holder's own field).
	lastDone time.Time
	// handedOff: a timed-out Do gave nc to a drain (drain), which closes
	// it; close and Interrupt leave it alone.
	handedOff atomic.Bool
}

// ClosedWhileIdle reports whether Redis closed the connection while its
// holder left it unused for at least idle (Redis's timeout on idle
// clients, a CLIENT KILL, a restart): a peek, made only after such a
// pause, finds its end before anything more is written. The connection is
// then broken. Only an end counts: a connection with bytes unread is
// open.
func (d *Dedicated) ClosedWhileIdle(idle time.Duration) bool {
	if d.broken.Load() || d.lastDone.IsZero() || d.pool.cfg.Now().Sub(d.lastDone) < idle || d.r < d.w {
		return false
	}
	d.nc.SetReadDeadline(time.Time{}) // Do's, long past: the peek would read it as an error
	if _, res := d.peek(); res != peekClosed {
		return false // open; bytes waiting (a late push) are Do's to read
	}
	d.broken.Store(true)
	d.nc.Close()
	return true
}

// newDedicated wraps a dialled connection.
func (p *Pool) newDedicated(nc net.Conn) *Dedicated {
	return &Dedicated{pool: p, nc: nc, buf: make([]byte, 16<<10)}
}

// RedisID returns the client id Redis knows the connection by, so that
// commands naming a session's connection (CLIENT UNBLOCK, CLIENT TRACKING
// REDIRECT) can be sent with it; 0 when Redis does not list it. It asks on
// a shared connection of the same server (CLIENT LIST, found by the
// connection's address), since the dedicated one may be blocked: asking
// only when needed keeps a command out of every dial (and out of MONITOR).
// Any goroutine may call it.
func (d *Dedicated) RedisID() int64 {
	b := NewBatch()
	b.Add(clientListCmd)
	d.pool.Do(b)
	return clientIDByAddr(b.Reply(0), d.LocalAddr())
}

// clientIDByAddr finds, in a CLIENT LIST reply, the id of the client
// connected from addr (0: not listed). On RESP3 the reply is a verbatim
// string whose text, the first client's line included, starts "txt:".
func clientIDByAddr(reply []byte, addr string) int64 {
	v, err := resp.Parse(reply)
	if err != nil || (v.Kind != '$' && v.Kind != '=') {
		return 0
	}
	list := v.Str
	if v.Kind == '=' {
		list = list[min(4, len(list)):] // the format, "txt:"
	}
	field := []byte(" addr=" + addr + " ")
	for _, line := range bytes.Split(list, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("id=")) || !bytes.Contains(line, field) {
			continue
		}
		end := bytes.IndexByte(line, ' ')
		id, err := strconv.ParseInt(string(line[3:end]), 10, 64)
		if err != nil {
			return 0
		}
		return id
	}
	return 0
}

var clientListCmd = resp.AppendCommandString(nil, "CLIENT", "LIST")

// Dial connects to cfg.Address with cfg.Dial (a net.Dialer when nil) and,
// when cfg.TLS is set, completes the TLS handshake, both within
// cfg.DialTimeout. It sends no command: the pool's connections add HELLO or
// AUTH (dial), other users (the passthrough AUTH check) their own.
func Dial(ctx context.Context, cfg Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	addr := cfg.Address
	if cfg.Sentinel != nil {
		if addr = cfg.Sentinel.Master(); addr == "" {
			return nil, fmt.Errorf("sentinel: master %q not known yet: %s", cfg.Sentinel.Name(), cfg.Sentinel.LastError())
		}
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil || cfg.TLS == nil {
		return nc, err
	}
	tc := tls.Client(nc, clientTLS(cfg, addr))
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// clientTLS returns cfg.TLS for a dial of addr, with ServerName defaulted
// to addr's host (the master a Sentinel names, a cluster node the map
// names, for a pool whose Address is only a name) and RootCAs cfg.TLSRoots'
// current ones (a copy when either changes; nil stays nil). With
// cfg.TLSOtherName or cfg.TLSAnnouncedName, a certificate for any of the
// names is accepted (verifyAnyName).
func clientTLS(cfg Config, addr string) *tls.Config {
	if cfg.TLS == nil {
		return nil
	}
	host := ""
	if cfg.TLS.ServerName == "" {
		host, _, _ = net.SplitHostPort(addr)
	}
	other, announced := cfg.TLSOtherName, cfg.TLSAnnouncedName
	if other == host {
		other = ""
	}
	if cfg.TLS.InsecureSkipVerify || host == "" {
		// Go's check off (by insecure_skip_verify, or by the Pool's
		// earlier call, whose verifyAnyName stays in the config), or one
		// name set (server_name).
		other, announced = "", nil
	}
	if host == "" && cfg.TLSRoots == nil {
		return cfg.TLS
	}
	c := cfg.TLS.Clone()
	if host != "" {
		c.ServerName = host
	}
	if cfg.TLSRoots != nil {
		c.RootCAs = cfg.TLSRoots()
	}
	if other != "" || announced != nil {
		roots := func() *x509.CertPool { return c.RootCAs }
		if cfg.TLSRoots != nil {
			roots = cfg.TLSRoots
		}
		names := func() []string {
			n := []string{c.ServerName}
			if other != "" {
				n = append(n, other)
			}
			if announced != nil {
				if a := announced(); a != "" && a != c.ServerName && a != other {
					n = append(n, a)
				}
			}
			return n
		}
		c.VerifyConnection = verifyAnyName(roots, names, c.Time)
		c.InsecureSkipVerify = true // Go's own check knows one name; verifyAnyName does all of it
	}
	return c
}

// verifyAnyName is a tls.Config.VerifyConnection doing what Go's client
// does for one name (the chain to roots, a server-auth certificate valid
// now), with a certificate for any of names() accepted (the first is the
// host dialled). It runs for resumed sessions too.
func verifyAnyName(roots func() *x509.CertPool, names func() []string, clock func() time.Time) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots(), Intermediates: x509.NewCertPool()}
		if clock != nil {
			opts.CurrentTime = clock()
		}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(opts); err != nil {
			return err
		}
		n := names()
		err := leaf.VerifyHostname(n[0])
		if err == nil {
			return nil
		}
		for _, other := range n[1:] {
			if leaf.VerifyHostname(other) == nil {
				return nil
			}
		}
		if len(n) > 1 {
			return fmt.Errorf("%w (nor for %s)", err, strings.Join(n[1:], " or "))
		}
		return err
	}
}

// dial connects (with TLS when configured) and performs the handshake
// (HELLO 3 for RESP3 pools).
func (p *Pool) dial(ctx context.Context) (net.Conn, error) {
	var gen uint64
	if p.cfg.Sentinel != nil {
		gen = p.cfg.Sentinel.gen.Load()
	}
	nc, err := Dial(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	if cmd, name := p.handshakeCommand(); cmd != nil {
		// Within ctx's deadline too: the watcher's probe (waitProbe) gives
		// a stopped Redis a quarter of the timeout, not a dial timeout.
		deadline := p.cfg.Now().Add(p.cfg.DialTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		p.cfg.Own.note(nc, cmd)
		if err := handshake(nc, deadline, cmd); err != nil {
			nc.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if p.cfg.Follow != nil && p.cfg.Sentinel == nil && !p.cfg.Follow.sawMaster.Load() {
		// Until the address has answered as a master: one ROLE, at the
		// first dial, is enough (MONITOR shows it).
		if err := p.followRole(nc); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if p.cfg.Sentinel != nil {
		if err := p.confirmMaster(nc); err != nil {
			nc.Close()
			return nil, err
		}
		if p.cfg.Sentinel.gen.Load() != gen {
			// The master changed while this dial was under way: it may
			// have reached the old one, which masterChanged missed.
			nc.Close()
			return nil, errors.New("sentinel: the master changed during the dial")
		}
	}
	// Reads and writes keep their P through the system call (package
	// sysio): every client's commands pass these connections, and a
	// thread hop on each slow loopback write showed as context switches
	// and latency per request.
	return sysio.Wrap(nc), nil
}

// setup sends Config.Setup on a new shared connection.
func (p *Pool) setup(nc net.Conn) error {
	for _, cmd := range p.cfg.Setup {
		p.cfg.Own.note(nc, cmd)
		if err := handshake(nc, p.cfg.Now().Add(p.cfg.DialTimeout), cmd); err != nil {
			return fmt.Errorf("setup %q: %w", truncate(cmd, 40), err)
		}
	}
	return nil
}

// handshakeCommand is what a new (or reset) connection sends first: HELLO 3
// for RESP3, with AUTH when a password is set; AUTH alone for RESP2. nil when
// there is nothing to send. The name is for errors and never holds the secret.
func (p *Pool) handshakeCommand() ([]byte, string) {
	auth := p.cfg.AuthArgs()
	switch {
	case p.cfg.Protocol == 3 && auth != nil:
		return resp.AppendCommandString(nil, append([]string{"HELLO", "3"}, auth...)...), "HELLO 3 AUTH"
	case p.cfg.Protocol == 3:
		return resp.AppendCommandString(nil, "HELLO", "3"), "HELLO 3"
	case auth != nil:
		return resp.AppendCommandString(nil, auth...), "AUTH"
	}
	return nil, ""
}

// Acquire lends a dedicated connection: a reset idle one, or a new one.
func (p *Pool) Acquire(ctx context.Context) (*Dedicated, error) {
	p.awaitHold() // for a connection to the new master, not one the change breaks
	if reason, ok := p.awaitDrains(); !ok {
		return nil, errors.New(reason)
	}
	p.dmu.Lock()
	if p.closed {
		p.dmu.Unlock()
		return nil, errors.New("proxy shutting down")
	}
	for n := len(p.idle); n > 0; n = len(p.idle) {
		d := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.metrics.idle.Dec()
		p.dmu.Unlock()
		if d.idleAlive() {
			p.metrics.pinned.Inc()
			p.keepSpare()
			return d, nil
		}
		// Redis closed it while idle (its timeout, a restart), or sent
		// something unasked.
		p.log.Info("idle dedicated connection closed: not reusable", zap.String("local", d.LocalAddr()))
		d.close()
		p.dmu.Lock()
	}
	p.dmu.Unlock()
	nc, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	d := p.newDedicated(nc)
	p.dmu.Lock()
	if p.closed {
		p.dmu.Unlock()
		nc.Close()
		return nil, errors.New("proxy shutting down")
	}
	p.lent[d] = struct{}{}
	p.dmu.Unlock()
	p.metrics.pinned.Inc()
	p.keepSpare()
	return d, nil
}

// keepSpare dials, in the background, idle connections for the next
// Acquires while fewer than spareDedicated are left: a session that
// subscribes, or opens a
// transaction, then gets its connection without waiting for a dial (a
// SUBSCRIBE reaches Redis about one round trip after the client sent it,
// as it would directly, so a PUBLISH that follows is not missed). A pool
// whose sessions never pin dials none.
func (p *Pool) keepSpare() {
	p.dmu.Lock()
	if p.closed || len(p.idle) >= spareDedicated || p.dialingSpare {
		p.dmu.Unlock()
		return
	}
	p.dialingSpare = true
	p.dmu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
		nc, err := p.dial(ctx)
		cancel()
		var d *Dedicated
		if err == nil {
			d = p.newDedicated(nc)
		}
		p.dmu.Lock()
		defer p.dmu.Unlock()
		p.dialingSpare = false
		if err != nil {
			p.metrics.errors.WithLabelValues("dial").Inc()
			p.log.Info("spare dedicated connection: dial failed", zap.Error(err))
			return // the next Acquire dials, and reports the failure
		}
		if p.closed || len(p.idle) >= maxIdleDedicated {
			nc.Close()
			return
		}
		p.lent[d] = struct{}{}
		d.idleSince = p.cfg.Now()
		p.idle = append(p.idle, d)
		p.metrics.idle.Inc()
		if len(p.idle) < spareDedicated {
			go p.keepSpare()
		}
	}()
}

// Release takes back a lent connection. A healthy one is reset (RESET, then
// the handshake again, since RESET returns to RESP2 and deauthenticates) and
// kept for reuse; anything else is closed, so no state leaks to the next
// session.
func (p *Pool) Release(d *Dedicated) { p.release(d, true) }

// ReleaseClean takes back a lent connection whose session changed none of
// its state (it only waited in blocking commands): it is kept for reuse
// without the RESET round trip, which Redis's SLOWLOG and MONITOR would
// otherwise show after every blocking pop.
func (p *Pool) ReleaseClean(d *Dedicated) { p.release(d, false) }

// Discard takes back a lent connection and closes it: its client left
// while it held state, and Redis sees that client's connection end, as it
// would without the proxy, instead of a RESET after the client has gone.
func (p *Pool) Discard(d *Dedicated) {
	p.metrics.pinned.Dec()
	d.close()
}

// ResetLent resets a lent connection as Release would, but leaves it lent:
// for the session that holds it to use again, and no other (one whose
// keys Redis still tracks for it). False when the reset failed and the
// connection was closed.
func (p *Pool) ResetLent(d *Dedicated) bool {
	if !d.broken.Load() && d.reset() {
		return true
	}
	p.Discard(d)
	return false
}

// StillOpen reports whether a lent connection its holder kept unused is
// still open and has nothing unread, as Acquire checks an idle one; one
// that is not is closed.
func (p *Pool) StillOpen(d *Dedicated) bool {
	if !d.broken.Load() && d.idleAlive() {
		return true
	}
	p.Discard(d)
	return false
}

func (p *Pool) release(d *Dedicated, reset bool) {
	p.metrics.pinned.Dec()
	if !d.broken.Load() && (!reset || d.reset()) {
		p.dmu.Lock()
		if !p.closed && len(p.idle) < maxIdleDedicated {
			if cap(d.gather) > idleGatherMax {
				d.gather = nil // up to maxIdleDedicated wait: none holds a pipeline's buffer
			}
			d.idleSince = p.cfg.Now()
			p.idle = append(p.idle, d)
			p.metrics.idle.Inc()
			p.dmu.Unlock()
			return
		}
		p.dmu.Unlock()
	}
	d.close()
}

func (d *Dedicated) reset() bool {
	b := NewBatch()
	b.Add(resp.AppendCommandString(nil, "RESET"))
	// RESET returns to RESP2 and deauthenticates: redo the handshake.
	if cmd, _ := d.pool.handshakeCommand(); cmd != nil {
		b.Add(cmd)
	}
	var echo []byte
	if d.streamed {
		// After a stream, its reader judged where it ended: one reply left
		// unread would put every later one a place off, and then this
		// unguessable marker's echo would not come last.
		marker := []byte(rand.Text())
		b.Add(resp.AppendCommand(nil, []byte("ECHO"), marker))
		echo = resp.AppendBulk(nil, marker)
	}
	for i := range b.Len() {
		d.pool.cfg.Own.note(d.nc, b.Command(i))
	}
	d.Do(b, d.pool.cfg.Timeout)
	if d.broken.Load() || string(b.Reply(0)) != "+RESET\r\n" {
		return false
	}
	if echo != nil {
		if !bytes.Equal(b.Reply(b.Len()-1), echo) {
			return false
		}
		d.streamed = false
	}
	return b.Len() == 1 || (b.Reply(1)[0] != '-' && b.Reply(1)[0] != '!')
}

// idleAlive reports whether an idle connection is still open, without a
// round trip: a peek that must return at once finds either nothing (alive)
// or the end Redis sent when it closed the connection.
func (d *Dedicated) idleAlive() bool {
	if d.r < d.w {
		return false // Redis sent something unasked: its state is unknown
	}
	isTLS, res := d.peek()
	switch res {
	case peekClosed:
		return false
	case peekData:
		// Over TLS, pending bytes may be a record that is no reply (a
		// session ticket); in the clear, Redis sent something unasked.
		return isTLS
	}
	return true
}

// peek looks at the connection's socket without reading (under TLS, the
// socket beneath it), reporting whether it is TLS.
func (d *Dedicated) peek() (isTLS bool, res peekResult) {
	nc := d.nc
	if tlsConn, ok := nc.(*tls.Conn); ok {
		nc, isTLS = tlsConn.NetConn(), true
	}
	return isTLS, peekConn(nc)
}

// LocalAddr is the connection's local address: the address Redis knows
// the client by (CLIENT KILL ADDR).
func (d *Dedicated) LocalAddr() string { return d.nc.LocalAddr().String() }

// Address is the address of the server the connection is to.
func (d *Dedicated) Address() string { return d.pool.Address() }

// Broken reports whether the connection failed (it is closed on Release).
func (d *Dedicated) Broken() bool { return d.broken.Load() }

// Interrupt closes the connection from another goroutine, ending a Do that
// waits on it (a client that left during a blocking command).
func (d *Dedicated) Interrupt() {
	d.broken.Store(true)
	if !d.handedOff.Load() {
		d.nc.Close()
	}
}

func (d *Dedicated) close() {
	d.broken.Store(true)
	if !d.handedOff.Load() {
		d.nc.Close()
	}
	d.pool.dmu.Lock()
	delete(d.pool.lent, d)
	d.pool.dmu.Unlock()
}

// DoAsking is Do with ASKING before each of b's commands but those that
// queued[i] says run inside a transaction (nil: none), whose replies
// alone b gets: b runs on the node an ASK named, which serves a slot it
// is importing only to a command after ASKING. Redis keeps the flag from
// an ASKING before MULTI until the transaction ends, and would queue an
// ASKING sent inside it.
func (d *Dedicated) DoAsking(b *Batch, timeout time.Duration, queued []bool) {
	t := NewBatch()
	asked := make([]bool, len(b.cmds))
	for i, c := range b.cmds {
		if asked[i] = i >= len(queued) || !queued[i]; asked[i] {
			t.Add(askingCmd)
		}
		t.Add(c)
	}
	d.Do(t, timeout)
	b.replies, b.replyEnds = b.replies[:0], b.replyEnds[:0]
	at := 0
	for i := range b.cmds {
		if asked[i] {
			at++
		}
		if at >= len(t.replyEnds) {
			break
		}
		b.appendReply(t.Reply(at))
		at++
	}
	b.fillErrors(unavailable("connection lost")) // only if t came back short
}

// Do writes the batch and reads one reply per command into it. timeout
// bounds the wait for reply progress; 0 means no bound (a blocking command
// may wait as long as the client asked). On failure the remaining commands
// get "-ERR upstream unavailable: <reason>" and the connection is broken.
// While a connection of the pool drains (awaitDrains) it first waits, as
// the pool's sends do: a session that kept its connection (a tracked one)
// must not overtake a command reported failed either.
func (d *Dedicated) Do(b *Batch, timeout time.Duration) {
	d.pool.awaitHold()
	defer func() { d.lastDone = d.pool.cfg.Now() }()
	b.replies, b.replyEnds = b.replies[:0], b.replyEnds[:0]
	if d.broken.Load() {
		b.fillErrors(unavailable("connection lost"))
		return
	}
	if reason, ok := d.pool.awaitDrains(); !ok {
		// Nothing was written, but the session takes the error for a
		// reply (an EXEC's would end its transaction): the connection is
		// given up, as when its own command times out.
		d.fail(b, reason)
		return
	}
	deadline := time.Time{}
	if timeout > 0 {
		deadline = d.pool.cfg.Now().Add(timeout)
	}
	d.nc.SetDeadline(deadline)
	if err := d.write(b.cmds); err != nil {
		d.fail(b, "write: "+err.Error())
		return
	}
	start := len(b.replies)
	heldBefore := false // the last timeout found the command held by a pause
	for !b.complete() {
		if d.r == d.w {
			if timeout > 0 {
				d.nc.SetReadDeadline(d.pool.cfg.Now().Add(timeout))
			}
			n, err := d.nc.Read(d.buf)
			if err != nil {
				reason := "read: " + err.Error()
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					probe := d.pool.waitProbe(context.Background())
					if probe.busy {
						continue // behind a long script: wait, as on Redis
					}
					if probe.held[d.LocalAddr()] {
						heldBefore = true
						continue // a write held while writes are paused: wait, as on Redis
					}
					if heldBefore {
						// The pause ended since the read gave up: the reply
						// gets a whole timeout of its own.
						heldBefore = false
						continue
					}
					reason = fmt.Sprintf("no reply within %v", timeout)
					if !probe.answered {
						d.drain(b, reason)
						return
					}
				}
				d.fail(b, reason)
				return
			}
			d.r, d.w = 0, n
			d.pool.metrics.bytesIn.Add(float64(n))
		}
		k, done, err := d.fr.Next(d.buf[d.r:d.w])
		if err != nil {
			d.fail(b, "bad reply from upstream: "+err.Error())
			return
		}
		b.replies = append(b.replies, d.buf[d.r:d.r+k]...)
		d.r += k
		if !done {
			continue
		}
		if d.fr.Kind() == '>' {
			// Out-of-band push: pub/sub on pinned connections is not
			// supported yet, so nothing asks for these; drop them.
			b.replies = b.replies[:start]
			continue
		}
		if d.fr.Kind() == '-' && d.pool.cfg.Follow != nil && bytes.HasPrefix(b.replies[start:], readOnlyPrefix) {
			d.pool.cfg.Follow.readOnly(d.pool.cfg.Address) // a pinned session's write too
		}
		b.replyEnds = append(b.replyEnds, len(b.replies))
		start = len(b.replies)
	}
}

// Send writes raw commands without waiting for replies (stream mode, where
// StreamTo delivers whatever Redis sends).
func (d *Dedicated) Send(cmds [][]byte) error {
	d.pool.awaitHold()
	if d.broken.Load() {
		return errors.New("connection lost")
	}
	d.nc.SetWriteDeadline(d.pool.cfg.Now().Add(d.pool.cfg.Timeout))
	if err := d.write(cmds); err != nil {
		d.broken.Store(true)
		d.nc.Close()
		return err
	}
	return nil
}

// Gathering a batch's commands into one write: commands up to gatherMax
// bytes are copied into the connection's gather buffer, written when it
// holds gatherFlush bytes or the batch ends; a larger command is written
// from where it lies (its copy would cost more than its own system call).
// A gather buffer over gatherFlush+gatherMax is not kept between batches.
const (
	gatherMax   = 16 << 10
	gatherFlush = 64 << 10
	// idleGatherMax: a larger gather buffer is dropped when its connection
	// goes idle.
	idleGatherMax = 4 << 10
)

// write sends the commands and counts them: a batch of small commands in
// one system call (the connections are sysio's, which write one buffer at
// a time; net.Buffers would make one write, and one TCP segment Redis
// wakes for, per command).
func (d *Dedicated) write(cmds [][]byte) error {
	if len(cmds) == 1 {
		n, err := d.nc.Write(cmds[0])
		d.pool.metrics.observeWrite(1, n)
		return err
	}
	total := 0
	buf := d.gather[:0]
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		n, err := d.nc.Write(buf)
		total += n
		buf = buf[:0]
		return err
	}
	var err error
	for _, cmd := range cmds {
		if len(cmd) > gatherMax {
			if err = flush(); err != nil {
				break
			}
			n, werr := d.nc.Write(cmd)
			total += n
			if err = werr; err != nil {
				break
			}
			continue
		}
		buf = append(buf, cmd...)
		if len(buf) >= gatherFlush {
			if err = flush(); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = flush()
	}
	if cap(buf) <= gatherFlush+gatherMax {
		d.gather = buf[:0]
	} else {
		d.gather = nil
	}
	d.pool.metrics.observeWrite(len(cmds), total)
	return err
}

// StreamTo copies everything the server sends, from now on, to w, byte for
// byte, until the connection ends or w returns an error (ErrStreamEnd). It
// is for pub/sub, where replies and messages arrive in the server's order
// and must reach the client unchanged.
func (d *Dedicated) StreamTo(w io.Writer) error {
	d.nc.SetReadDeadline(time.Time{})
	if d.r < d.w {
		if _, err := w.Write(d.buf[d.r:d.w]); err != nil {
			return err
		}
		d.r = d.w
	}
	_, err := io.Copy(w, d.nc)
	if errors.Is(err, ErrStreamEnd) {
		d.streamed = true
	} else {
		d.broken.Store(true) // never reused: its state is unknown
	}
	return err
}

// ErrStreamEnd, wrapped in the error StreamTo's writer returns, ends the
// copy with the connection still usable: the writer has seen the last byte
// the server sends for the stream (the reply to RESET, say). Release
// checks that nothing followed it (a client can make a script's status
// reply look like RESET's) before the connection is reused.
var ErrStreamEnd = errors.New("stream ended by its reader")

func (d *Dedicated) fail(b *Batch, reason string) {
	d.broken.Store(true)
	d.nc.Close()
	b.fillErrors(unavailable(reason))
}

// drain fails what b still waits for with reason, as fail does, but
// hands the connection to a goroutine that reads and drops the replies to
// what was written instead of closing it: Redis answered nothing (the
// probe), so it has those commands buffered and runs them when it
// resumes. The pool's sends wait meanwhile (awaitDrains), as for a shared
// connection's drain (conn.startDrain), so that the session's next
// command, on a shared connection or another dedicated one, cannot run
// before them. The drain ends when they are answered, the connection
// ends, the pool moves or closes, or after drainLimit timeouts.
func (d *Dedicated) drain(b *Batch, reason string) {
	left := len(b.cmds) - len(b.replyEnds)
	d.broken.Store(true)
	p := d.pool
	nc, fr := d.nc, d.fr
	pending := slices.Clone(d.buf[d.r:d.w])
	d.r = d.w
	p.dmu.Lock()
	if p.closed {
		p.dmu.Unlock()
		d.fail(b, reason)
		return
	}
	d.handedOff.Store(true)
	if p.drainingDedicated == nil {
		p.drainingDedicated = make(map[net.Conn]struct{})
	}
	p.drainingDedicated[nc] = struct{}{}
	p.dmu.Unlock()
	p.drainBegan() // before the session hears of the failure
	b.fillErrors(unavailable(reason))
	nc.SetDeadline(p.cfg.Now().Add(drainLimit * p.cfg.Timeout))
	go func() {
		answered := dropReplies(nc, &fr, pending, left)
		nc.Close()
		p.dmu.Lock()
		delete(p.drainingDedicated, nc)
		p.dmu.Unlock()
		p.drainEnded(answered)
	}()
}

// dropReplies reads, frames and drops replies from nc (after the bytes
// already read, pending, and whatever fr had framed of the first) until
// left of them are in (true), or the connection fails (false). Pushes
// are not replies.
func dropReplies(nc net.Conn, fr *resp.Framer, pending []byte, left int) bool {
	buf := make([]byte, 4096)
	p := pending
	for {
		for len(p) > 0 {
			k, done, err := fr.Next(p)
			if err != nil {
				return false
			}
			p = p[k:]
			if done && fr.Kind() != '>' {
				if left--; left == 0 {
					return true
				}
			}
		}
		n, err := nc.Read(buf)
		p = buf[:n]
		if err != nil && n == 0 {
			return false
		}
	}
}

// closeDrains closes the dedicated connections being drained: the pool
// closes, or its master changed (what they wait for no longer matters).
func (p *Pool) closeDrains() {
	p.dmu.Lock()
	defer p.dmu.Unlock()
	for nc := range p.drainingDedicated {
		nc.Close()
	}
}

// closeDedicated closes every lent and idle dedicated connection (shutdown),
// which ends any Do waiting on them.
func (p *Pool) closeDedicated() {
	p.dmu.Lock()
	p.closed = true // no drain starts from now on
	lent := make([]*Dedicated, 0, len(p.lent))
	for d := range p.lent {
		lent = append(lent, d)
	}
	p.dropIdle()
	p.dmu.Unlock()
	p.closeDrains()
	for _, d := range lent {
		d.Interrupt()
	}
}

// trimIdle closes the idle connections past keepIdleDedicated that have
// been idle for idleDedicatedTTL. Acquire takes the newest idle one, so
// the oldest, first in the list, are those the sessions no longer need.
func (p *Pool) trimIdle(now time.Time) {
	p.dmu.Lock()
	var stale []*Dedicated
	for len(p.idle) > keepIdleDedicated && now.Sub(p.idle[0].idleSince) > idleDedicatedTTL {
		stale = append(stale, p.idle[0])
		p.idle[0] = nil
		p.idle = p.idle[1:]
	}
	p.metrics.idle.Sub(float64(len(stale)))
	p.dmu.Unlock()
	for _, d := range stale {
		d.close()
	}
}

// dropIdle forgets the idle connections (their reads end when the pool's
// connections are closed or interrupted); p.dmu is held.
func (p *Pool) dropIdle() {
	p.metrics.idle.Sub(float64(len(p.idle)))
	p.idle = nil
}

// dedicatedState is the Pool's bookkeeping of lent connections.
type dedicatedState struct {
	dmu    sync.Mutex
	lent   map[*Dedicated]struct{}
	idle   []*Dedicated
	closed bool
	// dialingSpare: keepSpare's dial is under way.
	dialingSpare bool
	// drainingDedicated: the connections of timed-out Dos being drained
	// (Dedicated.drain).
	drainingDedicated map[net.Conn]struct{}
}

// peekResult is what peekConn found on a connection.
type peekResult uint8

const (
	peekUnknown peekResult = iota // could not look
	peekNothing                   // open, nothing pending
	peekData                      // bytes pending
	peekClosed                    // the peer closed it, or it failed
)
