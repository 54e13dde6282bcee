package proxy

import (
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rproxy/rproxy/coalesce"
	"github.com/rproxy/rproxy/command"
)

// coalescing is the stage that lets an eligible read join an identical one
// in flight (join), and after the replies publishes the flights the
// session leads. Its configuration is coalesce.Config, its metrics are its
// group's (package coalesce), its lasting state is the group, and a
// session's per-batch state is coalesceState. It logs nothing.
type coalescing struct {
	group *coalesce.Group
	cmds  map[string]bool // the configured commands, lower case
	get   bool            // cmds["get"], the common case, without the lookup
	// shared is the server's own shared connections: a GET's key hash
	// stands for its identity only on them (not an upstream user's).
	shared *poolSet
}

// newCoalescing builds the stage from cfg (validated), with its metrics on
// reg; the returned tick must run every millisecond (the coarse clock's
// tick) to forget the filter's reads every cfg.Recent.
func newCoalescing(cfg coalesce.Config, shared *poolSet, reg prometheus.Registerer) (*coalescing, func()) {
	co := &coalescing{group: coalesce.New(cfg.Window, true, reg), cmds: make(map[string]bool), shared: shared}
	for _, name := range cfg.Commands {
		co.cmds[strings.ToLower(name)] = true
	}
	co.get = co.cmds["get"]
	every := max(int(cfg.RecentOrDefault().Milliseconds()), 1) // clock ticks
	ticks := 0
	return co, func() {
		if ticks++; ticks%every == 0 {
			co.group.Forget()
		}
	}
}

func (co *coalescing) command(ss *session, c *call) bool {
	if c.info == nil || c.info.Handling != command.Forward || c.info.Has(command.Write) {
		return false
	}
	if !c.hashed && co.get && c.isGet() && ss.pin == nil && !ss.multiSent && !ss.flights.wrote && ss.pools == co.shared {
		c.keyHash, c.hashed = xxhash.Sum64(c.cmd.Args[1]), true
	}
	taken, _ := co.join(ss, c.info, c.cmd.Raw, c.keyHash, c.hashed, c.hot)
	return taken
}

func (co *coalescing) replies(ss *session) {
	for i, l := range ss.flights.leads {
		// Before waiting on any flight we joined: no cycle can form.
		r := ss.batch.Reply(l.idx)
		for _, o := range ss.copies.over {
			if o.idx == l.idx {
				r = o.reply // a copy that missed: joiners get the origin's reply too
			}
		}
		l.f.Publish(r)
		ss.flights.leads[i] = lead{}
	}
	ss.flights.leads = ss.flights.leads[:0]
}

// coalesceState is coalescing's per-batch state in a session: flights it
// leads (published right after its upstream call), flights it joined
// (fromFlight order entries), whether the batch wrote (no joins after a
// write), and a scratch buffer for flight keys.
type coalesceState struct {
	leads      []lead
	joined     []*coalesce.Flight
	wrote      bool // this read batch has a write so far
	batchWrote bool // the batch being sent has a write
	key        []byte
}

// lead is a flight this session leads: the reply of batch command idx.
type lead struct {
	f   *coalesce.Flight
	idx int
}

// readMaybeJoined queues a read, or joins an identical one in flight when
// it is eligible (and coalescing is on: co not nil); it reports whether the
// read is in the session's own batch (false: joined).
func (co *coalescing) readMaybeJoined(ss *session, info *command.Info, raw []byte, keyHash uint64, hashed, hot bool) bool {
	if co == nil {
		ss.forward(raw)
		return true
	}
	taken, joined := co.join(ss, info, raw, keyHash, hashed, hot)
	if !taken {
		ss.forward(raw)
	}
	return !joined
}

// join lets an eligible read join an identical one in flight (joined), or
// queues it as the leader of a new flight; it reports whether it took the
// read. A session joins only while unpinned (db 0, no transaction, no
// stream) and only before any write in the same batch, so it always reads
// its own writes; which flights are joinable (not yet written, or also in
// flight since its last acknowledged write) is coalesce.Config.Window.
//
// keyHash, when hashed, is xxhash.Sum64 of the GET's key: mixed with the
// protocol it stands for the whole identity's hash (equal identities have
// equal keys; the table compares the identities in full). hot: a
// tier.Cacheable command of a hot key, coalesced whatever the configured list.
func (co *coalescing) join(ss *session, info *command.Info, raw []byte, keyHash uint64, hashed, hot bool) (taken, joined bool) {
	// A hashed read is a GET: its eligibility needs no lookup by name.
	if ss.pin != nil || ss.multiSent || ss.flights.wrote || !(hashed && co.get || hot || co.cmds[info.Name]) {
		return false, false
	}
	hashed = hashed && len(ss.user) == 0
	if hashed {
		keyHash ^= uint64(ss.proto) * 0x9e3779b97f4a7c15
		if !co.group.Seen(keyHash) {
			return false, false // not read recently: no flight, no identity to build
		}
	}
	// Identity: protocol, upstream user, and the command as sent.
	ss.flights.key = append(ss.flights.key[:0], byte(ss.proto), byte(len(ss.user)))
	ss.flights.key = append(ss.flights.key, ss.user...)
	ss.flights.key = append(ss.flights.key, raw...)
	var f *coalesce.Flight
	var leader bool
	if hashed {
		f, leader = co.group.JoinHash(keyHash, ss.flights.key, ss.batch, ss.lastWriteSeq)
	} else {
		f, leader = co.group.Join(ss.flights.key, ss.batch, ss.lastWriteSeq)
	}
	if leader {
		ss.forward(raw)
		if f != nil { // nil: a key not read recently starts no flight
			ss.flights.leads = append(ss.flights.leads, lead{f: f, idx: ss.batch.Len() - 1})
		}
		return true, false
	}
	ss.flights.joined = append(ss.flights.joined, f)
	ss.order = append(ss.order, replySource{from: fromFlight, idx: int32(len(ss.flights.joined) - 1)})
	return true, true
}
