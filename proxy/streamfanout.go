package proxy

import "github.com/rproxy/rproxy/resp"

// Commands of every master, in stream mode. Outside stream mode a command
// that acts or reports on the whole data (fanOutCommands: FLUSHALL,
// CONFIG SET, DBSIZE, INFO, SLOWLOG GET...) goes to every master and the
// replies are merged (cluster.go). A session in stream mode sent it to its
// own connection, one master: a tracking client's FLUSHALL emptied one
// master of the cluster, its CONFIG SET set one node, its DBSIZE and INFO
// counted one master's. Now it goes to the pin and to the session's
// branch on every other master (made if need be), in order with the
// session's other commands there, and the pin's reply is replaced by the
// merged replies once all have come (joinInStream). CONFIG SET of a
// node's own setting is refused as outside stream mode (clusterRefusal).
// SCAN walks the masters as outside stream mode (streamScan). Inside a transaction, and for a
// session that may not branch (RESP2 subscribed, MONITOR, a replica),
// the command goes to the pin as before.

// streamFanOut sends c to every master when it is one of fanOutCommands,
// or refuses it (clusterRefusal), reporting whether it took it.
func (s *Server) streamFanOut(ss *session, c *call) bool {
	info, args := c.info, c.cmd.Args
	if s.cfg.Cluster == nil || info == nil || ss.inTransaction() {
		return false
	}
	name := fanOutName(info.Name, args)
	if info.Name == "scan" && len(args) > 1 {
		return s.streamScan(ss, c)
	}
	if msg := clusterRefusal(name, args); msg != "" {
		s.refuseMsg(ss, msg)
		return true
	}
	kind, ok := fanOutCommands[name]
	if !ok || !s.branching(ss) || !ss.streamAnswered() {
		return false
	}
	backend := ss.pools[ss.proto]
	shards := backend.Shards()
	if len(shards) < 2 {
		return false
	}
	branches := make([]*streamBranch, 0, len(shards)-1)
	for _, slot := range shards {
		pool := backend.PinPool(slot)
		if samePool(pool, ss.pinPool) {
			continue
		}
		b, err := s.branch(ss, pool)
		if err != nil {
			ss.errorInStream(branchError(err)) // sent nowhere
			return true
		}
		branches = append(branches, b)
	}
	kind, raw := fanOutSent(kind, args, c.cmd.Raw)
	parts := make([]*branchReply, len(branches))
	for i, b := range branches {
		parts[i] = b.send([][]byte{raw}, []bool{true})[0]
	}
	m := s.routing.fanOutMerge(kind, len(parts)+1, args, ss.proto)
	withProxy := info.Name == "info" && infoWantsProxy(args)
	ss.joinInStream(raw, func(pinReply []byte) []byte {
		replies := [][]byte{pinReply}
		var pushes []byte
		for _, p := range parts {
			r, after := p.showApart()
			replies = append(replies, r)
			pushes = append(pushes, after...)
		}
		out := m.reply(replies)
		if info.Name == "info" {
			out = s.infoReply(out, nil, withProxy)
		}
		return append(out, pushes...)
	})
	return true
}

// joinInStream sends raw, in stream mode, to the pin, whose reply, an
// error too and however long, the relay replaces by f's (rewriteNext).
func (ss *session) joinInStream(raw []byte, f func([]byte) []byte) {
	ss.relay.queue(relayAnswer{rewrite: f, join: true})
	ss.streamCmds = append(ss.streamCmds, errorCmd, raw)
	ss.streamHelpers++
}

// streamScan sends a SCAN, in stream mode, to the master its cursor names
// (clusterscan.go): the pin, or the session's branch there, made if need
// be. On a branch the pin runs it too (read-only; its reply is dropped) so
// that the reply keeps its place among the pin's. A session that may not
// branch is refused.
func (s *Server) streamScan(ss *session, c *call) bool {
	backend := ss.pools[ss.proto]
	slot, raw, m, ok := s.routing.scanPart(backend.Shards(), c.cmd.Args)
	if !ok {
		ss.errorInStream(resp.AppendError(nil, "ERR invalid cursor"))
		return true
	}
	pool := backend.PinPool(slot)
	if samePool(pool, ss.pinPool) {
		ss.joinInStream(raw, func(pinReply []byte) []byte { return m.reply([][]byte{pinReply}) })
		return true
	}
	if !s.branching(ss) || !ss.streamAnswered() {
		s.refuseMsg(ss, "SCAN of another master than this connection's is not supported here (pub/sub in RESP2, MONITOR, CLIENT REPLY OFF); scan from a connection without them")
		return true
	}
	b, err := s.branch(ss, pool)
	if err != nil {
		ss.errorInStream(branchError(err)) // sent nowhere
		return true
	}
	part := b.send([][]byte{raw}, []bool{true})[0]
	ss.joinInStream(raw, func([]byte) []byte {
		r, after := part.showApart()
		return append(m.reply([][]byte{r}), after...)
	})
	return true
}
