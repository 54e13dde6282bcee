package proxy

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
	"go.uber.org/zap"
)

// Keyspace notifications across a cluster's masters. A cluster node
// publishes the keyspace and keyevent notifications of its own keys only,
// to its own subscribers (a PUBLISH, by contrast, reaches every node's). A
// session subscribes on its pin, one master; for the notifications of the
// other masters' keys, a subscription that may receive them (a
// __keyspace@/__keyevent@ channel, or a pattern that can match one) is
// also made on a connection of the session's own to each other master (a
// notify branch). Of what a notify branch receives, only keyspace and
// keyevent messages go to the client, between whole replies; its
// subscription confirmations, and the PUBLISHed messages the pin already
// delivers, are dropped. Unsubscriptions follow the subscriptions.
//
// MONITOR goes to every notify branch too: a node shows the commands it
// runs, and a client that sees one server is owed every master's; of
// what the branches send then, the MONITOR lines pass as well (in the
// order they come, each master's in its own order).
//
// A notify branch that fails closes the client: its notifications would be
// lost without a sign, as when the client's own connection to Redis ends.
//
// A subscription is in force on every branch before the pin is sent it, so
// the client's confirmation (the pin's) comes after: as on one Redis, a key
// written once the client has it is notified. Written and not awaited, a
// branch's SUBSCRIBE could reach its master after a write another client
// sent once the confirmation was out, on a connection Redis had yet to read
// (Redis's Tcl suite in cluster mode, unit/pubsub: "we receive keyspace
// notifications" hung).

// notifyBranch is a session's subscription-only connection to one master
// other than its pin's.
type notifyBranch struct {
	pool       *upstream.Pool
	d          *upstream.Dedicated
	dropped    atomic.Bool // closed by the session: the client stays
	monitoring atomic.Bool // MONITOR sent: its lines pass too

	// Subscription confirmations received, counted by the copy goroutine
	// for the session that waits for them (awaitSubscribed); wake, of
	// capacity 1, tells it one came.
	confirmed atomic.Int64
	wake      chan struct{}

	// The copy goroutine's own state.
	relay  *streamRelay
	frames frames
}

// Write is the copy goroutine's: keyspace and keyevent messages,
// invalidations and MONITOR lines (but those streamRelay.hideLine hides)
// go to the client, the rest is dropped.
func (b *notifyBranch) Write(p []byte) (int, error) {
	err := b.frames.each(p, func(frame []byte, _ byte) error {
		if isSubscribeConfirmation(frame) {
			b.confirmed.Add(1)
			select {
			case b.wake <- struct{}{}:
			default:
			}
			return nil
		}
		if isNotification(frame) || b.monitoring.Load() && isMonitorLine(frame) &&
			(b.relay.hideLine == nil || !b.relay.hideLine(frame)) {
			return b.relay.writeFrame(frame)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// isNotification reports whether frame is one a notify branch passes to
// the client: a message or pmessage (RESP2 array or RESP3 push) on a
// __keyspace@, __keyevent@ or __redis__:invalidate channel, or a RESP3
// invalidate push.
func isNotification(frame []byte) bool {
	v, err := resp.Parse(frame)
	if err != nil || (v.Kind != '*' && v.Kind != '>') || len(v.Elems) < 2 {
		return false
	}
	channel := -1
	switch string(v.Elems[0].Str) {
	case "message":
		channel = 1
	case "pmessage":
		channel = 2
	case "invalidate":
		return v.Kind == '>' && len(v.Elems) == 2
	}
	if channel < 0 || channel+1 >= len(v.Elems) {
		return false
	}
	ch := v.Elems[channel].Str
	return isKeyspaceChannel(ch) || string(ch) == invalidateChannel
}

// isSubscribeConfirmation reports whether frame confirms a SUBSCRIBE or
// PSUBSCRIBE (RESP2 array or RESP3 push), one per channel or pattern.
func isSubscribeConfirmation(frame []byte) bool {
	if len(frame) < 2 || frame[0] != '*' && frame[0] != '>' {
		return false
	}
	rest := frame[1:]
	return bytes.HasPrefix(rest, []byte("3\r\n$9\r\nsubscribe\r\n")) || bytes.HasPrefix(rest, []byte("3\r\n$10\r\npsubscribe\r\n"))
}

// isMonitorLine reports whether frame is a MONITOR line (+<time> [...]),
// not the +OK that answers MONITOR.
func isMonitorLine(frame []byte) bool {
	return len(frame) > 2 && frame[0] == '+' && frame[1] >= '0' && frame[1] <= '9'
}

// invalidateChannel is the channel on which Redis sends a RESP2 client the
// invalidations redirected to it.
const invalidateChannel = "__redis__:invalidate"

func isKeyspaceChannel(ch []byte) bool {
	return bytes.HasPrefix(ch, []byte("__keyspace@")) || bytes.HasPrefix(ch, []byte("__keyevent@"))
}

// mayMatchKeyspace reports whether pattern can match a __keyspace@ or
// __keyevent@ channel: its text before the first glob character is a
// prefix of one of those, or starts with one.
func mayMatchKeyspace(pattern []byte) bool {
	lit := string(pattern)
	if i := strings.IndexAny(lit, `*?[\`); i >= 0 {
		lit = lit[:i]
	}
	for _, p := range []string{"__keyspace@", "__keyevent@"} {
		if strings.HasPrefix(p, lit) || strings.HasPrefix(lit, p) {
			return true
		}
	}
	return false
}

// notifyArgs returns the (un)subscribe command to send to the notify
// branches for one the client sent, nil for none: a SUBSCRIBE or
// PSUBSCRIBE keeps the channels or patterns that may receive keyspace
// notifications, and __redis__:invalidate; an UNSUBSCRIBE or PUNSUBSCRIBE goes as sent (what the
// branches never subscribed they answer for, and that is dropped), and so
// does MONITOR.
func notifyArgs(name string, args [][]byte) [][]byte {
	switch name {
	case "unsubscribe", "punsubscribe", "monitor":
		return args
	case "subscribe", "psubscribe":
	default:
		return nil
	}
	keep := [][]byte{args[0]}
	for _, a := range args[1:] {
		if name == "subscribe" && (isKeyspaceChannel(a) || string(a) == invalidateChannel) || name == "psubscribe" && mayMatchKeyspace(a) {
			keep = append(keep, a)
		}
	}
	if len(keep) == 1 {
		return nil
	}
	return keep
}

// notifyEverywhere sends, on a cluster, the part of a (un)subscribe
// command that concerns keyspace notifications to the session's notify
// branch on every master but its pin's, making the branches on first use.
// A subscription when none was made before, or an unsubscription, that
// concerns none sends nothing.
func (cs *clusterStream) notifyEverywhere(ss *session, name string, args [][]byte) {
	if !cs.on || ss.pinPool == nil || ss.relay == nil {
		return
	}
	send := notifyArgs(name, args)
	if send == nil || (name == "unsubscribe" || name == "punsubscribe") && len(ss.cstream().notifyBranches) == 0 {
		return
	}
	cmd := resp.AppendCommand(nil, send...)
	var confirms int64 // per branch: one per channel or pattern kept
	if name == "subscribe" || name == "psubscribe" {
		confirms = int64(len(send) - 1)
	}
	var waits []subscribedAt
	backend := ss.pools[ss.proto]
	for _, slot := range backend.Shards() {
		pool := backend.PinPool(slot)
		if samePool(pool, ss.pinPool) {
			continue
		}
		b, err := cs.notifyBranch(ss, pool)
		if err != nil {
			cs.log.Info("closing a subscriber: no connection to another master for its keyspace notifications",
				zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.Error(err))
			ss.conn.NetConn().Close()
			return
		}
		if name == "monitor" {
			b.monitoring.Store(true)
		}
		before := b.confirmed.Load()
		if err := b.d.Send([][]byte{cmd}); err != nil {
			// The copy ends too; the session's end discards the branch.
			ss.conn.NetConn().Close()
			return
		}
		if confirms > 0 {
			waits = append(waits, subscribedAt{b, before + confirms})
		}
	}
	cs.awaitSubscribed(ss, waits)
}

// subscribedAt is a notify branch and the count of confirmations that
// shows a subscription sent to it in force.
type subscribedAt struct {
	b    *notifyBranch
	want int64
}

// awaitSubscribed waits, up to upstream.timeout in all, until every branch
// of waits has confirmed; a branch that has not by then closes the client,
// as one that failed does.
func (cs *clusterStream) awaitSubscribed(ss *session, waits []subscribedAt) {
	if len(waits) == 0 {
		return
	}
	timer := time.NewTimer(cs.timeout)
	defer timer.Stop()
	for _, w := range waits {
		for w.b.confirmed.Load() < w.want {
			select {
			case <-w.b.wake:
			case <-timer.C:
				cs.log.Info("closing a subscriber: another master did not confirm its subscription for keyspace notifications",
					zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.String("master", w.b.pool.Address()),
					zap.Duration("waited_seconds", cs.timeout))
				ss.conn.NetConn().Close()
				return
			}
		}
	}
}

// notifyBranch returns the session's notify branch to pool, making it.
func (cs *clusterStream) notifyBranch(ss *session, pool *upstream.Pool) (*notifyBranch, error) {
	for _, b := range ss.cstream().notifyBranches {
		if samePool(b.pool, pool) {
			return b, nil
		}
	}
	d, err := pool.Acquire(context.Background())
	if err != nil {
		return nil, err
	}
	b := &notifyBranch{pool: pool, d: d, relay: ss.relay, wake: make(chan struct{}, 1)}
	ss.cstream().notifyBranches = append(ss.cstream().notifyBranches, b)
	published := slices.Clone(ss.cstream().notifyBranches)
	ss.notifyRef.Store(&published)
	nc := ss.conn.NetConn()
	go func() {
		err := d.StreamTo(b)
		if !b.dropped.Load() {
			cs.log.Info("closing a subscriber: its keyspace notifications from another master ended",
				zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.Error(err))
			nc.Close()
		}
	}()
	return b, nil
}

// dropNotifyBranches closes the session's notify branches (RESET, or the
// session's end).
func (ss *session) dropNotifyBranches() {
	for _, b := range ss.cstream().notifyBranches {
		b.dropped.Store(true)
		b.pool.Discard(b.d)
	}
	ss.cstream().notifyBranches = nil
	ss.notifyRef.Store(nil)
}

// redirectIDOn returns the Redis client id, on the server at addr, of
// target's connection there that can receive invalidations: its pin, or
// one of its notify branches (0: none).
func redirectIDOn(target *session, addr string) int64 {
	if pin := target.pinRef.Load(); pin != nil && pin.Address() == addr {
		return pin.RedisID()
	}
	if branches := target.notifyRef.Load(); branches != nil {
		for _, b := range *branches {
			if b.pool.Address() == addr {
				return b.d.RedisID()
			}
		}
	}
	return 0
}
