package proxy

import (
	"time"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
	"go.uber.org/zap"
)

// Shard channels whose slot moves. Redis Cluster unsubscribes a
// connection's shard channels of a slot when the slot moves to another
// master (the node that held it sends sunsubscribe), and a cluster client
// subscribes them again where they now are. One Redis never does that,
// and a client of one Redis (the one node rproxy shows) takes it as the end
// of the subscription: go-redis's PubSub drops it silently, and the
// channel's messages are lost for good. So rproxy does not show it
// (shardCounts.takeUnasked) and subscribes the channel again on its
// slot's new master, from the session's own goroutine (woken): on the
// pin, between two errorCmds whose answers hide the SSUBSCRIBE's reply
// (relayAnswer.hide), or on the session's branch to that master with its
// reply unshown. Messages SPUBLISHed between the move and the new
// subscription are lost, as they are for a cluster client. While rproxy's
// slot map still shows the slot on the master that dropped the channel,
// it asks for a new map and tries again; after upstream.timeout it gives
// up and shows the client the sunsubscribe, as Redis Cluster does.

// shardMoveRetry is how long a channel to subscribe again waits before
// the next try, once a new slot map has been asked for.
const shardMoveRetry = 20 * time.Millisecond

// startShardMoves lets the session's relay queue shard channels to
// subscribe again (shardCounts.takeUnasked), on a cluster upstream and a
// client connection its goroutine can be woken on.
func (cs *clusterStream) startShardMoves(ss *session, relay *streamRelay) {
	lc, ok := ss.conn.NetConn().(*limitedConn)
	if cs.routing == nil || !ok {
		return
	}
	cluster := cs.routing.cluster
	relay.noteMoved = func(reply []byte) {
		cluster.NoteMoved(reply)
		cluster.NoteAsk(reply)
	}
	relay.shards.wake = lc.wake
	relay.shards.wakeLater = func() {
		cluster.RequestRefresh()
		time.AfterFunc(shardMoveRetry, lc.wake)
	}
	relay.shards.setWanted(ss.subscribed['s'])
}

// woken runs, in the session's goroutine, what another goroutine asked it
// to (limitedConn.wake).
func (cs *clusterStream) woken(ss *session) {
	if ss.stream && ss.relay != nil {
		cs.resubscribeMoved(ss)
	}
}

// resubscribeMoved subscribes again, where their slots now are, the shard
// channels masters unsubscribed on their own that the session still
// wants; those it cannot yet wait for a new slot map, up to
// upstream.timeout (see above).
func (cs *clusterStream) resubscribeMoved(ss *session) {
	shards := &ss.relay.shards
	moved := shards.takeMoved()
	if len(moved) == 0 {
		return
	}
	now := cs.clock()
	var later, onPin []movedShard
	seen := make(map[string]bool, len(moved))
	for _, m := range moved {
		if _, wanted := ss.subscribed['s'][m.channel]; !wanted || seen[m.channel] {
			continue // unsubscribed since, or queued twice
		}
		seen[m.channel] = true
		if m.since.IsZero() {
			m.since = now
		}
		if m.from == shards.pinAddr {
			ss.subscribedSure = false // RESP2: the pin may have left subscribed mode (subscribedPing)
		}
		pool := ss.pools[ss.proto].PinPool(upstream.Slot([]byte(m.channel)))
		switch {
		case pool == nil || pool.Address() == m.from || !cs.mayResubscribe(ss, pool):
			if now.Sub(m.since) >= cs.timeout {
				cs.showUnsubscribed(ss, m)
				continue
			}
			later = append(later, m)
		case samePool(pool, ss.pinPool):
			onPin = append(onPin, m)
		default:
			if !cs.resubscribeOnBranch(ss, pool, m) {
				later = append(later, m)
			}
		}
	}
	if len(onPin) > 0 {
		cs.resubscribeOnPin(ss, onPin)
	}
	if len(later) > 0 {
		shards.requeue(later...)
	}
}

// mayResubscribe reports whether an SSUBSCRIBE of rproxy's own may go to
// pool now: not inside a transaction (it would be queued in it), and on
// the pin only where Redis answers the errorCmds around it (CLIENT REPLY,
// a SKIP included)
// and holds no CLIENT CACHING flag for the client's next command.
func (cs *clusterStream) mayResubscribe(ss *session, pool *upstream.Pool) bool {
	if ss.role != 0 || ss.pinPool == nil || ss.inTransaction() || ss.cstream().branchTx != nil || ss.cstream().multiDeferred {
		return false
	}
	if samePool(pool, ss.pinPool) {
		return ss.streamAnswered() && !ss.skipNext && !cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds)
	}
	return true
}

// resubscribeOnPin sends an SSUBSCRIBE of each of moved on the pin, their
// replies hidden between two errorCmds' answers; an error among them (a
// MOVED: the slot map was behind) has them all tried again.
func (cs *clusterStream) resubscribeOnPin(ss *session, moved []movedShard) {
	shards := &ss.relay.shards
	ss.relay.queue(relayAnswer{hide: &shardHide{retry: func() { shards.requeue(moved...) }}})
	ss.streamCmds = append(ss.streamCmds, errorCmd)
	for _, m := range moved {
		ss.streamCmds = append(ss.streamCmds, resp.AppendCommandString(nil, "SSUBSCRIBE", m.channel))
	}
	ss.relay.queue(relayAnswer{unhide: true})
	ss.streamCmds = append(ss.streamCmds, errorCmd)
	ss.streamHelpers += len(moved) + 2
	cs.sendStreamBatch(ss)
}

// resubscribeOnBranch sends an SSUBSCRIBE of m on the session's branch to
// pool, its reply unshown; an error has it tried again. It reports false
// if the branch could not be made.
func (cs *clusterStream) resubscribeOnBranch(ss *session, pool *upstream.Pool, m movedShard) bool {
	b, err := cs.branch(ss, pool)
	if err != nil {
		return false
	}
	ss.cstream().shardBranched = true
	w := b.sendShard(resp.AppendCommandString(nil, "SSUBSCRIBE", m.channel), 1, false)
	shards := &ss.relay.shards
	go func() {
		if r := w.wait(); len(r) > 0 && r[0] == '-' {
			shards.requeue(m)
		}
	}()
	return true
}

// showUnsubscribed gives up subscribing m again: the client gets the
// sunsubscribe its master sent, with the session's count, as from Redis
// Cluster, and the session no longer counts the channel as its own.
func (cs *clusterStream) showUnsubscribed(ss *session, m movedShard) {
	cs.log.Info("shard channel unsubscribed by its master, not subscribed again within upstream.timeout",
		zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.String("master", m.from))
	delete(ss.subscribed['s'], m.channel)
	ss.relay.shards.setWanted(ss.subscribed['s'])
	if ss.proto != 3 && !ss.streamAnswered() {
		return // Redis would not send it either
	}
	frame := []byte("*3\r\n$12\r\nsunsubscribe\r\n")
	if ss.proto == 3 {
		frame[0] = '>'
	}
	frame = resp.AppendBulk(frame, []byte(m.channel))
	frame = resp.AppendInt(frame, ss.relay.shards.total())
	if err := ss.relay.writeFrame(frame); err != nil {
		ss.conn.NetConn().Close()
	}
}
