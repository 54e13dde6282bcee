package proxy

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/upstream"
)

// mergeKind is how the replies of a split command's parts become one.
type mergeKind uint8

const (
	mergeSum           mergeKind = iota // integers added: DEL, UNLINK, EXISTS, TOUCH, DBSIZE
	mergeOK                             // no part failed: the first part's reply (MSET, FLUSHALL, CONFIG SET)
	mergeArray                          // elements put back in key order: MGET
	mergeAll                            // arrays of 0 and 1, 1 where every part says 1: SCRIPT EXISTS
	mergeUnion                          // arrays joined, each element once: PUBSUB CHANNELS
	mergePairSum                        // arrays of name, count pairs, counts added: PUBSUB SHARDNUMSUB
	mergeMin                            // the least integer: LASTSAVE
	mergeMax                            // the greatest integer: PUBSUB NUMPAT
	mergePairMax                        // arrays of name, count pairs, the greatest count of each: PUBSUB NUMSUB
	mergeInfo                           // INFO texts joined, counters added (joinInfo)
	mergeLatest                         // LATENCY LATEST: each event once, its latest spike and its highest
	mergeSlowlog                        // SLOWLOG GET: every master's entries, newest first, as many as asked
	mergeACLLog                         // ACL LOG: every master's entries, newest first, repeats of one kind joined (clusteracllog.go)
	mergeFunctionStats                  // FUNCTION STATS: the reply of the master running a script, else the first's
	mergeSlowlogLen                     // SLOWLOG LEN: the entries of every master's SLOWLOG GET -1, joined as mergeSlowlog joins them
	mergeHistogram                      // LATENCY HISTOGRAM: each command's calls and cumulative buckets added
	mergeScan                           // SCAN: one master's reply, its cursor made the client's (clusterscan.go)
	mergeKeys                           // KEYS: every master's keys (clusterscan.go)
	mergeRandomKey                      // RANDOMKEY: one of the masters' random keys, at random (clusterscan.go)
	mergeDigest                         // DEBUG DIGEST: the masters' digests XORed, as Redis XORs its keys' (all zeros: no keys)
	mergeAfterPin                       // the pin's reply, made whole by the other masters' after it (clustertx.go)
	mergeMade                           // no part: made when the batch's replies are in (clientTextAfterSelect)
	mergeRedone                         // one part, a redirect the pin met: made again elsewhere in its turn (pinmoved.go)
)

// splitCommands are the multi-key commands a cluster runs per slot when
// their keys span slots, and how their replies merge. Each takes keys
// (MSET: key-value pairs) from its first argument on.
var splitCommands = map[string]mergeKind{
	"mget":   mergeArray,
	"mset":   mergeOK,
	"del":    mergeSum,
	"unlink": mergeSum,
	"exists": mergeSum,
	"touch":  mergeSum,
}

// fanOutCommands run on every master (outside transactions); their
// replies merge. Scripts and functions are loaded on (and flushed from)
// every master, so that EVALSHA and FCALL find them whichever master a key
// leads to. The server's settings, users, pause and saves change on every
// master, as Redis's command tips ask of a cluster client (request_policy
// all_nodes or all_shards): sent to one master in turn, a CONFIG SET or ACL
// SETUSER through rproxy changed one master of three, and the next command
// went to another. What reads the server's state (INFO, PUBSUB's counts,
// SCRIPT EXISTS, LATENCY LATEST, LASTSAVE) answers for all the masters.
var fanOutCommands = map[string]mergeKind{
	"dbsize":            mergeSum,
	"flushall":          mergeOK,
	"flushdb":           mergeOK,
	"script|load":       mergeOK,
	"script|flush":      mergeOK,
	"script|exists":     mergeAll, // an EVALSHA of it runs whichever master a key leads to
	"function|load":     mergeOK,
	"function|delete":   mergeOK,
	"function|flush":    mergeOK,
	"function|restore":  mergeOK,
	"function|stats":    mergeFunctionStats, // a script runs on one master; the libraries are every master's
	"config|set":        mergeOK,
	"config|resetstat":  mergeOK,
	"acl|setuser":       mergeOK,
	"acl|deluser":       mergeOK, // each master deletes the same users
	"acl|load":          mergeOK,
	"acl|save":          mergeOK,
	"acl|log":           mergeACLLog, // ACL LOG RESET: mergeOK (fanOutSent)
	"slowlog|reset":     mergeOK,
	"slowlog|len":       mergeSlowlogLen, // a command sent to every master counts once
	"slowlog|get":       mergeSlowlog,    // every master's entries, newest first
	"latency|reset":     mergeSum,
	"latency|latest":    mergeLatest,
	"latency|histogram": mergeHistogram,
	"memory|purge":      mergeOK,
	"client|pause":      mergeOK,
	"client|unpause":    mergeOK,
	"config|rewrite":    mergeOK,
	"save":              mergeOK, // the dataset is every master's
	"bgsave":            mergeOK,
	"bgrewriteaof":      mergeOK,
	"lastsave":          mergeMin,  // when all of it was last saved
	"info":              mergeInfo, // the keyspace, counters and command counts of the whole data
	"keys":              mergeKeys, // when the policy lets it through: every master's matches, as one server's
	"randomkey":         mergeRandomKey,
	// DEBUG's server-wide subcommands act on every master, as on the one
	// server a client sees: a reload or a pause of active expiry on one
	// master of three changed a third of the data. DEBUG DIGEST is the
	// whole data's. (The keyed ones go to their key's master: argumentSlot.)
	"debug|digest":                       mergeDigest,
	"debug|reload":                       mergeOK,
	"debug|loadaof":                      mergeOK,
	"debug|set-active-expire":            mergeOK,
	"debug|sleep":                        mergeOK,
	"debug|change-repl-id":               mergeOK,
	"debug|config-rewrite-force-all":     mergeOK,
	"debug|quicklist-packed-threshold":   mergeOK,
	"debug|set-skip-checksum-validation": mergeOK,
	"debug|pause-cron":                   mergeOK,
	"debug|replybuffer":                  mergeOK,
	"debug|aof-flush-sleep":              mergeOK,
	"debug|log":                          mergeOK,
	"debug|set-disable-deny-scripts":     mergeOK,
	// Subscriptions go to the pub/sub master (pubsubSlot's), and those that
	// may receive keyspace notifications to every other master too
	// (streamnotify.go): a channel or pattern is counted once, as the
	// pub/sub master counts it. Shard channels are their slot's master's.
	"pubsub|channels":      mergeUnion,
	"pubsub|shardchannels": mergeUnion,
	"pubsub|numsub":        mergePairMax,
	"pubsub|shardnumsub":   mergePairSum,
	"pubsub|numpat":        mergeMax,
}

// nodeSettings are the configuration parameters, changeable at run time,
// that name a node (its address, its files' place): the same value on
// every master would break the cluster or have them write one file.
var nodeSettings = map[string]bool{
	"port": true, "tls-port": true, "bind": true, "bind-source-addr": true, "dir": true, "dbfilename": true,
	"cluster-announce-ip": true, "cluster-announce-port": true, "cluster-announce-bus-port": true,
	"cluster-announce-tls-port": true, "cluster-announce-hostname": true,
	"replica-announce-ip": true, "replica-announce-port": true, "slave-announce-ip": true, "slave-announce-port": true,
}

// clusterRefusal is why rproxy refuses a command (its fanOutName) on a
// cluster upstream, "" if it does not: it sets a node's own setting
// (nodeSettings) on every master.
func clusterRefusal(name string, args [][]byte) string {
	switch name {
	case "config|set":
		if p := nodeSetting(args); p != "" {
			return "CONFIG SET " + p + " is each cluster node's own setting, and on a cluster upstream CONFIG SET goes to every master; set it on each node"
		}
	}
	return ""
}

// nodeSetting returns the first of CONFIG SET's parameters that is one of
// nodeSettings, or "".
func nodeSetting(args [][]byte) string {
	for i := 2; i < len(args); i += 2 {
		if p := strings.ToLower(string(args[i])); nodeSettings[p] {
			return p
		}
	}
	return ""
}

// fanOutMerge is the merge of the parts of a command of fanOutCommands,
// sent to every master.
func (r *routing) fanOutMerge(kind mergeKind, parts int, args [][]byte, proto int) merge {
	m := merge{kind: kind, parts: parts, proto: proto}
	switch kind {
	case mergeSlowlog, mergeSlowlogLen:
		m.limit, m.own = slowlogCount(args), r.ownCommand
	case mergeACLLog:
		m.limit = aclLogCount(args)
	case mergeKeys, mergeRandomKey:
		m.hideCopies, m.randN = r.salting != nil, r.randN
	}
	return m
}

// fanOutSent is what a command of fanOutCommands sends every master, and
// how the replies merge: raw and kind, but for SLOWLOG LEN, which sends
// SLOWLOG GET -1 so that a command sent to every master counts once (with
// other arguments: raw, each master's refusal summed), and ACL LOG RESET,
// whose +OKs merge as any setting's.
func fanOutSent(kind mergeKind, args [][]byte, raw []byte) (mergeKind, []byte) {
	switch {
	case kind == mergeSlowlogLen && len(args) == 2:
		return kind, slowlogGetAll
	case kind == mergeSlowlogLen:
		return mergeSum, raw
	case kind == mergeACLLog && aclLogResets(args):
		return mergeOK, raw
	}
	return kind, raw
}

// fanOutName is the fanOutCommands key of a command: its name, or
// "name|subcommand" for the container commands that have some there.
func fanOutName(name string, args [][]byte) string {
	switch name {
	case "script", "function", "config", "acl", "slowlog", "latency", "memory", "client", "pubsub", "debug":
		if len(args) > 1 {
			return name + "|" + string(bytes.ToLower(args[1]))
		}
	}
	return name
}

// routeState is cluster routing's per-batch state in a session: the rest
// of the read batch (so MULTI can pin to the master of the transaction's
// first key), split commands whose replies are merged, and key scratch.
type routeState struct {
	multiPending bool // MULTI answered, not yet sent: no master chosen yet
	crossSlotTx  bool // a command of the open transaction is for another master: EXEC gets CROSSSLOT (crossslot.go)
	// keylessTx: every command of the open transaction so far has been
	// keyless, so the master it was sent to was chosen by none of them;
	// keyless holds them (copies, keylessBytes in all) to be queued again
	// on the master of its first key (moveTransaction). noKeys: route
	// found no key in the command it routed last.
	keylessTx    bool
	noKeys       bool
	keyless      [][]byte
	keylessBytes int
	multiRaw     []byte // the deferred MULTI, as the client sent it
	rest         []resp.Command
	restAt       int
	merges       []merge
	keys         [][]byte
	// txQueued counts the commands the open transaction queued, and
	// txFanOut holds those of fanOutCommands among them (clustertx.go).
	txQueued int
	txFanOut []pinnedFanOut
	// lastWrite is the slot of the session's last write, plus one (0:
	// none): a WAIT goes to its master.
	lastWrite int
	// sharedTx: a transaction is open on the shared connections
	// (sharedtx.go), all its keys in slot sharedTxSlot.
	sharedTx     bool
	sharedTxSlot int
	// txSalted: the writes of the open transaction's queued commands,
	// which run at its EXEC: held from when they are queued until then,
	// so that no salted copy is filled in between (salting.noteWrites).
	txSalted salt.Held
}

// merge is a client command sent as parts, consecutive in the batch.
type merge struct {
	kind  mergeKind
	parts int
	limit int // mergeSlowlog: the entries asked for (negative: all)
	// For mergeScan: the slot the cursor names, the lowest slot of the
	// master after the one scanned (-1: none), and whether salted copies
	// are left out.
	scanSlot, scanNext int
	hideCopies         bool
	// For mergeRandomKey: picks one of n keys, and the session's
	// protocol (its nil reply).
	randN func(n int) int
	proto int
	// own, for mergeSlowlog, tells rproxy's own housekeeping commands
	// (Server.ownCommand), which are left out.
	own func(addr string, args [][]byte) bool
	// For mergeArray: for each of the client's keys, its part and its
	// index among that part's elements.
	part, index []int32
	// For mergeAfterPin: the reply, from the pin's (clustertx.go).
	afterPin func(pinReply []byte) []byte
	// For mergeMade and mergeRedone: the reply.
	made func() []byte
}

// routing is the cluster routing stage: it presents a cluster as one
// Redis. CLUSTER commands are answered by the facade (facade.go), each
// command goes to its first key's master (slot), multi-key commands whose
// keys span slots are split and their replies merged, commands that need
// every master fan out, and a transaction is pinned to one master
// (deferred MULTI here, cross-master commands in crossslot.go). Its
// configuration is the upstream's cluster section and the replica-read
// prefixes, its state the cluster's slot map (upstream.Cluster, which
// owns the metrics and the log); a session's per-batch state is
// routeState. It is in the chain only with a cluster upstream. What it
// asks of the Server is handed to it: the facade, pinning a session to a
// master, and an in-order refusal.
type routing struct {
	cluster         *upstream.Cluster
	table           *atomic.Pointer[command.Table] // the table in force (container commands' keys)
	replicaPrefixes []string                       // reads of keys all under these go to replicas
	passthrough     bool                           // auth.mode passthrough: sessions run as Redis users (aclRefusal)
	salting         *salting                       // notes writes of salted keys (nil: off)
	scripts         *loadedScripts                 // scripts EVAL has loaded on every master
	facade          *facade                        // the CLUSTER commands rproxy answers (facade.go)
	pin             func(ss *session, slot int) bool
	flush           func(ss *session)
	refuse          func(ss *session, msg string)
	ownCommand      func(addr string, args [][]byte) bool // rproxy's own housekeeping, left out of SLOWLOG GET
	randN           func(n int) int                       // RANDOMKEY's pick among the masters' keys
}

func (r *routing) command(ss *session, c *call) bool {
	// Every decision below reads the slot map: in the moments after start
	// the command waits for the first one, as it waits for a pool's
	// first dial.
	r.cluster.AwaitMap()
	if ss.route.sharedTx {
		r.sharedTransactionCommand(ss, c.info)
		return false
	}
	if c.info != nil && c.info.Name == "cluster" && r.facade.clusterCommand(ss, c.cmd) {
		return true
	}
	if c.info != nil && c.info.Name == "asking" && len(c.cmd.Args) == 1 && ss.pin == nil && !ss.inTransaction() {
		// ASKING flags the connection's next command: on a shared one,
		// another client's. rproxy follows ASK redirects itself, and a node
		// of a one-node cluster answers +OK. (In a transaction it is queued
		// on the transaction's own connection.)
		ss.reply([]byte("+OK\r\n"))
		return true
	}
	if r.route(ss, c.info, c.cmd) {
		return true
	}
	if ss.route.multiPending && !r.startDeferredMulti(ss, ss.route.noKeys) {
		return true
	}
	r.noteKeyless(ss, c)
	return false
}

func (*routing) replies(*session) {}

// sharedTransactionCommand routes a command of a transaction open on the
// shared connections (sharedtx.go): whole, to the master of the
// transaction's slot, marked upstream.InTransaction (never sent again
// alone after a redirect). Its commands were checked before its MULTI
// (sharedTransactionFits): none needs more of routing.
func (r *routing) sharedTransactionCommand(ss *session, info *command.Info) {
	ss.slot = ss.route.sharedTxSlot | upstream.InTransaction
	if info == nil {
		return
	}
	if info.Invalidates != command.InvalidatesNone {
		ss.route.lastWrite = ss.route.sharedTxSlot + 1
	}
	if info.Name == "exec" || info.Name == "discard" {
		ss.route.sharedTx = false
	}
}

// sharedTransactionFits reports whether a command of a transaction sent
// whole may go with it on one master's shared connections: one that
// routing sends as it is to its keys' master (not fanned out to every
// master, split, refused, walked like SCAN, routed by an argument, nor a
// script, whose first EVAL loads it everywhere), with every key in one
// slot, *slot (set by the first key found, SlotAny until then).
func (r *routing) sharedTransactionFits(table *command.Table, info *command.Info, args [][]byte, slot *int, keys [][]byte) ([][]byte, bool) {
	name := fanOutName(info.Name, args)
	if _, ok := fanOutCommands[name]; ok || clusterRefusal(name, args) != "" {
		return keys, false
	}
	switch info.Name {
	case "scan", "eval", "eval_ro", "evalsha", "evalsha_ro", "fcall", "fcall_ro", "cluster", "asking":
		return keys, false
	}
	if waitsForReplicas(info) {
		return keys, false // routed by the session's last write
	}
	keys, _ = command.Keys(keyInfo(table, info, args), args, keys[:0])
	if len(keys) == 0 {
		_, routed := argumentSlot(info, args)
		return keys, !routed
	}
	for _, k := range keys {
		switch ks := upstream.Slot(k); {
		case *slot == upstream.SlotAny:
			*slot = ks
		case ks != *slot:
			return keys, false
		}
	}
	return keys, true
}

// route prepares a command for a cluster upstream: it sets the
// session's slot to the slot of the command's first key (or of the
// argument a keyless one is routed by: argumentSlot), refuses what would
// set one node's own setting on all (nodeSetting), queues SCRIPT LOAD of
// an EVAL's script for every master the first time (loadEverywhere), and
// itself queues (reporting true) the commands it splits or fans out and
// SCAN, which it sends to the master its cursor names (clusterscan.go).
// Inside a transaction (pinned) commands stay whole on the transaction's
// master (SCAN there answers for that master alone), and those of
// fanOutCommands run on the other masters after it (clustertx.go). A command whose keys span slots and
// that cannot be split goes to its first key's master, which answers with
// Redis's own CROSSSLOT error.
func (r *routing) route(ss *session, info *command.Info, cmd resp.Command) bool {
	ss.slot = upstream.SlotAny
	ss.route.noKeys = true
	if info == nil {
		return false
	}
	args := cmd.Args
	r.countQueued(ss, info.Name)
	if ss.pin != nil && !ss.stream && !ss.inTransaction() && (!ss.watching || ss.blocking || watchMayEnd(ss)) {
		// Pinned for a blocking command earlier in the batch, or with a
		// WATCH, UNWATCH, EXEC or DISCARD whose reply is not in: the pin
		// is one master's, and this command may be another's, or every
		// master's. It waits for those to run, as on Redis, where a
		// blocked client's next commands wait; then it is routed as the
		// replies left the session (the pin released, or kept for a
		// watch that holds, and crossSlotCommand).
		r.flush(ss)
	}
	if info.Name == "exec" || info.Name == "discard" {
		if r.salting != nil {
			r.salting.transactionEnds(ss)
		}
		if ss.pin != nil && r.crossSlotEnd(ss, info) || info.Name == "exec" && r.execFanOut(ss, cmd.Raw) {
			return true
		}
		ss.route.txQueued, ss.route.txFanOut = 0, nil
	}
	if r.salting != nil && info.Invalidates == command.InvalidatesAll {
		r.salting.noteFlush(ss)
	}
	pinned := ss.pin != nil || ss.route.multiPending // commands stay whole: they go to one master
	name := fanOutName(info.Name, args)
	if name == "script|flush" {
		r.scripts.forget() // fanned out, or in a transaction on one master: loaded everywhere no longer
	}
	if msg := clusterRefusal(name, args); msg != "" {
		r.refuse(ss, msg)
		return true
	}
	if kind, ok := fanOutCommands[name]; ok && pinned && !ss.stream && r.fanOutOnPin(ss, kind, cmd.Raw, args) {
		ss.noteWrite(info) // FLUSHALL, FLUSHDB: as dispatch notes what it forwards
		return true
	}
	if !pinned {
		if info.Name == "scan" && len(args) > 1 {
			r.scan(ss, args)
			return true
		}
		if (info.Name == "eval" || info.Name == "eval_ro") && len(args) > 1 {
			r.loadEverywhere(ss, args[1])
		}
		if kind, ok := fanOutCommands[name]; ok {
			shards := ss.pools[ss.proto].Shards()
			if len(shards) > 1 {
				ss.noteWrite(info) // FLUSHALL, FLUSHDB: as dispatch notes what it forwards
				first := ss.batch.Len()
				kind, raw := fanOutSent(kind, args, cmd.Raw)
				for _, slot := range shards {
					ss.batch.AddSlot(raw, slot)
				}
				if kind == mergeInfo {
					ss.infoAt = append(ss.infoAt, infoAt{up: first, withProxy: infoWantsProxy(args)})
				}
				ss.queueMerge(r.fanOutMerge(kind, ss.batch.Len()-first, args, ss.proto))
				return true
			}
			return false
		}
	}
	keys, _ := command.Keys(keyInfo(r.table.Load(), info, args), args, ss.route.keys[:0])
	defer func() {
		clear(keys)
		ss.route.keys = keys[:0]
	}()
	if len(keys) == 0 {
		if slot, ok := argumentSlot(info, args); ok {
			ss.slot = slot
			return false
		}
		if ss.route.lastWrite > 0 && waitsForReplicas(info) {
			// No key: it counts the replicas of the master it runs on,
			// which for a client that sees one node is where its writes
			// went; the last one's master, of those rproxy sent them to.
			ss.slot = ss.route.lastWrite - 1
		}
		return false
	}
	if r.salting != nil && (info.Invalidates == command.InvalidatesKeys || info.Invalidates == command.InvalidatesUnknown) {
		// Scripts and functions too: their declared keys may be written.
		r.salting.noteWrites(ss, keys)
	}
	ss.slot = upstream.Slot(keys[0])
	ss.route.noKeys = false
	if info.Invalidates != command.InvalidatesNone {
		ss.route.lastWrite = ss.slot + 1
	}
	if len(r.replicaPrefixes) > 0 && !pinned && replicaReadable(info) && underPrefixes(keys, r.replicaPrefixes) {
		ss.slot |= upstream.ReplicaRead
	}
	if ss.pin != nil && r.crossSlotCommand(ss, info) {
		return true
	}
	cross := false
	for _, k := range keys[1:] {
		if upstream.Slot(k) != ss.slot&(upstream.Slots-1) {
			cross = true
			break
		}
	}
	if !cross || pinned {
		return false
	}
	kind, ok := splitCommands[info.Name]
	if !ok {
		return false
	}
	step := 1
	if info.Name == "mset" {
		step = 2
		if (len(args)-1)%2 != 0 {
			return false // Redis's arity error
		}
	}
	if r.passthrough && ss.user != "" {
		if refusal := aclRefusal(ss, cmd.Raw, upstream.Slot(keys[0])); refusal != nil {
			ss.queueLocal(refusal, false)
			return true
		}
	}
	ss.noteWrite(info) // MSET, DEL, UNLINK: as dispatch notes what it forwards
	splitBySlot(ss, args, step, kind)
	return true
}

// aclRefusal asks Redis, for a session logged in as a Redis user, whether
// that user may run raw, a multi-key command about to be split across
// masters, with all its keys: Redis refuses such a command whole when one
// key is not the user's, before it looks at slots, while the split parts
// would each be checked alone, and those with the user's keys would run.
// raw goes whole to slot's master, as the user: NOPERM there is the
// refusal, returned as Redis's reply; any other answer (CROSSSLOT, for a
// command the user may run) lets the split go on, and its parts meet
// whatever else Redis has to say. One round trip, paid only in
// passthrough mode by commands split across slots.
func aclRefusal(ss *session, raw []byte, slot int) []byte {
	b := upstream.NewBatch()
	b.AddSlot(raw, slot)
	ss.pools[ss.proto].Do(b)
	if r := b.Reply(0); bytes.HasPrefix(r, []byte("-NOPERM")) {
		return bytes.Clone(r)
	}
	return nil
}

// watchMayEnd reports whether the batch holds a command that may start or
// end a watch (WATCH, UNWATCH, EXEC, DISCARD), whose reply decides.
func watchMayEnd(ss *session) bool {
	for _, t := range ss.track {
		switch t.kind {
		case trackWatch, trackUnwatch, trackExec:
			return true
		}
	}
	return false
}

// splitBySlot queues one command per slot, each with the keys (and, with
// step 2, their values) of that slot in the client's order.
func splitBySlot(ss *session, args [][]byte, step int, kind mergeKind) {
	type group struct {
		slot int
		args [][]byte
	}
	var groups []group
	m := merge{kind: kind}
	for i := 1; i+step-1 < len(args); i += step {
		slot := upstream.Slot(args[i])
		g := -1
		for j := range groups {
			if groups[j].slot == slot {
				g = j
				break
			}
		}
		if g < 0 {
			g = len(groups)
			groups = append(groups, group{slot: slot, args: [][]byte{args[0]}})
		}
		if kind == mergeArray {
			m.part = append(m.part, int32(g))
			m.index = append(m.index, int32(len(groups[g].args)-1))
		}
		groups[g].args = append(groups[g].args, args[i:i+step]...)
	}
	for _, g := range groups {
		ss.batch.AddSlot(resp.AppendCommand(nil, g.args...), g.slot)
	}
	m.parts = len(groups)
	ss.queueMerge(m)
}

// queueMerge queues the reply of a command sent as parts (m), in order.
func (ss *session) queueMerge(m merge) {
	ss.route.merges = append(ss.route.merges, m)
	ss.order = append(ss.order, replySource{from: fromMerge, idx: int32(len(ss.route.merges) - 1)})
}

// queueMergeAt makes the reply at ss.order[j], one upstream reply, from m.
func (ss *session) queueMergeAt(j int, m merge) {
	ss.route.merges = append(ss.route.merges, m)
	ss.order[j] = replySource{from: fromMerge, idx: int32(len(ss.route.merges) - 1)}
}

// pubsubSlot is the slot whose master is the pub/sub master: PUBLISH,
// SUBSCRIBE and PSUBSCRIBE go there. A cluster node counts, in PUBLISH's
// reply and PUBSUB NUMSUB/NUMPAT, its own subscribers only, while a
// message reaches every node's; with every subscription and every publish
// on one master, the counts are what one Redis answers for the clients of
// rproxy (Redis's Tcl suite in cluster mode: unit/pubsub). Spreading them
// by channel, as go-redis's ClusterClient does, missed every subscriber
// whose connection was on another channel's master, or on a pattern's.
const pubsubSlot = 0

// argumentSlot is the slot that a command Redis's table gives no key
// should go to, by an argument: PUBLISH, SUBSCRIBE and PSUBSCRIBE to the
// pub/sub master (pubsubSlot), DEBUG's keyed subcommands to the key's.
func argumentSlot(info *command.Info, args [][]byte) (int, bool) {
	switch info.Name {
	case "publish", "subscribe", "psubscribe":
		return pubsubSlot, true
	case "debug":
		if len(args) >= 3 && debugKeyed[string(bytes.ToLower(args[1]))] {
			return upstream.Slot(args[2]), true
		}
	}
	return 0, false
}

// debugKeyed are the DEBUG subcommands about a key (the argument after
// the subcommand), which only that key's master knows. DIGEST-VALUE of
// keys on several masters goes to the first one's.
var debugKeyed = map[string]bool{
	"object": true, "digest-value": true, "htstats-key": true, "sdslen": true, "listpack": true, "quicklist": true,
}

// keyInfo is the Info that knows a command's key positions: a
// subcommand's (XGROUP CREATE, OBJECT ENCODING) for container commands.
func keyInfo(table *command.Table, info *command.Info, args [][]byte) *command.Info {
	if info.Subcommands == nil {
		return info
	}
	if sub := table.LookupArgs(args); sub != nil {
		return sub
	}
	return info
}

// helloMode is the HELLO reply's mode field as a cluster node sends it, and
// as rproxy shows it: clients talk to rproxy as to one server.
var (
	helloModeCluster    = []byte("$4\r\nmode\r\n$7\r\ncluster\r\n")
	helloModeStandalone = []byte("$4\r\nmode\r\n$10\r\nstandalone\r\n")
)

// deferMulti answers a MULTI whose transaction did not come in the same
// read (redis-cli typed by hand) without choosing a master yet: the first
// command of the transaction decides (startDeferredMulti). It reports
// whether it did.
func (r *routing) deferMulti(ss *session, cmd resp.Command) bool {
	if len(cmd.Args) != 1 || r.multiSlot(ss) != upstream.SlotAny {
		return false
	}
	ss.route.multiPending = true
	// Sent later as the client spelled it (MONITOR and SLOWLOG show it);
	// the read buffer it is in will be reused by then.
	ss.route.multiRaw = bytes.Clone(cmd.Raw)
	ss.reply([]byte("+OK\r\n"))
	return true
}

// startDeferredMulti pins the session to the master of the command being
// executed (any master for a keyless one) and sends the deferred MULTI
// there, its reply dropped (the client has had it). keyless says the
// command has no key: the transaction may move (moveTransaction). It
// reports whether the command can go on.
func (r *routing) startDeferredMulti(ss *session, keyless bool) bool {
	ss.route.multiPending = false
	r.endKeyless(ss)
	slot := ss.slot &^ upstream.ReplicaRead
	if !r.pin(ss, slot) {
		return false
	}
	ss.slot = slot
	ss.batch.AddSlot(ss.route.multiRaw, slot)
	ss.order = append(ss.order, replySource{from: fromDiscard})
	ss.track = append(ss.track, track{kind: trackMulti})
	// In the transaction from here, as the client is: pinning cleared it.
	ss.multiSent = true
	ss.route.keylessTx = keyless
	return true
}

// transactionSlot is the slot a MULTI or WATCH pins the session to: WATCH's
// key (ss.slot), or on a cluster for MULTI the first key of the
// transaction's commands that came in the same read (multiSlot).
func (s *Server) transactionSlot(ss *session, info *command.Info) int {
	if s.routing == nil || info.Name != "multi" {
		return ss.slot
	}
	return s.routing.multiSlot(ss)
}

// digest0 is what Redis mixes into a dataset's digest for database 0,
// once, when it holds keys: SHA-1 of (zeros XOR SHA-1 of the 4-byte
// database number 0).
var digest0 = [20]byte{0xaa, 0x30, 0x98, 0xf3, 0xaa, 0xe9, 0x4b, 0xaa, 0xc1, 0x4e, 0x3b, 0x8b, 0x8d, 0xca, 0xe9, 0x89, 0xaf, 0x93, 0xf6, 0xa2}

// digest joins the parts' DEBUG DIGEST replies (status replies of 40 hex
// digits) into one server's: Redis's digest of a dataset is digest0 XOR
// each key's digest (all zeros for no keys), so the masters' digests XOR
// to the whole data's, with digest0 put back once when an even number of
// masters hold keys.
func (m *merge) digest(replies [][]byte) []byte {
	var sum [20]byte
	holding := 0
	for i := range m.parts {
		r := replies[i]
		var d [20]byte
		if len(r) != 43 || r[0] != '+' {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+strconv.Quote(string(r)))
		}
		if _, err := hex.Decode(d[:], r[1:41]); err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+strconv.Quote(string(r)))
		}
		if d != [20]byte{} {
			holding++
		}
		for j := range sum {
			sum[j] ^= d[j]
		}
	}
	if holding > 0 && holding%2 == 0 {
		for j := range sum {
			sum[j] ^= digest0[j]
		}
	}
	out := append([]byte{'+'}, hex.EncodeToString(sum[:])...)
	return append(out, "\r\n"...)
}

// multiSlot is the slot of the first key of the transaction's commands
// that came in the same read as its MULTI (clients send MULTI ... EXEC as
// one pipeline). Without one, any master: commands for other masters then
// get Redis's MOVED.
func (r *routing) multiSlot(ss *session) int {
	table := r.table.Load()
	for _, c := range ss.route.rest[ss.route.restAt:] {
		ci := table.Lookup(c.Args[0])
		if ci == nil {
			continue
		}
		if ci.Name == "exec" || ci.Name == "discard" {
			break
		}
		keys, _ := command.Keys(keyInfo(table, ci, c.Args), c.Args, ss.route.keys[:0])
		if len(keys) > 0 {
			slot := upstream.Slot(keys[0])
			clear(keys)
			ss.route.keys = keys[:0]
			return slot
		}
	}
	return upstream.SlotAny
}

// reply merges the parts' replies, in order. An error from any part is the
// reply.
func (m *merge) reply(replies [][]byte) []byte {
	if m.kind == mergeRedone {
		return m.made()
	}
	for i := range m.parts {
		if r := replies[i]; len(r) > 0 && (r[0] == '-' || r[0] == '!') {
			return r
		}
	}
	switch m.kind {
	case mergeOK:
		return replies[0]
	case mergeUnion, mergePairSum, mergePairMax, mergeAll:
		return m.joined(replies)
	case mergeLatest:
		return m.latest(replies)
	case mergeDigest:
		return m.digest(replies)
	case mergeSlowlog:
		return m.slowlog(replies)
	case mergeSlowlogLen:
		return m.slowlogLen(replies)
	case mergeACLLog:
		return m.aclLog(replies)
	case mergeFunctionStats:
		return m.functionStats(replies)
	case mergeScan:
		return m.scanReply(replies[0])
	case mergeAfterPin:
		return m.afterPin(replies[0])
	case mergeMade:
		return m.made()
	case mergeKeys:
		return m.keys(replies)
	case mergeRandomKey:
		return m.randomKey(replies)
	case mergeHistogram:
		return joinHistograms(replies)
	case mergeInfo:
		return joinInfo(replies)
	case mergeSum, mergeMin, mergeMax:
		var sum, least, most int64
		for i := range m.parts {
			n, ok := resp.Int(replies[i])
			if !ok {
				return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+strconv.Quote(string(replies[i])))
			}
			if sum += n; i == 0 || n < least {
				least = n
			}
			if i == 0 || n > most {
				most = n
			}
		}
		switch m.kind {
		case mergeMin:
			return resp.AppendInt(nil, least)
		case mergeMax:
			return resp.AppendInt(nil, most)
		}
		return resp.AppendInt(nil, sum)
	}
	elems := make([][][]byte, m.parts)
	for i := range m.parts {
		var err error
		if elems[i], err = arrayElements(replies[i]); err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
	}
	out := []byte("*" + strconv.Itoa(len(m.part)) + "\r\n")
	for j := range m.part {
		p, k := m.part[j], m.index[j]
		if int(k) >= len(elems[p]) {
			return resp.AppendError(nil, "ERR rproxy: a cluster node's reply has fewer elements than keys")
		}
		out = append(out, elems[p][k]...)
	}
	return out
}

// joined merges arrays: each distinct element once, in the order first
// seen (mergeUnion); or arrays of as many elements in each part, as the
// same command asked every master: name and count pairs with the counts
// added (mergePairSum), or 0 and 1 with 1 where every part has 1 (mergeAll).
func (m *merge) joined(replies [][]byte) []byte {
	var out [][]byte
	seen := map[string]bool{}
	for i := range m.parts {
		elems, err := arrayElements(replies[i])
		if err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
		if m.kind == mergeUnion {
			for _, e := range elems {
				if !seen[string(e)] {
					seen[string(e)] = true
					out = append(out, e)
				}
			}
			continue
		}
		if i == 0 {
			out = elems
			continue
		}
		if len(elems) != len(out) {
			return resp.AppendError(nil, "ERR rproxy: cluster nodes' replies differ in length")
		}
		if m.kind == mergeAll {
			for j, e := range elems {
				if string(e) != ":1\r\n" {
					out[j] = e
				}
			}
			continue
		}
		for j := 1; j < len(elems); j += 2 {
			a, okA := resp.Int(out[j])
			n, okN := resp.Int(elems[j])
			if !okA || !okN {
				return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+strconv.Quote(string(elems[j])))
			}
			if m.kind == mergePairMax {
				out[j] = resp.AppendInt(nil, max(a, n))
				continue
			}
			out[j] = resp.AppendInt(nil, a+n)
		}
	}
	return appendArray(nil, '*', out)
}

// partReplies returns the parts' replies, in order.
func (m *merge) partReplies(b *upstream.Batch, first int) [][]byte {
	replies := make([][]byte, m.parts)
	for i := range replies {
		replies[i] = b.Reply(first + i)
	}
	return replies
}

// functionStats merges FUNCTION STATS replies: the functions are loaded on
// every master (FUNCTION LOAD goes to each), so the engines' counts are
// the same on all, but a script runs on the master of its keys: the reply
// is that of the first master whose running_script is not null, else the
// first master's, as one server would report the script it runs.
func (m *merge) functionStats(replies [][]byte) []byte {
	for i := range m.parts {
		elems, err := mapOrArrayElements(replies[i])
		if err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
		for j := 0; j+1 < len(elems); j += 2 {
			if name, err := resp.Parse(elems[j]); err == nil && string(name.Str) == "running_script" && !resp.IsNull(elems[j+1]) {
				return replies[i]
			}
		}
	}
	return replies[0]
}

// latest merges LATENCY LATEST replies: each event once, as the master
// that saw its latest spike reports it, with the highest all-time maximum
// of any master.
func (m *merge) latest(replies [][]byte) []byte {
	type event struct {
		fields   [][]byte // name, time, latest, maximum
		at, most int64
	}
	var order []string
	events := map[string]*event{}
	for i := range m.parts {
		elems, err := arrayElements(replies[i])
		if err != nil {
			return resp.AppendError(nil, "ERR rproxy: unexpected reply from a cluster node: "+err.Error())
		}
		for _, e := range elems {
			fields, err := arrayElements(e)
			if err != nil || len(fields) != 4 {
				return resp.AppendError(nil, "ERR rproxy: unexpected LATENCY LATEST entry from a cluster node: "+strconv.Quote(string(e)))
			}
			at, okAt := resp.Int(fields[1])
			most, okMost := resp.Int(fields[3])
			if !okAt || !okMost {
				return resp.AppendError(nil, "ERR rproxy: unexpected LATENCY LATEST entry from a cluster node: "+strconv.Quote(string(e)))
			}
			name := string(fields[0])
			ev := events[name]
			if ev == nil {
				order = append(order, name)
				events[name] = &event{fields: fields, at: at, most: most}
				continue
			}
			if at > ev.at {
				ev.fields, ev.at = fields, at
			}
			ev.most = max(ev.most, most)
		}
	}
	out := []byte("*" + strconv.Itoa(len(order)) + "\r\n")
	for _, name := range order {
		ev := events[name]
		out = append(out, "*4\r\n"...)
		out = append(out, ev.fields[0]...)
		out = append(out, ev.fields[1]...)
		out = append(out, ev.fields[2]...)
		out = resp.AppendInt(out, ev.most)
	}
	return out
}

// arrayElements splits an array reply into its elements' raw bytes.
func arrayElements(r []byte) ([][]byte, error) {
	n, rest, ok := resp.Header(r, '*')
	if !ok {
		return nil, errUnexpectedReply(r)
	}
	return splitElements(r, n, rest)
}

// mapOrArrayElements splits a RESP3 map (its keys and values in turn) or
// an array into its elements.
func mapOrArrayElements(r []byte) ([][]byte, error) {
	if n, rest, ok := resp.Header(r, '%'); ok {
		return splitElements(r, 2*n, rest)
	}
	return arrayElements(r)
}

// splitElements splits rest, what follows r's aggregate header, into n
// whole replies.
func splitElements(r []byte, n int, rest []byte) ([][]byte, error) {
	// The count is the reply's word: room for what its bytes can hold
	// (3 bytes an element at least), not for what it says.
	out := make([][]byte, 0, min(n, len(rest)/3))
	var f resp.Framer
	for range n {
		f.Reset()
		used, done, err := f.Next(rest)
		if err != nil || !done {
			return nil, errUnexpectedReply(r)
		}
		out = append(out, rest[:used])
		rest = rest[used:]
	}
	return out, nil
}

type unexpectedReplyError string

func (e unexpectedReplyError) Error() string { return string(e) }

func errUnexpectedReply(r []byte) error {
	if len(r) > 40 {
		r = r[:40]
	}
	return unexpectedReplyError("not an array: " + strconv.Quote(string(r)))
}
