package upstream

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// Router sends batches of one protocol to a Cluster's masters. A batch
// whose commands all belong to one master goes to that master's pool as
// it is; one that spans masters is split into a batch per master, sent
// together, and its replies put back in order. MOVED, ASK and TRYAGAIN
// replies are followed (MOVED also corrects the slot map) and never reach
// the client unless MaxRedirects are exhausted.
type Router struct {
	c     *Cluster
	proto int
	next  atomic.Uint32 // spreads keyless commands over the masters
}

// tryAgainPause is the wait before a command that got TRYAGAIN (its keys
// are split by a slot migration) or CLUSTERDOWN is sent again the first
// time; it doubles at each round (retryPause), so that the default five
// rounds wait 620 ms in all: between go-redis v9's cluster client (three
// retries from 10 ms of backoff, at most 170 ms) and redis-py's (0.25 s
// before each of its three attempts), which both retry CLUSTERDOWN.
const tryAgainPause = 20 * time.Millisecond

// retryPause is the wait before redirect round round (from 0) sends
// again the commands Redis told to come back later.
func retryPause(round int) time.Duration {
	if round > 5 {
		round = 5
	}
	return tryAgainPause << round
}

var subBatches = sync.Pool{New: func() any { return NewBatch() }}

// Do sends the batch and waits for every reply.
func (r *Router) Do(b *Batch) {
	b.replies = b.replies[:0]
	b.replyEnds = b.replyEnds[:0]
	c := r.c
	c.AwaitMap()
	if !c.loaded.Load() {
		b.fillErrors(unavailable("cluster slot map not loaded: " + *c.lastErr.Load()))
		return
	}
	nodes := *c.nodes.Load()
	pick := r.next.Add(1)
	target := int32(-1)
	single := true
	for _, s := range b.slots {
		if s < 0 {
			continue
		}
		i := c.dest(s, pick)
		if target < 0 {
			target = i
		}
		if i != target || i < 0 {
			single = false
			break
		}
	}
	if single {
		if target < 0 {
			target = r.anyNode()
		}
		if target >= 0 {
			nodes[target].pools[r.proto].Do(b)
			r.followRedirects(b)
			return
		}
	}
	r.split(b, pick)
	r.followRedirects(b)
}

// anyNode picks a master for commands without a key, rotating so that
// keyless traffic (PING, benchmarks' ECHO) spreads over the masters.
func (r *Router) anyNode() int32 {
	shards := *r.c.shards.Load()
	if len(shards) == 0 {
		return -1
	}
	return r.c.slots[shards[int(r.next.Add(1))%len(shards)]].Load()
}

// split sends each command to its slot's master, one sub-batch per master,
// and assembles the replies in b's order. Keyless commands go with the
// first keyed one's master.
func (r *Router) split(b *Batch, pick uint32) {
	c := r.c
	// Parts are taken before any is sent: b claims to have been sent no
	// later than any of them, so no read joins it after its bytes left.
	b.markSent(c.base.SendSeq.Load())
	sc := splitScratches.Get().(*splitScratch)
	anyDest := int32(-1)
	for _, s := range b.slots {
		d := int32(-1)
		if s >= 0 {
			if d = c.dest(s, pick); anyDest < 0 {
				anyDest = d
			}
		}
		sc.dest = append(sc.dest, d)
	}
	if anyDest < 0 {
		anyDest = r.anyNode()
	}
	for i, d := range sc.dest {
		if b.slots[i] < 0 {
			d = anyDest
		}
		if d < 0 {
			sc.loc = append(sc.loc, replyLoc{part: -1, at: int32(len(sc.local))})
			sc.local = append(sc.local, slotNotServed(int(b.slots[i])))
			continue
		}
		sc.loc = append(sc.loc, sc.add(d, b.cmds[i], int(b.slots[i])))
	}
	r.sendAll(sc, b)
	// Straight from the parts' buffers into b, in b's order.
	for _, l := range sc.loc {
		b.appendReply(sc.reply(l))
	}
	sc.release()
}

// splitScratch is the working memory of a split or a redirect round:
// sub-batches per node and where each reply will be. Reused.
type splitScratch struct {
	dest  []int32    // split: each command's node
	loc   []replyLoc // where each reply is
	parts []*Batch   // a batch per node, in the order first used
	nodes []int32    // the node of each part
	local [][]byte   // replies made here
	old   []byte     // redirect: b's replies before the round
	ends  []int
}

// replyLoc is reply at of part; part -1: local[at]; part -2: the old
// reply at.
type replyLoc struct{ part, at int32 }

var splitScratches = sync.Pool{New: func() any { return new(splitScratch) }}

// add queues cmd for node d and returns where its reply will be.
func (sc *splitScratch) add(d int32, cmd []byte, slot int) replyLoc {
	pi := -1
	for j, n := range sc.nodes {
		if n == d {
			pi = j
			break
		}
	}
	if pi < 0 {
		pi = len(sc.parts)
		sc.parts = append(sc.parts, subBatches.Get().(*Batch))
		sc.nodes = append(sc.nodes, d)
	}
	pb := sc.parts[pi]
	pb.AddSlot(cmd, slot)
	return replyLoc{part: int32(pi), at: int32(pb.Len() - 1)}
}

func (sc *splitScratch) reply(l replyLoc) []byte {
	switch l.part {
	case -1:
		return sc.local[l.at]
	case -2:
		start := 0
		if l.at > 0 {
			start = sc.ends[l.at-1]
		}
		return sc.old[start:sc.ends[l.at]]
	}
	return sc.parts[l.part].Reply(int(l.at))
}

// sendAll sends every part of parent to its node at once and waits for
// them all.
func (r *Router) sendAll(sc *splitScratch, parent *Batch) {
	nodes := *r.c.nodes.Load()
	for j, pb := range sc.parts {
		pb.parent = parent
		nodes[sc.nodes[j]].pools[r.proto].Send(pb)
	}
	for _, pb := range sc.parts {
		pb.Wait()
	}
}

func (sc *splitScratch) release() {
	for i, pb := range sc.parts {
		pb.Reset()
		pb.lastReplies = 0 // another session's next: no hint of its replies (Batch.size)
		subBatches.Put(pb)
		sc.parts[i] = nil
	}
	clear(sc.local)
	sc.dest, sc.loc, sc.parts, sc.nodes, sc.local = sc.dest[:0], sc.loc[:0], sc.parts[:0], sc.nodes[:0], sc.local[:0]
	if cap(sc.old) > maxRetained {
		sc.old = nil
	}
	sc.old, sc.ends = sc.old[:0], sc.ends[:0]
	splitScratches.Put(sc)
}

var askingCmd = resp.AppendCommandString(nil, "ASKING")

// followRedirects re-sends the commands whose replies are cluster
// redirections, up to MaxRedirects rounds, and asks for a slot map refresh
// when a reply says the map is stale or a master is unreachable.
func (r *Router) followRedirects(b *Batch) {
	c := r.c
	for round := 0; ; round++ {
		var redo []int
		var txs []txRedirect
		hide := false
		for i := range b.replyEnds {
			rep := b.Reply(i)
			if len(rep) == 0 || rep[0] != '-' {
				continue
			}
			down := IsClusterDown(rep)
			if down || bytes.HasPrefix(rep, unavailablePrefix) {
				c.requestRefresh()
			}
			switch {
			case inTransaction(b, i):
				if down || isRedirect(rep) || bytes.HasPrefix(rep, tryAgainPrefix) {
					hide = true
					start, end, ok := transactionAt(b, i)
					if ok && len(txs) > 0 && txs[len(txs)-1].start == start {
						continue // its transaction is already to be sent again
					}
					var t txRedirect
					if ok {
						t, ok = c.transactionRedirect(b, start, end)
					}
					if ok {
						txs = append(txs, t)
					} else {
						c.NoteMoved(rep) // the client's retry finds the slot's master
					}
				}
			case down && b.slots[i] < 0:
				// Only a command with keys is refused for the
				// cluster's state.
			case down, bytes.HasPrefix(rep, movedPrefix), bytes.HasPrefix(rep, askPrefix), bytes.HasPrefix(rep, tryAgainPrefix):
				redo = append(redo, i)
			}
		}
		if hide {
			// A transaction's command is not sent again alone
			// (InTransaction): its redirect is the client's TRYAGAIN,
			// unless the whole transaction is sent again below (txs),
			// whose replies then replace these.
			hideRedirects(b, true)
		}
		if len(redo) == 0 && len(txs) == 0 {
			return
		}
		if round >= c.cfg.MaxRedirects {
			// The client sees rproxy as one node owning every slot: a
			// redirect to another node means nothing to it (a cluster
			// client would connect there, around rproxy).
			hideRedirects(b, false)
			return
		}
		sc := splitScratches.Get().(*splitScratch)
		// Every reply as it is now; the redone ones are replaced below.
		sc.old = append(sc.old[:0], b.replies...)
		sc.ends = append(sc.ends[:0], b.replyEnds...)
		for i := range b.replyEnds {
			sc.loc = append(sc.loc, replyLoc{part: -2, at: int32(i)})
		}
		paused := false
		for _, i := range redo {
			kind, slot, addr, ok := parseRedirect(b.Reply(i))
			if !ok {
				continue // malformed: the client gets it as it is
			}
			d := int32(-1)
			switch kind {
			case "moved", "ask":
				var err error
				if d, err = c.node(addr); err != nil {
					continue
				}
				if kind == "moved" && slot >= 0 && slot < Slots {
					c.learnMoved(slot, d)
				}
			case "tryagain", "clusterdown":
				if !paused {
					time.Sleep(retryPause(round))
					paused = true
				}
				if s := b.slots[i]; s >= 0 {
					d = c.dest(s, r.next.Add(1))
				}
			}
			c.metrics.redirects.WithLabelValues(kind).Inc()
			if d < 0 {
				continue
			}
			if kind == "ask" {
				c.noteAsk(slot)
				sc.add(d, askingCmd, int(b.slots[i])) // its reply is not the client's
			}
			sc.loc[i] = sc.add(d, b.cmds[i], int(b.slots[i]))
		}
		for _, t := range txs {
			c.metrics.redirects.WithLabelValues(t.kind).Inc()
			switch t.kind {
			case "moved":
				c.learnMoved(t.slot, t.node)
			case "ask":
				c.noteAsk(t.slot)
				sc.add(t.node, askingCmd, t.slot) // kept through the MULTI by Redis; its reply is not the client's
			case "tryagain", "clusterdown":
				if !paused {
					time.Sleep(retryPause(round))
					paused = true
				}
			}
			for k := t.start; k <= t.end; k++ { // one part, in order: the transaction stays whole
				sc.loc[k] = sc.add(t.node, b.cmds[k], int(b.slots[k]))
			}
		}
		if len(sc.parts) == 0 {
			sc.release()
			return
		}
		r.sendAll(sc, b)
		b.replies, b.replyEnds = b.replies[:0], b.replyEnds[:0]
		for _, l := range sc.loc {
			b.appendReply(sc.reply(l))
		}
		sc.release()
	}
}

var (
	movedPrefix       = []byte("-MOVED ")
	askPrefix         = []byte("-ASK ")
	tryAgainPrefix    = []byte("-TRYAGAIN")
	clusterDownPrefix = []byte("-CLUSTERDOWN")
	unavailablePrefix = []byte("-ERR upstream unavailable")
)

// clusterDownReplies are the CLUSTERDOWN errors Redis answers, before
// running a command, while the node sees the cluster down (a master
// failed and not yet replaced, the node on the minority side of a
// partition, for a moment during a failover) or the slot unassigned.
// Only these exact replies are sent again: a script's own error that
// reads CLUSTERDOWN may come after its writes.
var clusterDownReplies = [][]byte{
	[]byte("-CLUSTERDOWN The cluster is down\r\n"),
	[]byte("-CLUSTERDOWN The cluster is down and only accepts read commands\r\n"),
	[]byte("-CLUSTERDOWN Hash slot not served\r\n"),
}

// IsClusterDown reports whether rep is one of clusterDownReplies: the
// node refused the command and ran nothing.
func IsClusterDown(rep []byte) bool {
	if !bytes.HasPrefix(rep, clusterDownPrefix) {
		return false
	}
	for _, r := range clusterDownReplies {
		if bytes.Equal(rep, r) {
			return true
		}
	}
	return false
}

// parseRedirect reads "-MOVED <slot> <host:port>", "-ASK <slot>
// <host:port>", "-TRYAGAIN ..." or one of clusterDownReplies.
func parseRedirect(rep []byte) (kind string, slot int, addr string, ok bool) {
	if bytes.HasPrefix(rep, tryAgainPrefix) {
		return "tryagain", -1, "", true
	}
	if IsClusterDown(rep) {
		return "clusterdown", -1, "", true
	}
	if len(rep) == 0 {
		return "", 0, "", false
	}
	line := bytes.TrimSuffix(rep[1:], []byte("\r\n"))
	f := bytes.Fields(line)
	if len(f) != 3 {
		return "", 0, "", false
	}
	s, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return "", 0, "", false
	}
	addr = string(f[2])
	if bytes.HasPrefix(f[2], []byte(":")) {
		// An unknown endpoint (":port"): the host would be the node that
		// replied, which is not known here; the client gets the reply.
		return "", 0, "", false
	}
	return string(bytes.ToLower(f[0])), s, addr, true
}

func slotNotServed(slot int) []byte {
	if slot >= 0 {
		slot &= Slots - 1 // without ReplicaRead and InTransaction
	}
	return resp.AppendError(nil, "CLUSTERDOWN Hash slot not served (slot "+strconv.Itoa(slot)+")")
}

// PauseAfterClusterDown is, for a batch run on a connection of one master
// (a pinned session's) that the node refused whole with CLUSTERDOWN, the
// wait before round round (from 0) runs it there again, as Do's own
// rounds wait; it asks for a new slot map. It reports false, without
// waiting, once the rounds (MaxRedirects) are spent.
func (r *Router) PauseAfterClusterDown(round int) bool {
	if round >= r.c.cfg.MaxRedirects {
		return false
	}
	r.c.requestRefresh()
	r.c.metrics.redirects.WithLabelValues("clusterdown").Inc()
	time.Sleep(retryPause(round))
	return true
}

// SendOrdered sends a one-command batch to the master of its slot on the
// connection chosen by the slot, so that commands on one key sent with
// SendOrdered run in the order sent. Redirects are not followed: the
// caller sees them as errors. The caller must call b.Wait.
func (r *Router) SendOrdered(b *Batch) {
	c := r.c
	c.AwaitMap()
	i := int32(-1)
	if s := b.slots[0]; s >= 0 && c.loaded.Load() {
		i = c.slots[s&(Slots-1)].Load()
	}
	if i < 0 {
		b.replies, b.replyEnds = b.replies[:0], b.replyEnds[:0]
		b.fail(slotNotServed(int(b.slots[0])))
		return
	}
	(*c.nodes.Load())[i].pools[r.proto].SendOn(b, uint32(b.slots[0]&(Slots-1)))
}

// Ready reports whether the slot map is loaded and every master has a
// connection up.
func (r *Router) Ready() bool {
	c := r.c
	if !c.loaded.Load() {
		return false
	}
	nodes := *c.nodes.Load()
	for _, s := range *c.shards.Load() {
		i := c.slots[s].Load()
		if i < 0 || !nodes[i].pools[r.proto].Ready() {
			return false
		}
	}
	return true
}

// Close closes the whole cluster (both protocols' routers).
func (r *Router) Close() { r.c.Close() }

// PinPool returns the pool of the master of slot (any master for SlotAny
// or an unassigned slot), for a session that needs a dedicated connection.
func (r *Router) PinPool(slot int) *Pool {
	c := r.c
	c.AwaitMap()
	i := int32(-1)
	if slot >= 0 {
		i = c.slots[slot&(Slots-1)].Load()
	}
	if i < 0 {
		i = r.anyNode()
	}
	if i < 0 {
		// No map yet: a seed, whose Acquire fails or succeeds on its own.
		i = 0
	}
	return (*c.nodes.Load())[i].pools[r.proto]
}

// Shards returns one slot of each master, for commands that every master
// must run (DBSIZE, FLUSHALL): each master's lowest slot, in slot order.
func (r *Router) Shards() []int {
	return append([]int(nil), *r.c.shards.Load()...)
}

// HideRedirects replaces each MOVED or ASK reply of b (a batch whose
// replies are in) with a TRYAGAIN error naming the slot, and reports how
// many it replaced. Clients see rproxy as one node owning every slot, so
// a redirect to a real node must not reach them; TRYAGAIN is what a node
// answers while a slot it owns is being resharded: a cluster client
// retries it, on the same node.
//
// It is for a batch run on a connection of one master, which follows no
// redirect (a pinned session's): each MOVED corrects the slot map first,
// as a followed one does, so that the client's retry goes to the slot's
// master.
func (r *Router) HideRedirects(b *Batch) int {
	for i := range b.replyEnds {
		if rep := b.Reply(i); bytes.HasPrefix(rep, movedPrefix) {
			r.c.NoteMoved(rep)
		}
	}
	return hideRedirects(b, false)
}

// hideRedirects is HideRedirects, for the commands marked InTransaction
// alone when inTx.
func hideRedirects(b *Batch, inTx bool) int {
	n := 0
	b.Rewrite(func(i int, r []byte) []byte {
		slot, ok := RedirectSlot(r)
		if !ok || inTx && !inTransaction(b, i) {
			return nil
		}
		n++
		return tryAgain(slot)
	})
	return n
}

// tryAgain is the error a client that sees one node gets for a redirect
// of slot ("?" when the redirect names none) rproxy did not follow.
func tryAgain(slot string) []byte {
	return resp.AppendError(nil, "TRYAGAIN rproxy: slot "+slot+" is moving between the cluster's masters; try again")
}

func isRedirect(r []byte) bool {
	return bytes.HasPrefix(r, movedPrefix) || bytes.HasPrefix(r, askPrefix)
}

// RedirectPool returns, for reply a MOVED or an ASK, the pool of the
// node it names and whether it is an ASK; a MOVED first corrects the slot
// map (Cluster.NoteMoved). For a connection that follows no redirect (a
// pinned session's) to go where the redirect says.
func (r *Router) RedirectPool(reply []byte) (pool *Pool, ask, ok bool) {
	kind, slot, addr, ok := parseRedirect(reply)
	if !ok || kind == "tryagain" || kind == "clusterdown" || slot < 0 || slot >= Slots {
		return nil, false, false
	}
	i, err := r.c.node(addr)
	if err != nil {
		return nil, false, false
	}
	if kind == "moved" {
		r.c.learnMoved(slot, i)
	} else {
		r.c.noteAsk(slot)
	}
	return (*r.c.nodes.Load())[i].pools[r.proto], kind == "ask", true
}

// RedirectSlot reports whether reply r is a cluster node's MOVED or ASK,
// and the slot it names ("?" if it names none), for a reply that hides
// the redirect from a client that sees one node.
func RedirectSlot(r []byte) (slot string, ok bool) {
	if !isRedirect(r) {
		return "", false
	}
	if f := bytes.Fields(r[1:]); len(f) >= 2 {
		return string(f[1]), true
	}
	return "?", true
}
