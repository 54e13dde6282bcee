package proxy

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// The request path, top to bottom. A client's read of pipelined commands
// is executed command by command (exec): each passes the stages of
// chain.commands in order until one takes it (answers, refuses or queues
// it); dispatch, the last, takes what is left. The batch then goes
// upstream in one send (flush), and once its replies are in, the stages of
// chain.replies see them, in order, before flush writes every reply to the
// client in the client's order (session.order says where each comes from).
//
// A session in stream mode (pub/sub, MONITOR, tracking, replication)
// passes chain.stream instead: the same policy and tier stages; in RESP2's
// subscribed mode, once Redis confirms it, what Redis refuses there goes
// to Redis as sent (subscribedContext); then the transaction guard, auth, and
// streamDispatch, which sends each command as it comes: to the pin, or on
// a cluster through clusterStream (streamcluster.go) to a connection of
// the session's own on the master its keys are on, or to every master.
//
// Stages that are off in the configuration are not in the chain, so the
// path pays nothing for them.
//
// Each feature stage is a struct holding what it uses (its configuration,
// its state or engine, and its metrics and logger where it has them), and
// a session's per-batch state for it is a struct of its own: authenticating
// (auth.go), policing (policy.go), tiering (tiering.go), replicaReads
// (replicas.go), routing (cluster.go), salting (salting.go) and coalescing
// (coalescing.go). What they ask of the Server (flush, an in-order refusal,
// pinning) is handed to them when they are built. The stages that pin,
// flush and answer on the Server's connections (transactionGuard,
// scriptKill, dispatch, streamDispatch) are the Server's own.
//
// One GET, from the socket to the reply: client.go's readLoop reads and
// parses the client's bytes (resp.RequestParser) and hands the read's
// commands to handle (session.go), which calls exec for each. exec looks
// the command up (the session's last lookup, when the name repeats) and
// runs the stages below in order: bookkeeping counts it; arityCheck,
// transactionGuard, authenticating, policing, queueForExec, pauses,
// tierWrites (a GET writes no key), scriptKill and replicaReads pass it
// on; routing gives it its master's slot;
// tierReads answers it from the local tier if the key is hot and cached
// (else asks for a fill); salting may send it to a salted copy;
// coalescing may join it to an identical GET in flight; dispatch queues it
// in the session's batch. (A command that may write, queued after reads
// whose replies come after the batch is sent, first has those answered:
// answerReadsBeforeWrite, as Redis answers a pipeline in order.) After the
// read's last command, flush
// (session.go) sends the batch on a shared connection (upstream.Pool.Do),
// runs the replies phase, and writes each reply in the client's order.
type chain struct {
	commands []stage
	replies  []stage
	stream   []stage
}

// newChain declares the chain from what the Server was configured with
// (hot keys, salting, coalescing and a cluster are fixed at start).
func (s *Server) newChain() chain {
	var c chain
	add := func(list *[]stage, on bool, st stage) {
		if on {
			*list = append(*list, st)
		}
	}
	bk := bookkeeping{calls: &s.calls, metrics: s.metrics, slowLog: s.slow != nil}
	tw := tierWrites{s.tiering}
	rr := replicaReads{prefixes: s.cfg.ReplicaReadPrefixes, table: &s.table}

	add(&c.commands, true, bk)                               // command counts, CLIENT LIST's cmd, slow-log names
	add(&c.commands, true, arityCheck{s})                    // Redis's wrong-number-of-arguments error, first as on Redis
	add(&c.commands, true, transactionGuard{s})              // no proxy-answered command inside MULTI
	add(&c.commands, true, s.authing)                        // AUTH, and NOAUTH before it
	add(&c.commands, true, s.policing)                       // refusals, big-key probes, TTL jitter (reloadable)
	add(&c.commands, true, queueForExec{s})                  // CLIENT and AUTH inside MULTI: a marker, answered in EXEC's array
	add(&c.commands, true, s.pauses)                         // writes during a CLIENT PAUSE off the shared connections
	add(&c.commands, s.tiering != nil, tw)                   // writes drop their keys from the local tier
	add(&c.commands, true, scriptKill{s})                    // SCRIPT/FUNCTION KILL out of band
	add(&c.commands, s.sentinelReplicaReads(), rr)           // Sentinel replicas for reads under prefixes
	add(&c.commands, s.routing != nil, s.routing)            // facade, slots, split commands
	add(&c.commands, s.tiering != nil, tierReads{s.tiering}) // hot keys' reads from the local tier
	add(&c.commands, s.salting != nil, s.salting)            // hot keys' reads spread over salted copies
	add(&c.commands, s.coalescing != nil, s.coalescing)      // identical reads share one flight
	add(&c.commands, true, dispatch{s})                      // forward, pin, or answer in place

	// After the replies: copies updated from what the reads found, the
	// tier's written keys dropped again (or the barrier), flights
	// published to their joiners (before this session waits on any).
	add(&c.replies, s.salting != nil, s.salting)
	add(&c.replies, s.tiering != nil, tw)
	add(&c.replies, s.coalescing != nil, s.coalescing)

	add(&c.stream, true, bk)
	add(&c.stream, true, arityCheck{s})
	add(&c.stream, s.routing != nil, streamMulti{s.stream}) // a MULTI deferred to its first command's master
	add(&c.stream, true, s.policing)
	add(&c.stream, s.tiering != nil, tw)
	add(&c.stream, s.salting != nil, streamSaltWrites{s.salting}) // salted keys' writes end before their replies are shown
	add(&c.stream, true, subscribedContext{s})
	add(&c.stream, true, transactionGuard{s})
	add(&c.stream, true, s.authing)
	add(&c.stream, s.routing != nil, streamFacade{s.facade}) // CLUSTER SLOTS and the like: rproxy's topology, not the master's
	add(&c.stream, s.routing != nil, streamScriptKill{s})    // SCRIPT and FUNCTION KILL on every master
	add(&c.stream, true, streamDispatch{s})
	return c
}

// call is one client command on its way through the chain.
type call struct {
	cmd   resp.Command
	info  *command.Info // nil: not in the command table
	table *command.Table
	// keyHash: a GET's key hashed once for the detector, the tier and
	// coalescing (when hashed). hotGet: the detector found the GET's key
	// hot (salted copies spread it). hot: a tier.Cacheable command of a hot key,
	// coalesced whatever the configured list.
	keyHash        uint64
	hashed, hotGet bool
	hot            bool
	// heldByPause: a command Redis holds during a CLIENT PAUSE sent
	// through rproxy (pauseWatch): it goes as a blocking command does.
	heldByPause bool
	// inExec: a CLIENT or AUTH command inside MULTI that rproxy answers in
	// EXEC's array (transactionGuard found it); queueForExec, after the
	// policy, queues a marker in its place.
	inExec bool
}

// lastLookup remembers a session's last command-table lookup: a pipeline
// mostly repeats one command, and comparing its name with the last is
// cheaper than lower-casing it and hashing it into the table's map.
type lastLookup struct {
	table *command.Table
	name  []byte // as the client spelled it (a copy)
	found *command.Info
}

// info returns table's Info for name (nil: unknown).
func (l *lastLookup) info(table *command.Table, name []byte) *command.Info {
	if l.table == table && bytes.Equal(l.name, name) {
		return l.found
	}
	l.found = table.Lookup(name)
	l.table = table
	if len(name) <= 32 {
		l.name = append(l.name[:0], name...)
	} else {
		l.name = l.name[:0] // not kept: never equal to a name again
		l.table = nil
	}
	return l.found
}

// stage is one step of the request path.
type stage interface {
	// command sees a command before it is queued; it reports whether it
	// took it (answered, refused or queued it): later stages do not see it.
	command(ss *session, c *call) bool
	// replies runs once the batch's upstream replies are in, before any is
	// written to the client.
	replies(ss *session)
}

// exec runs one command through the chain.
func (s *Server) exec(ss *session, cmd resp.Command) {
	table := s.table.Load()
	c := &ss.call
	*c = call{cmd: cmd, info: ss.lookup.info(table, cmd.Args[0]), table: table}
	stages := s.chain.commands
	if ss.stream {
		stages = s.chain.stream
		// A CLIENT REPLY SKIP before silences this command's reply.
		ss.replySkipped, ss.skipNext = ss.skipNext, false
	} else if ss.readsAnsweredLater() && mayAffectReads(c.info) {
		s.answerReadsBeforeWrite(ss)
	}
	for _, st := range stages {
		if st.command(ss, c) {
			break
		}
	}
	if len(ss.streamSalt.next) > 0 {
		s.endStreamWritesAfter(ss) // stream-mode writes no stage tied to their reply
	}
	if len(ss.txClient.pending) > 0 && ss.txClient.noteEnd(c.info) {
		s.flush(ss)
	}
	c.cmd, c.info = resp.Command{}, nil
}

// afterReplies runs the replies phase of the chain.
func (s *Server) afterReplies(ss *session) {
	for _, st := range s.chain.replies {
		st.replies(ss)
	}
}

// bookkeeping counts the command (rproxy_commands_total, by the counters
// of the table in force) and names it for CLIENT LIST, error logs, and
// the slow log and request log when on. It takes nothing.
type bookkeeping struct {
	calls   *atomic.Pointer[callCounters]
	metrics *metrics
	slowLog bool // the slow log is on (it keeps the batch's names)
}

func (st bookkeeping) command(ss *session, c *call) bool {
	info, args := c.info, c.cmd.Args
	if cc := st.calls.Load(); cc.table == c.table {
		cc.inc(st.metrics, info)
	}
	ss.lastCmd = "unknown"
	if info != nil {
		ss.lastCmd = info.Name
		if info.Subcommands != nil && len(args) > 1 && len(args[1]) <= 32 {
			// As CLIENT LIST's cmd= shows it (client|setname); container
			// commands are rare on the hot path.
			ss.lastCmd = info.Name + "|" + strings.ToLower(string(args[1]))
		}
	}
	if st.slowLog || ss.reqlog.on {
		ss.slowlog.count++
		if len(ss.slowlog.names) < slowLogNames || (ss.reqlog.on && len(ss.slowlog.names) < reqLogNames) {
			ss.slowlog.names = append(ss.slowlog.names, ss.lastCmd)
		}
	}
	return false
}

func (bookkeeping) replies(*session) {}

// transactionGuard refuses, inside MULTI, the commands rproxy answers
// itself: Redis would queue them and run them at EXEC, inside the array it
// returns. CLIENT ID, GETNAME, SETNAME, SETINFO, INFO and LIST, and AUTH
// where rproxy checks it, are the exception: once the policy has judged
// them, queueForExec queues an ECHO of a marker in their place and rproxy
// answers them inside EXEC's array (txclient.go). In stream mode the
// answers that are only values (queuedAsOnRedis) are made by Redis, in
// order, as a script it queues; the rest, which rproxy acts on when it
// sees them (AUTH, HELLO, CLIENT SETNAME, KILL, REPLY, ...), are refused
// there.
type transactionGuard struct{ s *Server }

func (st transactionGuard) command(ss *session, c *call) bool {
	if !ss.inTransaction() || !answeredByProxy(c.info, c.cmd.Args) || ss.stream && queuedAsOnRedis(c.info, c.cmd.Args) {
		return false
	}
	if !ss.stream {
		switch placeInMulti(c.table, c.info, c.cmd.Args, st.s.cfg.AuthPassthrough) {
		case answeredInExec:
			c.inExec = true // the policy judges it, then queueForExec queues its marker
			return false
		case forwardedInMulti:
			return false // Redis's own error, as outside MULTI
		}
	}
	refuseInMulti(st.s, ss, c)
	return true
}

func (transactionGuard) replies(*session) {}

// refuseInMulti refuses c, a command rproxy acts on, inside MULTI.
func refuseInMulti(s *Server, ss *session, c *call) {
	s.refuseMsg(ss, strings.ToUpper(commandLabel(c.info, c.cmd.Args))+" inside MULTI is not supported through rproxy (rproxy answers it, not Redis); send it before MULTI or after EXEC")
}

// queueForExec puts an ECHO of a marker in the place of a CLIENT or AUTH
// command that transactionGuard found answered in EXEC's array (c.inExec),
// once the policy has judged the command itself (txclient.go). A command
// the policy rewrote into one rproxy does not answer there is refused as
// the guard refuses it; one rewritten into a command Redis answers goes on.
type queueForExec struct{ s *Server }

func (st queueForExec) command(ss *session, c *call) bool {
	if !c.inExec {
		return false
	}
	switch place := placeInMulti(c.table, c.info, c.cmd.Args, st.s.cfg.AuthPassthrough); {
	case place == forwardedInMulti || place == refusedInMulti && !answeredByProxy(c.info, c.cmd.Args):
		return false // rewritten into a command Redis answers
	case place == refusedInMulti:
		refuseInMulti(st.s, ss, c)
	case ss.txClient.full(c.cmd.Args):
		st.s.refuseMsg(ss, fmt.Sprintf("more than %d CLIENT and AUTH commands (or %d bytes of them) in one transaction", maxTxClient, maxTxClientBytes))
	default:
		ss.txClient.queueInTransaction(ss, c) // an ECHO goes on in its place
		return false
	}
	return true
}

func (queueForExec) replies(*session) {}

// queuedAsOnRedis reports whether, in stream mode, a command rproxy
// answers is queued inside MULTI and answered at EXEC as on Redis: its
// answer is a value a script returns (CLIENT ID, GETNAME, LIST, INFO), or
// it goes to Redis as sent (CLIENT CACHING, NO-EVICT, NO-TOUCH), and
// rproxy notes nothing of it when it is queued.
func queuedAsOnRedis(info *command.Info, args [][]byte) bool {
	if info == nil || info.Handling != command.Client || len(args) < 2 {
		return false
	}
	switch string(bytes.ToLower(args[1])) {
	case "id", "getname", "list", "info", "caching", "no-evict", "no-touch":
		return true
	}
	return false
}

// subscribedContext: in RESP2's subscribed mode Redis runs only the
// (un)subscribe commands, PING, QUIT and RESET, and refuses the rest with
// an error naming the command. A command rproxy would act on (answer, note,
// refuse or rewrite the reply of: actedOnInStream) goes to Redis as sent,
// so that the client gets Redis's own refusal, but only once Redis has
// confirmed the mode: the session asked for subscriptions, but Redis may
// have refused them (an ACL without the channel), and then Redis would run
// what rproxy would have answered (CLIENT KILL on every connection, AUTH).
// A modeProbe asks (redisSubscribed), once until the next unsubscribe;
// outside the mode the command goes on through the chain. On a cluster, a
// command whose keys are on another master than the pin's gets that
// refusal from rproxy once the mode is confirmed (keysElsewhere). The policy's
// refusals come first. AUTH and HELLO's AUTH go without their credentials
// all the same (withoutCredentials).
type subscribedContext struct{ s *Server }

func (st subscribedContext) command(ss *session, c *call) bool {
	if !ss.resp2Subscribed() {
		return false
	}
	if c.info != nil && runsWhileSubscribed(c.info.Name) {
		return st.s.stream.subscribedPing(ss, c) // else Redis runs it
	}
	// away: the mode may hold on the branches' shard channels alone, where
	// the pin would run the command (streamshard.go).
	away := ss.shardsElsewhere() && c.info != nil
	elsewhere := st.keysElsewhere(ss, c)
	acted := actedOnInStream(c, st.s.routing != nil)
	if !elsewhere && !acted && !away {
		return false // sent as it came either way: Redis runs or refuses it
	}
	if ss.inTransaction() || !ss.streamAnswered() {
		// Redis would queue the probe, or not answer it. CLIENT REPLY goes
		// as sent and unnoted: Redis most likely is in the mode and refuses
		// it, and following a REPLY ON it refused would have rproxy wait
		// for replies it never sends. The rest is handled as outside the
		// mode: never run on Redis as it came.
		if !ss.inTransaction() && isClientReply(c) {
			ss.streamCmds = append(ss.streamCmds, c.cmd.Raw)
			return true
		}
		return false
	}
	if !ss.subscribedSure {
		where, ok := st.s.stream.modeElsewhere(ss)
		switch {
		case !ok:
			return true // the session is closed
		case where == subscribedNowhere:
			ss.forgetSubscriptions()
			return false
		case where == subscribedOnBranches:
			elsewhere = true // refused here, as Redis would
		}
	}
	if elsewhere {
		ss.substituteInStream(notInSubscribedContext(st.s.table.Load().LookupArgs(c.cmd.Args)))
		return true
	}
	if !acted {
		return false // the pin is in the mode: it refuses it
	}
	ss.streamCmds = append(ss.streamCmds, withoutCredentials(c.cmd))
	return true
}

// keysElsewhere reports whether, on a cluster upstream, c's keys are in
// one slot of another master than the pin's: Redis would answer MOVED
// before it refuses the command in the mode, where the one node the
// facade shows would refuse it. Keys in several slots get CROSSSLOT there
// too, first, as on a cluster node.
func (st subscribedContext) keysElsewhere(ss *session, c *call) bool {
	if st.s.routing == nil || c.info == nil || ss.pinPool == nil {
		return false
	}
	pool, keys := st.s.stream.keysMaster(ss, c.info, c.cmd.Args)
	return keys == keysOneSlot && !samePool(pool, ss.pinPool)
}

// notInSubscribedContext is Redis's refusal of a command in RESP2's
// subscribed mode; info is the command's or its subcommand's, whose name
// Redis gives in full ("object|encoding").
func notInSubscribedContext(info *command.Info) []byte {
	return resp.AppendError(nil, "ERR Can't execute '"+info.Name+"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
}

// isClientReply reports whether c is CLIENT REPLY.
func isClientReply(c *call) bool {
	return c.info != nil && c.info.Handling == command.Client && len(c.cmd.Args) > 1 && bytes.EqualFold(c.cmd.Args[1], []byte("reply"))
}

// actedOnInStream reports whether stream mode does more with the command
// than send it as it came: answer, refuse or note it, or rewrite its reply
// (with a cluster upstream, the facade's CLUSTER commands too).
func actedOnInStream(c *call, cluster bool) bool {
	if c.info == nil {
		return answeredByProxy(nil, c.cmd.Args)
	}
	return c.info.Handling != command.Forward || c.info.Name == "info" || cluster && isFacadeCommand(c.cmd.Args)
}

// withoutCredentials returns cmd as sent, or for AUTH, and HELLO with an
// AUTH option, the same command with its credentials replaced by "-": every
// argument of AUTH, and the two after each "auth" in HELLO (wherever it
// stands: a SETNAME named "auth" costs the next two arguments, never a
// password left in place). As many arguments, so that Redis's refusal or
// arity error is the same.
func withoutCredentials(cmd resp.Command) []byte {
	args := cmd.Args
	var out [][]byte
	blank := func(from, to int) {
		if from >= min(to, len(args)) {
			return
		}
		if out == nil {
			out = slices.Clone(args)
		}
		for i := from; i < min(to, len(out)); i++ {
			out[i] = []byte("-")
		}
	}
	switch {
	case isAuth(args[0]):
		blank(1, len(args))
	case bytes.EqualFold(args[0], []byte("hello")):
		for i := 2; i < len(args); i++ {
			if isAuth(args[i]) {
				blank(i+1, i+3)
			}
		}
	}
	if out == nil {
		return cmd.Raw
	}
	return resp.AppendCommand(nil, out...)
}

func (subscribedContext) replies(*session) {}

// runsWhileSubscribed reports whether Redis runs the command in RESP2's
// subscribed mode.
func runsWhileSubscribed(name string) bool {
	switch name {
	case "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe", "ping", "quit", "reset":
		return true
	}
	return false
}

// scriptKill sends SCRIPT KILL and FUNCTION KILL out of band
// (killOutOfBand): on the shared connection they would wait behind the
// script they are to stop.
type scriptKill struct{ s *Server }

func (st scriptKill) command(ss *session, c *call) bool {
	if !isScriptKill(c) || ss.inTransaction() {
		return false
	}
	st.s.killOutOfBand(ss, c.cmd.Raw)
	return true
}

func (scriptKill) replies(*session) {}

// isScriptKill reports whether c is SCRIPT KILL or FUNCTION KILL.
func isScriptKill(c *call) bool {
	info, args := c.info, c.cmd.Args
	return info != nil && (info.Name == "script" || info.Name == "function") && len(args) == 2 && bytes.EqualFold(args[1], []byte("kill"))
}

// streamScriptKill is scriptKill in stream mode on a cluster: the
// session's own connection reaches one master, and the script to stop may
// run on any (another client's keyless FCALL ran on whichever master its
// connection reached). The commands before it are sent first; its answer
// comes in their order.
type streamScriptKill struct{ s *Server }

func (st streamScriptKill) command(ss *session, c *call) bool {
	// In RESP2's subscribed context Redis refuses it: it goes as sent.
	if !isScriptKill(c) || ss.inTransaction() || ss.resp2Subscribed() {
		return false
	}
	if len(ss.streamCmds) > 0 {
		st.s.sendStreamBatch(ss)
	}
	ss.replyInMode(st.s.killOnEveryMaster(ss, c.cmd.Raw))
	return true
}

func (streamScriptKill) replies(*session) {}

// readable reports whether a forwarded read may be served by the tier,
// salted copies or a shared flight: the tier and the flights hold db 0 as
// the shared connections' (shared) upstream user sees it, so not for
// pinned sessions, passthrough users' ACLs, after a write in the same
// batch (a session reads its own writes), or inside a transaction (Redis
// queues the read and answers it at EXEC).
func readable(ss *session, c *call, shared *poolSet) bool {
	return c.info != nil && c.info.Handling == command.Forward && ss.pin == nil && !ss.flights.wrote && ss.pools == shared && !ss.multiSent
}

// noteWrite notes a forwarded command that may write: no later read of the
// batch is served by the tier or shares a flight (readable), and the
// batch's send sequence is kept for the next batch's joins (coalescing.go).
// Scripts and functions are not flagged write by Redis (Invalidates counts
// them, and every write), and a command unknown here may be a module's.
func (ss *session) noteWrite(info *command.Info) {
	if info == nil || info.Invalidates != command.InvalidatesNone {
		ss.flights.wrote, ss.flights.batchWrote = true, true
	}
}

// readsAnsweredLater reports whether the batch holds reads whose replies
// may be made after it is sent: joined flights (coalescing), salted copy
// reads (a miss reads the origin then) and GETs a miss may hold (the
// tier's miss collapsing, which reads again after the key's next write).
// A write later in the batch could show in them, where Redis answers a
// pipeline in order (answerReadsBeforeWrite).
func (ss *session) readsAnsweredLater() bool {
	return len(ss.flights.joined) > 0 || len(ss.copies.reads) > 0 || len(ss.hotWrites.misses) > 0
}

// answerReadsBeforeWrite runs before a command that may change what a
// read returns (mayAffectReads), queued after reads answered later: the
// GETs miss collapsing would hold are answered as Redis answered them (not
// held: the key's next write could be this batch's own), and joined
// flights and salted copy reads are answered first, by sending the batch
// so far.
func (s *Server) answerReadsBeforeWrite(ss *session) {
	if len(ss.hotWrites.misses) > 0 {
		clear(ss.hotWrites.misses)
		ss.hotWrites.misses = ss.hotWrites.misses[:0]
	}
	if len(ss.flights.joined) > 0 || len(ss.copies.reads) > 0 {
		s.flush(ss)
	}
}

// mayAffectReads reports whether a command may change what a read
// returns: a write, an unknown command, a MULTI (its transaction's
// commands stay in one batch), or a publish (a subscriber may write on
// it).
func mayAffectReads(info *command.Info) bool {
	return info == nil || info.Invalidates != command.InvalidatesNone || info.Name == "multi" || info.Has(command.PubSub)
}

// isGet reports whether c is a GET with one key.
func (c *call) isGet() bool {
	return c.info.Name == "get" && len(c.cmd.Args) == 2
}

// dispatch takes every command the stages before it left: forwarded on the
// shared connections, on a pinned one (blocking commands, transactions),
// in stream mode (pub/sub), or answered here.
type dispatch struct{ s *Server }

func (st dispatch) command(ss *session, c *call) bool {
	s, info, cmd, args := st.s, c.info, c.cmd, c.cmd.Args
	if info == nil {
		if bytes.EqualFold(args[0], []byte("proxy")) {
			s.proxyCommand(ss, args)
			return true
		}
		// Unknown here; Redis answers it (usually "unknown command").
		ss.noteWrite(nil)
		if !ss.stream {
			ss.unknownAt = append(ss.unknownAt, ss.batch.Len())
		}
		ss.forward(cmd.Raw)
		return true
	}
	switch info.Handling {
	case command.Forward:
		if info.Name == "script" && startsScriptDebugging(args) && !ss.inTransaction() {
			// Lua debugging (SCRIPT DEBUG YES or SYNC) is the connection's
			// mode: every later EVAL of it stops in the debugger, which
			// then reads debugger commands from it. On a shared connection
			// it caught other clients' scripts and commands; it takes a
			// connection of the session's own, as a subscription does.
			s.startStream(ss, cmd.Raw)
			return true
		}
		ss.noteWrite(info)
		if info.Name == "info" {
			ss.infoAt = append(ss.infoAt, infoAt{up: ss.batch.Len(), withProxy: infoWantsProxy(args)})
		}
		if c.heldByPause && !ss.inTransaction() {
			s.forwardBlocking(ss, info, cmd.Raw) // Redis holds it until the pause ends
			return true
		}
		ss.forward(cmd.Raw)
	case command.BlockingCmd:
		if isNonBlockingRead(info, args) {
			ss.forward(cmd.Raw)
			return true
		}
		s.forwardBlocking(ss, info, cmd.Raw)
	case command.Transaction:
		if ss.pin == nil && info.Name == "multi" && s.routing != nil && s.routing.deferMulti(ss, cmd) {
			ss.multiSent = true
			return true
		}
		if info.Name == "multi" {
			if slot, ok := s.sharedTransaction(ss); ok {
				s.openSharedTransaction(ss, slot)
				ss.forward(cmd.Raw) // the whole transaction goes in this batch (sharedtx.go)
				ss.noteTransaction(info.Name)
				return true
			}
		}
		if ss.pin == nil && (info.Name == "multi" || info.Name == "watch") && !s.pinSession(ss, s.transactionSlot(ss, info)) {
			return true
		}
		ss.forwardTracked(cmd.Raw, transactionTrack(info.Name))
		ss.noteTransaction(info.Name)
	case command.Subscribe:
		ss.noteSubscriptions(info.Name, args)
		s.startStream(ss, cmd.Raw)
		if ss.relay != nil && s.cfg.Cluster != nil && (info.Name == "ssubscribe" || info.Name == "sunsubscribe") {
			ss.relay.shards.start() // confirmations counted from the first (streamshard.go)
		}
		s.stream.notifyEverywhere(ss, info.Name, args)
		if ss.stream && strings.Contains(info.Name, "unsubscribe") && ss.leavesStream() {
			s.leaveStreamUnsubscribed(ss) // an UNSUBSCRIBE of nothing: Redis answers, and that is all
		}
	case command.Unsupported:
		s.refuse(ss, args[0], "it needs session state rproxy does not keep")
	case command.Select:
		s.selectDB(ss, cmd)
	case command.Client:
		s.client(ss, cmd)
	case command.Hello:
		s.flush(ss)
		s.hello(ss, cmd)
	case command.Reset:
		s.flush(ss)
		s.unpin(ss, false)
		s.resetSession(ss)
		ss.reply([]byte("+RESET\r\n"))
	case command.Quit:
		ss.quit = true
		ss.reply([]byte("+OK\r\n"))
	default:
		ss.forward(cmd.Raw)
	}
	return true
}

func (dispatch) replies(*session) {}

// forwardBlocking sends a command that may wait as long as Redis holds it
// (a blocking command, or a write during a CLIENT PAUSE) on a connection
// of the session's own: no timeout, and a client that leaves releases it.
func (s *Server) forwardBlocking(ss *session, info *command.Info, raw []byte) {
	if ss.pin == nil {
		if !s.pinSession(ss, ss.slot) {
			return
		}
		if waitsForReplicas(info) {
			ss.catchUpWriteOffset()
		}
	}
	if !ss.blocking {
		ss.blocking, ss.blockingCmd = true, ss.lastCmd
	}
	ss.slowlog.skip = true // it waits as long as the client asked, or Redis held it: not slow
	ss.forward(raw)
}

// startsScriptDebugging reports whether args, a SCRIPT command, turns Lua
// debugging on: SCRIPT DEBUG YES or SYNC (NO, and Redis's errors, go on
// the shared connections).
func startsScriptDebugging(args [][]byte) bool {
	return len(args) == 3 && bytes.EqualFold(args[1], []byte("debug")) &&
		(bytes.EqualFold(args[2], []byte("yes")) || bytes.EqualFold(args[2], []byte("sync")))
}

// catchUpWriteOffset queues, on a connection just pinned for a WAIT or
// WAITAOF, a PING whose reply the client does not see. Redis counts the
// replicas (WAITAOF: the AOFs) that have the replication offset it noted
// on the connection after its last command. The client's writes went on
// shared connections and have all been answered (pinSession sent them);
// the pinned connection's last command may be older (a spare's, dialled
// before them), and WAIT then counted replicas that lacked the client's
// writes as having them. Run after those writes, the PING notes an offset
// that covers them.
func (ss *session) catchUpWriteOffset() {
	ss.batch.AddSlot(pingCmd, ss.slot)
	ss.order = append(ss.order, replySource{from: fromDiscard})
	ss.track = append(ss.track, track{})
}

var pingCmd = resp.AppendCommandString(nil, "PING")

// waitsForReplicas reports whether info is WAIT or WAITAOF, which count the
// replicas (or AOFs) that have the connection's writes.
func waitsForReplicas(info *command.Info) bool {
	return info.Name == "wait" || info.Name == "waitaof"
}

// streamDispatch sends a stream-mode session's commands to its pinned
// connection as they come; Redis answers (and enforces RESP2's
// subscribed-mode command rules). CLIENT subcommands that speak in
// rproxy's ids are answered through a script, in order (streamClient).
type streamDispatch struct{ s *Server }

func (st streamDispatch) command(ss *session, c *call) bool {
	s, info, cmd := st.s, c.info, c.cmd
	if s.stream.onBranch(ss, c) {
		return true // another master's (streambranch.go)
	}
	if s.stream.streamQueue(ss, c) {
		return true // refused inside a transaction (streamfanout.go)
	}
	if info != nil && info.Handling == command.Reset && ss.role != 'S' {
		// Redis resets the pinned connection and answers; the session
		// then leaves stream mode (a replica's RESET Redis refuses).
		ss.streamCmds = append(ss.streamCmds, cmd.Raw)
		s.leaveStream(ss)
		return true
	}
	if s.stream.streamFanOut(ss, c) {
		return true // every master's (streamfanout.go)
	}
	if info != nil && info.Handling == command.Quit {
		// Redis closes the connection at once: the other masters' go too,
		// so that a client redirecting invalidations to this one is told
		// there (tracking-redir-broken) as on its pin's master.
		ss.dropNotifyBranches()
	}
	if info != nil && info.Handling == command.Client {
		defer ss.noteRedirect()
		if s.clientCmds.streamClient(ss, cmd) {
			return true
		}
		ss.noteClientReply(cmd.Args) // Redis applies it to the pinned connection
		ss.noteCaching(cmd.Args, cmd.Raw)
		ss.noteHeldState(cmd.Args)
	}
	if info != nil && info.Handling == command.Select {
		ss.streamHeld = true // the pin's database is no longer known to be 0
		if ss.streamSelect(cmd) {
			return true
		}
	}
	if info != nil && info.Handling == command.Hello {
		s.streamHello(ss, cmd)
		return true
	}
	if info != nil && info.Handling == command.Subscribe {
		if s.stream.shardOnBranch(ss, c) {
			// Another master's shard channels (streamshard.go).
			if info.Name == "sunsubscribe" && ss.leavesStream() {
				s.leaveStreamUnsubscribed(ss)
			}
			return true
		}
		ss.noteSubscriptions(info.Name, cmd.Args)
		s.stream.notifyEverywhere(ss, info.Name, cmd.Args)
		if strings.Contains(info.Name, "unsubscribe") && ss.leavesStream() {
			ss.streamCmds = append(ss.streamCmds, cmd.Raw)
			s.leaveStreamUnsubscribed(ss)
			return true
		}
	}
	if info != nil && info.Handling == command.Transaction {
		switch {
		case (info.Name == "exec" || info.Name == "discard") && ss.streamTx != nil:
			s.stream.streamTxEnd(ss, c) // EXEC's reply merged with every master's (streamfanout.go)
			return true
		case info.Name == "multi" && !ss.inTransaction() && s.stream.mayFanOutInTransaction(ss):
			s.stream.armStreamTx(ss, relayAnswer{}, errorCmd)
		case info.Name == "exec" || info.Name == "discard":
			ss.route.txQueued, ss.route.txFanOut = 0, nil
		}
		ss.noteTransaction(info.Name) // as dispatch does
	}
	if info != nil && info.Name == "info" {
		withProxy := infoWantsProxy(cmd.Args)
		ss.rewriteInStream(cmd.Raw, func(r []byte) []byte { return s.infoReply(r, nil, withProxy) })
		return true
	}
	ss.writesEndBeforeReply(s.salting, info) // salted keys' copies deleted first (streamsalt.go)
	ss.streamCmds = append(ss.streamCmds, cmd.Raw)
	if waitsInStream(ss, c) {
		// Redis reads the marker after it only once it is answered.
		n := &ss.blockedInStream
		n.Add(1)
		ss.relay.queue(relayAnswer{made: func() []byte { n.Add(-1); return nil }})
		ss.streamCmds = append(ss.streamCmds, errorCmd)
		ss.streamHelpers++
	}
	return true
}

// waitsInStream reports whether c, sent in stream mode, is a blocking
// command whose wait CLIENT LIST shows (the b flag) until its reply has
// come (session.blockedInStream). Not inside a transaction, where Redis
// does not block, nor after CLIENT REPLY OFF or SKIP, where the replies
// that would tell are not sent.
func waitsInStream(ss *session, c *call) bool {
	return c.info != nil && c.info.Handling == command.BlockingCmd && !isNonBlockingRead(c.info, c.cmd.Args) &&
		!ss.inTransaction() && ss.streamAnswered()
}

func (streamDispatch) replies(*session) {}

// noteRedirect tells the relay the session's REDIRECT target, which a
// tracking-redir-broken push names (streamRelay.redirect).
func (ss *session) noteRedirect() {
	if ss.relay != nil {
		ss.relay.redirect.Store(ss.tracking.redirect)
	}
}

// noteHeldState notes a CLIENT NO-EVICT or NO-TOUCH sent to the pin in
// stream mode: Redis keeps it on the connection, which a return to the
// shared connections (an UNSUBSCRIBE of nothing) would reset. NO-EVICT ON
// or OFF also sets CLIENT LIST's e flag, which RESET leaves, as on Redis.
func (ss *session) noteHeldState(args [][]byte) {
	if len(args) < 2 || !bytes.EqualFold(args[1], []byte("no-evict")) && !bytes.EqualFold(args[1], []byte("no-touch")) {
		return
	}
	ss.streamHeld = true
	if ss.inTransaction() || ss.resp2Subscribed() {
		return // queued, or refused in RESP2's subscribed mode
	}
	if len(args) == 3 && bytes.EqualFold(args[1], []byte("no-evict")) {
		switch {
		case bytes.EqualFold(args[2], []byte("on")):
			ss.noEvict = true
		case bytes.EqualFold(args[2], []byte("off")):
			ss.noEvict = false
		}
	}
}

// noteTransaction follows the client's view of its transaction (MULTI,
// EXEC, DISCARD sent): inside it the policy leaves TTLs alone (no jitter),
// a refusal aborts it, and CLIENT LIST shows x. An EXEC or DISCARD without
// MULTI, which Redis refuses, leaves the keys watched, and a WATCH inside
// MULTI, which Redis refuses too, watches nothing.
func (ss *session) noteTransaction(name string) {
	switch name {
	case "multi":
		ss.multiSent = true
	case "exec", "discard":
		if ss.multiSent {
			ss.multiSent, ss.streamWatch = false, false
		}
	case "watch":
		if !ss.multiSent {
			ss.streamWatch = ss.stream
		}
	case "unwatch":
		ss.streamWatch = false
	}
}
