package proxy

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// A stream-mode session on a cluster sends its commands on its own
// connections (the pin, its branches). A plain command on a branch that
// Redis redirects runs again where the redirect says, on the shared
// connections (streamFollow), when the relay reaches its reply, after what
// every command before it did (branchReply.followInTurn), its reply shown
// in its place. On the pin, whose replies the relay copies to the
// client as they come without knowing their commands, it cannot: the
// client gets rproxy's error (streamRedirectError). A MOVED corrects the
// slot map, so the session's next command of the slot goes to its new
// master. An ASK does not: during a slot's migration every command of a
// key already moved would meet one. So once rproxy has met an ASK for a
// slot, on any connection (upstream.Cluster.Migrating), and until the map
// names another master for it (the migration ended) or none has come for
// a while, the session's plain commands of that slot are diverted: the
// pin is sent
// errorCmd in the command's place, and when the relay reaches it (every
// reply before it in), the command runs on the shared connections, which
// follow the ASK, and its reply is shown there. A read the session would
// have had tracked (RESP3, tracking on, no REDIRECT) is followed by an
// invalidation push of its keys, since no connection of the session's
// tracks them where it ran: the client does not keep what it read. A
// transaction sent whole in one read, all of whose keys are in such a slot,
// is diverted whole (divertedTx). Not diverted: blocking commands (they
// would hold a shared connection), other transactions, commands under a
// WATCH, after CLIENT REPLY OFF or SKIP, and a RESP2 tracking session's
// reads (its invalidations go to another connection).

// divertAsked diverts c, a plain command of slot, as the comment above
// says, and reports whether it did.
func (cs *clusterStream) divertAsked(ss *session, c *call, slot int) bool {
	if !cs.routing.cluster.Migrating(slot) {
		return false
	}
	follow := cs.streamFollow(ss, c)
	if follow == nil {
		return false
	}
	ss.relay.queue(relayAnswer{made: func() []byte { return follow(slot) }})
	ss.streamCmds = append(ss.streamCmds, errorCmd) // drops the pin's CLIENT CACHING flag, as the command does
	return true
}

// streamFollow returns, for c, a command of a stream session on a
// cluster, what runs it on the shared connections (which follow
// redirects) for slot and makes its reply, with an invalidation push of
// its keys after a read the session would have had tracked; nil when it
// may not run there (the comment above).
func (cs *clusterStream) streamFollow(ss *session, c *call) func(slot int) []byte {
	info := c.info
	if info == nil || info.Handling != command.Forward || ss.inTransaction() || ss.watching || ss.streamWatch ||
		ss.cstream().watchPool != nil || ss.cstream().branchTx != nil || !ss.streamAnswered() {
		return nil
	}
	read := info.Has(command.ReadOnly)
	tracked, ok := ss.readsElsewhere()
	if read && !ok {
		return nil
	}
	rt, ok := ss.pools[ss.proto].(*upstream.Router)
	if !ok {
		return nil
	}
	raw := bytes.Clone(c.cmd.Raw)
	return func(slot int) []byte {
		reply := runAlone(rt, raw, slot)
		if read && tracked {
			reply = append(reply, invalidationPush(cs.rawKeys(raw))...)
		}
		return reply
	}
}

// readsElsewhere reports whether the session's reads may run on the
// shared connections (ok), and whether they are followed there by an
// invalidation push (tracked: RESP3, tracking on, no REDIRECT). A RESP2
// tracking session's may not: its invalidations go to another connection.
func (ss *session) readsElsewhere() (tracked, ok bool) {
	tracked = ss.tracking.redirect == 0 && ss.proto == 3
	return tracked, ss.tracking.redirect == -1 || tracked
}

// rawKeys returns the keys of raw, a command as the client sent it.
func (cs *clusterStream) rawKeys(raw []byte) [][]byte {
	v, err := resp.Parse(raw)
	if err != nil || len(v.Elems) == 0 {
		return nil
	}
	args := make([][]byte, len(v.Elems))
	for i, e := range v.Elems {
		args[i] = e.Str
	}
	table := cs.table.Load()
	keys, _ := command.Keys(keyInfo(table, table.Lookup(args[0]), args), args, nil)
	return keys
}

// invalidationPush is the RESP3 push Redis sends a tracking client when
// keys change.
func invalidationPush(keys [][]byte) []byte {
	out := []byte(">2\r\n$10\r\ninvalidate\r\n")
	out = append(strconv.AppendInt(append(out, '*'), int64(len(keys)), 10), '\r', '\n')
	for _, k := range keys {
		out = resp.AppendBulk(out, k)
	}
	return out
}

// divertedTx is a transaction of a stream session, all of whose keys are
// in a slot marked migrating, sent whole in one read (a client library's
// cached read: CLIENT CACHING YES, MULTI, PTTL, GET, EXEC): it runs whole
// on the shared connections at its EXEC's turn (divertTransaction), which
// follow the slot's redirects, where on the pin or a branch its commands
// would meet them.
type divertedTx struct {
	slot  int
	want  int      // the commands the read holds between MULTI and EXEC
	cmds  [][]byte // copies of those diverted so far
	reads bool     // a read among them: an invalidation push after EXEC's reply
}

// divertTransaction diverts the MULTI c and the transaction it starts, as
// divertedTx says, if it fits: ending with EXEC in this read, plain
// commands only (no blocking one), all keys in one slot marked migrating,
// no WATCH held. It reports whether it did.
func (cs *clusterStream) divertTransaction(ss *session, c *call) bool {
	if cs.routing == nil || !cs.routing.cluster.AnyMigrating() || ss.streamWatch || ss.watching || ss.cstream().watchPool != nil ||
		!ss.streamAnswered() || ss.skipNext {
		return false
	}
	table := cs.table.Load()
	slot, keyed, n, reads := -1, false, 0, false
	for _, rc := range ss.route.rest[ss.route.restAt:] {
		info := table.Lookup(rc.Args[0])
		if info != nil && info.Name == "exec" {
			if _, ok := ss.readsElsewhere(); !keyed || reads && !ok || !cs.routing.cluster.Migrating(slot) {
				return false
			}
			ss.cstream().divertedTx = &divertedTx{slot: slot, want: n, reads: reads}
			ss.noteTransaction("multi")
			ss.relay.substitute([]byte("+OK\r\n"))
			ss.streamCmds = append(ss.streamCmds, errorCmd)
			return true
		}
		if info == nil || info.Handling != command.Forward {
			return false
		}
		switch sl, keys := cs.keysSlot(ss, info, rc.Args); {
		case keys == keysNotPlain, keys == keysOneSlot && keyed && sl != slot:
			return false
		case keys == keysOneSlot:
			slot, keyed = sl, true
		}
		reads = reads || info.Has(command.ReadOnly)
		n++
	}
	return false // the read ends before the transaction does
}

// divertedCommand queues c, a command of the session's diverted
// transaction (+QUEUED), or at its EXEC the transaction's run, made in
// EXEC's turn; a command that did not come here (refused, answered by
// rproxy) makes the EXEC fail as Redis's would (EXECABORT).
func (cs *clusterStream) divertedCommand(ss *session, c *call) {
	tx := ss.cstream().divertedTx
	if c.info == nil || c.info.Name != "exec" {
		tx.cmds = append(tx.cmds, bytes.Clone(c.cmd.Raw))
		ss.relay.substitute([]byte("+QUEUED\r\n"))
		ss.streamCmds = append(ss.streamCmds, errorCmd)
		return
	}
	ss.cstream().divertedTx = nil
	ss.noteTransaction("exec")
	rt, ok := ss.pools[ss.proto].(*upstream.Router)
	if !ok || len(tx.cmds) != tx.want {
		ss.relay.substitute([]byte("-EXECABORT Transaction discarded because of previous errors.\r\n"))
		ss.streamCmds = append(ss.streamCmds, errorCmd)
		return
	}
	tracked, _ := ss.readsElsewhere()
	tracked = tracked && tx.reads
	ss.relay.queue(relayAnswer{made: func() []byte {
		reply := runTransaction(rt, tx.cmds, tx.slot)
		if tracked {
			var keys [][]byte
			for _, cmd := range tx.cmds {
				for _, k := range cs.rawKeys(cmd) {
					if !slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }) {
						keys = append(keys, k)
					}
				}
			}
			reply = append(reply, invalidationPush(keys)...)
		}
		return reply
	}})
	ss.streamCmds = append(ss.streamCmds, errorCmd)
}
