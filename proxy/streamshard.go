package proxy

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// Sharded pub/sub across a cluster's masters. A shard channel lives on its
// slot's master: SSUBSCRIBE must reach that node, which alone delivers
// what SPUBLISH sends the channel. One Redis takes a connection's shard
// channels of any slot, one command after another; a stream-mode session
// runs on one master's connection (its pin). So an SSUBSCRIBE or
// SUNSUBSCRIBE of channels of another master goes on the session's branch
// to that master (streambranch.go), which passes smessage frames to the
// client as they come, and its confirmations take the command's place
// among the pin's replies.
//
// Each master counts, in its confirmations, the shard channels the
// connection holds there; one Redis counts them all. Once the session has
// sent an SSUBSCRIBE, the relay reads every confirmation, the pin's and
// the branches', and shows the session's count (shardCounts): the
// master's own plus what the others hold.
//
// In RESP2 a connection with any subscription is in subscribed mode, and
// one whose only subscriptions are on branches is not in it on its pin:
// there rproxy gives PING the mode's answer and refuses what the mode
// refuses, once a modeProbe shows the pin outside the mode (the probe also
// waits for the branches' confirmations before it to be shown).

// shardCounts follows, for a stream-mode session on a cluster, how many
// shard channels each master holds for it, from the confirmations shown.
type shardCounts struct {
	on      atomic.Bool // an SSUBSCRIBE was sent: confirmations are read and rewritten
	pinAddr string      // the pin's master, set before the copy starts
	// wake has the session's goroutine subscribe again the channels in
	// moved (shardmove.go), now, and wakeLater after a new slot map has
	// been asked for; set before the copy starts, on a cluster upstream
	// only (nil: an unasked sunsubscribe is shown as it comes).
	wake, wakeLater func()

	mu     sync.Mutex
	by     map[string]int64    // by master address
	wanted map[string]struct{} // the session's shard channels, as it asked for them
	unsubs map[string]int      // confirmations still to come of SUNSUBSCRIBEs the session sent, by channel
	moved  []movedShard        // channels a master unsubscribed on its own, for the session to subscribe again
}

// movedShard is a shard channel that master from unsubscribed on its own;
// since is when the session first tried to subscribe it again.
type movedShard struct {
	channel, from string
	since         time.Time
}

// setWanted notes the session's shard channels, set, after an SSUBSCRIBE
// or SUNSUBSCRIBE it sends (its goroutine's; the copies read them).
func (c *shardCounts) setWanted(set map[string]struct{}) {
	c.mu.Lock()
	c.wanted = maps.Clone(set)
	c.mu.Unlock()
}

// unsubscribing notes, before the session sends an SUNSUBSCRIBE of
// channels (none: of all of set, its channels), that their confirmations
// are asked for: one the session has subscribed again meanwhile is not
// taken for Redis's own (takeUnasked).
func (c *shardCounts) unsubscribing(set map[string]struct{}, channels [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unsubs == nil {
		c.unsubs = make(map[string]int)
	}
	if len(channels) == 0 {
		for ch := range set {
			c.unsubs[ch]++
		}
		return
	}
	for _, ch := range channels {
		c.unsubs[string(ch)]++
	}
}

// takeUnasked reports whether frame, a whole confirmation from master
// addr, is an sunsubscribe of a channel the session still wants and did
// not ask to end (each frame is seen once, as it comes): Redis
// Cluster unsubscribes a connection's shard channel when the channel's
// slot moves to another master, which one Redis never does. It is not
// shown: its count is noted and the channel queued for the session to
// subscribe again where it now is (shardmove.go).
func (c *shardCounts) takeUnasked(addr string, frame []byte) bool {
	if c.wake == nil || !bytes.HasPrefix(frame[1:], shardConfirmationPrefixes[1][1:]) {
		return false
	}
	v, err := resp.Parse(frame)
	if err != nil || len(v.Elems) != 3 {
		return false
	}
	ch := string(v.Elems[1].Str)
	c.mu.Lock()
	_, wanted := c.wanted[ch]
	if n := c.unsubs[ch]; n > 0 {
		wanted = false // the session's own SUNSUBSCRIBE's
		if n == 1 {
			delete(c.unsubs, ch)
		} else {
			c.unsubs[ch] = n - 1
		}
	}
	if wanted {
		c.moved = append(c.moved, movedShard{channel: ch, from: addr})
	}
	c.mu.Unlock()
	if wanted {
		c.note(addr, v.Elems[2].Int)
		c.wake()
	}
	return wanted
}

// takeMoved returns the channels queued by takeUnasked, and forgets them.
func (c *shardCounts) takeMoved() []movedShard {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := c.moved
	c.moved = nil
	return moved
}

// requeue queues moved again, to be tried once a new slot map may have
// come (wakeLater).
func (c *shardCounts) requeue(moved ...movedShard) {
	c.mu.Lock()
	c.moved = append(c.moved, moved...)
	c.mu.Unlock()
	c.wakeLater()
}

// note records n, the count in a confirmation from master addr, and
// returns the session's shard channels on every master.
func (c *shardCounts) note(addr string, n int64) int64 {
	c.mu.Lock()
	if c.by == nil {
		c.by = make(map[string]int64)
	}
	c.by[addr] = n
	var total int64
	for _, k := range c.by {
		total += k
	}
	c.mu.Unlock()
	return total
}

// total returns the session's shard channels on every master.
func (c *shardCounts) total() int64 {
	return c.others("")
}

// start marks that the session is sending an SSUBSCRIBE or SUNSUBSCRIBE:
// from now on every confirmation is counted, the pin's included.
func (c *shardCounts) start() { c.on.Store(true) }

// others returns how many shard channels masters other than addr hold.
func (c *shardCounts) others(addr string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for a, k := range c.by {
		if a != addr {
			n += k
		}
	}
	return n
}

// rewrite returns frames, whole replies from master addr, with each
// confirmation among them counting the session's shard channels on every
// master, noting the master's own count.
func (c *shardCounts) rewrite(addr string, frames []byte) []byte {
	var out []byte
	var fr resp.Framer
	for i := 0; i < len(frames); {
		k, done, err := fr.Next(frames[i:])
		if err != nil || !done {
			return append(out, frames[i:]...)
		}
		out = append(out, c.rewriteOne(addr, frames[i:i+k])...)
		i += k
	}
	return out
}

// rewriteOne is rewrite for one whole frame.
func (c *shardCounts) rewriteOne(addr string, frame []byte) []byte {
	at, n, ok := shardConfirmation(frame)
	if !ok {
		return frame
	}
	total := c.note(addr, n)
	if total == n {
		return frame
	}
	out := append(slices.Clip(frame[:at]), ':')
	out = strconv.AppendInt(out, total, 10)
	return append(out, '\r', '\n')
}

// shardConfirmationPrefixes start an ssubscribe or sunsubscribe
// confirmation in RESP2 (an array) and RESP3 (a push).
var shardConfirmationPrefixes = [][]byte{
	[]byte("*3\r\n$10\r\nssubscribe\r\n"), []byte("*3\r\n$12\r\nsunsubscribe\r\n"),
	[]byte(">3\r\n$10\r\nssubscribe\r\n"), []byte(">3\r\n$12\r\nsunsubscribe\r\n"),
}

// mayBeShardConfirmation reports whether b, the start of a frame, may be
// a confirmation.
func mayBeShardConfirmation(b []byte) bool {
	for _, p := range shardConfirmationPrefixes {
		if bytes.HasPrefix(b, p) || bytes.HasPrefix(p, b) {
			return true
		}
	}
	return false
}

// shardConfirmation reports whether frame, one whole frame, is an
// ssubscribe or sunsubscribe confirmation, with its count n, whose ':'
// is at frame[at].
func shardConfirmation(frame []byte) (at int, n int64, ok bool) {
	if len(frame) < 28 || !bytes.HasSuffix(frame, []byte("\r\n")) {
		return 0, 0, false
	}
	matched := false
	for _, p := range shardConfirmationPrefixes {
		if bytes.HasPrefix(frame, p) {
			matched = true
			break
		}
	}
	if !matched {
		return 0, 0, false
	}
	// The count is the last element: digits before the final CRLF.
	at = len(frame) - 3
	for at > 0 && frame[at] >= '0' && frame[at] <= '9' {
		at--
	}
	if frame[at] != ':' || at == len(frame)-3 {
		return 0, 0, false
	}
	n, ok = resp.ParseInt(frame[at+1 : len(frame)-2])
	return at, n, ok
}

// isShardMessage reports whether frame is an smessage (a RESP2 array; in
// RESP3 every message is a push).
func isShardMessage(frame []byte) bool {
	return bytes.HasPrefix(frame, []byte("*3\r\n$8\r\nsmessage\r\n"))
}

// shardsElsewhere reports whether the session has sent shard channels of
// its own to a branch that it has not unsubscribed from (it may hold
// subscriptions its pin does not).
func (ss *session) shardsElsewhere() bool {
	return ss.cstream().shardBranched && len(ss.subscribed['s']) > 0
}

// shardOnBranch sends a stream-mode session's SSUBSCRIBE or SUNSUBSCRIBE
// where its channels are, on a cluster, reporting whether it took c: the
// channels of another master than the pin's (all in one slot: else the
// pin answers CROSSSLOT, as a cluster node does) go to the session's
// branch there; an SUNSUBSCRIBE of every channel goes to every master that
// holds some of the session's (shardUnsubscribeAll). It first marks that
// confirmations are to be counted (shardCounts).
func (cs *clusterStream) shardOnBranch(ss *session, c *call) bool {
	info := c.info
	if info == nil || info.Name != "ssubscribe" && info.Name != "sunsubscribe" || ss.relay == nil {
		return false
	}
	if !cs.on {
		return false
	}
	ss.relay.shards.start()
	if ss.role != 0 || ss.pinPool == nil || ss.inTransaction() || ss.cstream().branchTx != nil {
		return false
	}
	args := c.cmd.Args
	if len(args) == 1 {
		return cs.shardUnsubscribeAll(ss, c)
	}
	pool, keys := cs.keysMaster(ss, info, args)
	if keys != keysOneSlot || samePool(pool, ss.pinPool) {
		return false
	}
	b, err := cs.branch(ss, pool)
	if err != nil {
		ss.errorInStream(branchError(err))
		return true
	}
	ss.noteSubscriptions(info.Name, args)
	if info.Name == "ssubscribe" {
		ss.cstream().shardBranched = true
	}
	cs.shardSend(ss, b, c.cmd.Raw, len(args)-1)
	return true
}

// shardSend sends raw, an SSUBSCRIBE or SUNSUBSCRIBE, on branch b and
// queues its confirmations in the pin's stream: frames of them, or with
// 0 every one until the branch's count is 0 (an SUNSUBSCRIBE of all).
func (cs *clusterStream) shardSend(ss *session, b *streamBranch, raw []byte, frames int) {
	answered := ss.streamAnswered()
	w := b.sendShard(raw, frames, answered)
	if answered {
		ss.relay.queue(relayAnswer{later: w})
	}
	ss.streamCmds = append(ss.streamCmds, errorCmd)
}

// shardUnsubscribeAll sends an SUNSUBSCRIBE of every channel to each
// master that holds the session's (by the channels it asked for), the pin
// first; if none does, the pin alone answers, as one Redis does, with a
// confirmation of no channel. It reports whether it took c (false: the
// pin alone).
func (cs *clusterStream) shardUnsubscribeAll(ss *session, c *call) bool {
	backend := ss.pools[ss.proto]
	var pools []*upstream.Pool
	pin := false
	for ch := range ss.subscribed['s'] {
		pool := backend.PinPool(upstream.Slot([]byte(ch)))
		switch {
		case samePool(pool, ss.pinPool):
			pin = true
		case !slices.ContainsFunc(pools, func(p *upstream.Pool) bool { return samePool(p, pool) }):
			pools = append(pools, pool)
		}
	}
	if len(pools) == 0 {
		return false
	}
	ss.noteSubscriptions("sunsubscribe", c.cmd.Args)
	if pin {
		ss.streamCmds = append(ss.streamCmds, c.cmd.Raw)
	}
	for _, pool := range pools {
		b, err := cs.branch(ss, pool)
		if err != nil {
			ss.errorInStream(branchError(err))
			continue
		}
		cs.shardSend(ss, b, c.cmd.Raw, 0)
	}
	return true
}

// subscribedPing answers, in RESP2's subscribed mode, a PING the pin would
// answer outside it (its only subscriptions on branches: shardsElsewhere),
// as Redis does in the mode: ["pong", the argument or ""]. It reports
// whether it answered.
func (cs *clusterStream) subscribedPing(ss *session, c *call) bool {
	if c.info == nil || c.info.Name != "ping" || !ss.shardsElsewhere() || ss.proto != 2 || ss.inTransaction() || !ss.streamAnswered() {
		return false
	}
	if ss.subscribedSure {
		return false // the pin is in the mode: it answers so
	}
	switch where, ok := cs.modeElsewhere(ss); {
	case !ok:
		return true // the session is closed
	case where == subscribedNowhere:
		ss.forgetSubscriptions()
		return false
	case where == subscribedOnPin:
		return false
	}
	arg := []byte{}
	if len(c.cmd.Args) > 1 {
		arg = c.cmd.Args[1]
	}
	ss.substituteInStream(resp.AppendBulk([]byte("*2\r\n$4\r\npong\r\n"), arg))
	return true
}

// subscribedWhere is where a RESP2 session is in subscribed mode.
type subscribedWhere uint8

const (
	subscribedNowhere    subscribedWhere = iota
	subscribedOnPin                      // Redis answers as the mode does
	subscribedOnBranches                 // only branches hold subscriptions: rproxy answers as the mode does
)

// modeElsewhere asks the pin whether it is in RESP2's subscribed mode
// (redisSubscribed); if not, whether the branches hold shard channels of
// the session's (counted from the confirmations shown before the probe's
// answer). ok false: the session is closed.
func (cs *clusterStream) modeElsewhere(ss *session) (where subscribedWhere, ok bool) {
	subscribed, ok := cs.redisSubscribed(ss)
	switch {
	case !ok:
		return subscribedNowhere, false
	case subscribed:
		ss.subscribedSure = true
		return subscribedOnPin, true
	case ss.shardsElsewhere() && ss.relay.shards.others(ss.relay.shards.pinAddr) > 0:
		return subscribedOnBranches, true
	}
	return subscribedNowhere, true
}
