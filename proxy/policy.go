package proxy

import (
	"bytes"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// policing is the policy's stage: it may refuse a command (a -DENIED
// reply queued in order), rewrite it, refuse an oversized value, raise a
// cache write's TTL (jitter) or refuse or rewrite a DEL of a big key. Its
// configuration is policy.Config, compiled and validated by policy.New,
// and replaced whole on a reload (set); its metrics are policy.Metrics,
// registered once; it logs through the compiled policy. A session's
// scratch is policyState. What it asks of the session's batch is given at
// construction: flush (a big-key probe must see the writes queued before
// the DEL) and deny (a refusal in order, which also aborts an open
// transaction).
type policing struct {
	current atomic.Pointer[policy.Policy] // nil: no policy, no jitter
	metrics *policy.Metrics
	log     *zap.Logger
	table   *atomic.Pointer[command.Table] // the command table in force (rewritten commands' info)
	cluster bool                           // keys have slots (the probes')
	timeout time.Duration                  // a probe on a pinned connection
	flush   func(ss *session)
	deny    func(ss *session, reply []byte)
}

// SetPolicy compiles cfg and makes it the policy for every command from
// now on; on error the current policy stays. Sessions pick the new policy
// up at their next command, so a reload drops no connection.
func (s *Server) SetPolicy(cfg policy.Config) error { return s.policing.set(cfg) }

func (pg *policing) set(cfg policy.Config) error {
	p, err := policy.New(cfg, pg.metrics, pg.log)
	if err != nil {
		return err
	}
	pg.current.Store(p)
	return nil
}

func (pg *policing) command(ss *session, c *call) bool {
	pol := pg.current.Load()
	if pol == nil || c.inExec && isAuth(c.cmd.Args[0]) {
		// An AUTH queued in MULTI passes as AUTH outside it does, which
		// the auth stage answers before the policy.
		return false
	}
	var ok bool
	c.cmd, c.info, ok = pg.apply(ss, pol, c.info, c.cmd)
	return !ok
}

func (*policing) replies(*session) {}

// apply checks cmd against pol. It returns the command to run and its
// info, or ok false when a reply was queued instead.
func (pg *policing) apply(ss *session, pol *policy.Policy, info *command.Info, cmd resp.Command) (resp.Command, *command.Info, bool) {
	req := &ss.pol.req
	*req = policy.Request{Args: cmd.Args, User: ss.user, Addr: ss.addr}
	if info != nil {
		req.Name = info.Name
		if pol.NeedsKeys(info.Name) {
			ss.pol.keys, _ = command.Keys(info, cmd.Args, ss.pol.keys[:0])
			req.Keys = ss.pol.keys
		}
	} else {
		req.Name = string(bytes.ToLower(cmd.Args[0])) // unknown commands only
	}
	d := pol.Check(req)
	switch d.Action {
	case policy.Deny:
		pg.deny(ss, d.Reply)
		return cmd, info, false
	case policy.Rewrite:
		cmd = resp.Command{Raw: resp.AppendCommand(nil, d.Args...), Args: d.Args}
		info = pg.table.Load().Lookup(d.Args[0])
		req.Args = d.Args
		if info != nil {
			req.Name = info.Name
		}
	}
	if reply, denied := pol.CheckValueSize(req); denied {
		pg.deny(ss, reply)
		return cmd, info, false
	}
	if info == nil {
		return cmd, info, true
	}
	if ss.inTransaction() {
		// TTLs set together in a transaction are coupled on purpose (a key
		// and the tag set that indexes it): no jitter there.
	} else if out, applied := pol.Jitter(info.Name, cmd.Args); applied {
		cmd = resp.Command{Raw: resp.AppendCommand(nil, out...), Args: out}
	}
	if info.Name == "del" && len(cmd.Args) > 1 && pol.BigKeyCheck() && !ss.inTransaction() && !ss.stream {
		var ok bool
		if cmd, ok = pg.checkBigDel(ss, pol, cmd); !ok {
			return cmd, info, false
		}
		info = pg.table.Load().Lookup(cmd.Args[0])
	}
	return cmd, info, true
}

// deny queues a refusal (the policy's, or refuseMsg's). In stream mode
// replies come straight from Redis, so Redis is sent a command it rejects
// as unknown (which also aborts an open transaction's EXEC, as
// abortTransaction does outside stream mode), and the refusal is shown in
// place of Redis's error.
func (s *Server) deny(ss *session, reply []byte) {
	ss.refusedCount++
	if ss.stream {
		ss.substituteInStream(reply)
		return
	}
	s.abortTransaction(ss)
	ss.queueLocal(reply, false)
}

// poisonCmd is a command Redis rejects when it is queued (GET without its
// key), which flags the transaction so that its EXEC is refused.
var poisonCmd = resp.AppendCommandString(nil, "GET")

// abortTransaction makes Redis refuse the EXEC of the client's open
// transaction, as Redis does after any command it rejected at queue time:
// the client gets EXECABORT from Redis itself, and nothing of the
// transaction is applied. Redis's reply to the poison is not shown: the
// client sees rproxy's refusal in its place.
func (s *Server) abortTransaction(ss *session) {
	if !ss.inTransaction() || ss.stream {
		return
	}
	if ss.route.multiPending && !s.routing.startDeferredMulti(ss, true) {
		return // no connection for the transaction: its error is queued
	}
	if ss.route.keylessTx {
		ss.route.keyless = append(ss.route.keyless, poisonCmd) // moved, it stays refused
	}
	ss.batch.AddSlot(poisonCmd, ss.sharedTxSlot())
	ss.order = append(ss.order, replySource{from: fromDiscard})
	if ss.pin != nil { // a shared transaction's batch has no tracks (sharedtx.go)
		ss.track = append(ss.track, track{})
	}
}

// policyState is the policy's scratch in a session, reused per command so
// the check allocates nothing, and the batch that probes key sizes before
// a DEL.
type policyState struct {
	req   policy.Request
	keys  [][]byte
	probe *upstream.Batch
}

// lengthCommands gives, by TYPE reply, the O(1) command that sizes a value.
var lengthCommands = map[string]string{
	"string": "STRLEN", "list": "LLEN", "set": "SCARD", "zset": "ZCARD", "hash": "HLEN", "stream": "XLEN",
}

// checkBigDel probes the size of each key of a DEL (TYPE, then the type's
// length command: two O(1) round trips) and refuses the DEL, or rewrites it
// to UNLINK, when a key is over the policy's limit. Commands queued before
// the DEL are sent first if they may have written, so the probe sees them.
// A probe that fails lets the DEL through: the policy is a guard, not a
// reason to fail deletes while Redis is reachable.
func (pg *policing) checkBigDel(ss *session, pol *policy.Policy, cmd resp.Command) (resp.Command, bool) {
	if ss.flights.wrote && ss.batch.Len() > 0 || ss.pin != nil {
		pg.flush(ss)
	}
	keys := cmd.Args[1:]
	if ss.pol.probe == nil {
		ss.pol.probe = upstream.NewBatch()
	}
	b := ss.pol.probe
	b.Reset()
	for _, k := range keys {
		b.AddSlot(resp.AppendCommand(nil, []byte("TYPE"), k), pg.slotOf(k))
	}
	pg.probe(ss, b)
	types := make([]string, len(keys))
	for i := range keys {
		r := b.Reply(i)
		if len(r) < 3 || r[0] != '+' {
			return cmd, true
		}
		types[i] = string(r[1 : len(r)-2])
	}
	b.Reset()
	var sized []int
	for i, k := range keys {
		if c, ok := lengthCommands[types[i]]; ok {
			b.AddSlot(resp.AppendCommand(nil, []byte(c), k), pg.slotOf(k))
			sized = append(sized, i)
		}
	}
	if len(sized) == 0 {
		return cmd, true
	}
	pg.probe(ss, b)
	rewrite := false
	for j, i := range sized {
		n, ok := resp.Int(b.Reply(j))
		if !ok {
			return cmd, true
		}
		over, reply := pol.DelVerdict(keys[i], types[i], n)
		if !over {
			continue
		}
		if pol.BigKeyAction() != policy.Rewrite {
			pg.deny(ss, reply)
			return cmd, false
		}
		rewrite = true
	}
	if rewrite {
		args := append([][]byte{[]byte("UNLINK")}, keys...)
		cmd = resp.Command{Raw: resp.AppendCommand(nil, args...), Args: args}
	}
	return cmd, true
}

// probe runs a read-only batch where the session's commands run: its
// pinned connection (its db), or the shared pool.
func (pg *policing) probe(ss *session, b *upstream.Batch) {
	if ss.pin != nil {
		ss.pin.Do(b, pg.timeout)
		return
	}
	ss.pools[ss.proto].Do(b)
}

func (pg *policing) slotOf(key []byte) int {
	if !pg.cluster {
		return upstream.SlotAny
	}
	return upstream.Slot(key)
}
