package proxy

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// clientCommands answers the CLIENT subcommands that name clients. They
// speak in the ids rproxy hands out (CLIENT ID), since those are the only
// ids a client of rproxy knows: LIST and INFO describe rproxy's sessions in
// Redis's own line format, KILL closes sessions, and UNBLOCK and TRACKING
// REDIRECT are sent to Redis with the id Redis knows for the named
// session's pinned connection.
type clientCommands struct {
	sessions *sessionSet
	stream   *clusterStream // a tracking session's branches on a cluster
	users    Users          // rproxy's users (auth.mode proxy; nil: none), for KILL USER
	cluster  bool           // a cluster upstream
	pools    *poolSet       // the shared connections (ACL GETUSER)
	clock    func() time.Time
}

// clientStateOf returns what other sessions may read of ss: its live fields
// when ss is the caller, else what it published after its last batch.
func (cc *clientCommands) clientStateOf(ss, caller *session) clientState {
	if ss == caller {
		return ss.liveState()
	}
	return ss.publishedState()
}

// clientLine appends ss's line of CLIENT LIST, in Redis 7.0's field order.
// Fields rproxy has no counterpart for (buffers, memory) are given as Redis
// gives them for an idle client; the caller's own query buffer is its
// command's length, as on Redis.
func (cc *clientCommands) clientLine(dst []byte, ss, caller *session, cmd resp.Command, now time.Time) []byte {
	st := cc.clientStateOf(ss, caller)
	cmdName := st.cmd
	qbuf := 0
	idle := now.Sub(ss.view.created)
	inExec := 0 // the caller's commands in the EXEC it answers in (txClient)
	if ss == caller {
		cmdName = "client|" + string(bytes.ToLower(cmd.Args[1]))
		qbuf = len(cmd.Raw)
		idle = 0
		if inExec = ss.txClient.execCount; inExec > 0 {
			cmdName = "exec" // as Redis shows a command EXEC runs
		}
	} else if at := ss.view.active.Load(); at != 0 {
		idle = now.Sub(time.Unix(0, at))
	}
	if cmdName == "" {
		cmdName = "NULL"
	}
	// In Redis's order: S or O, P, x, b, t, B, e.
	flags, multi := "", -1
	if st.role != 0 {
		flags += string(st.role)
	}
	if st.subs+st.psubs+st.ssubs > 0 {
		flags += "P"
	}
	if st.multi || inExec > 0 {
		flags, multi = flags+"x", inExec
	}
	if (ss.blockedNow.Load() || ss.blockedInStream.Load() > 0) && cc.blockedOnRedis(ss) {
		flags += "b"
	}
	if st.tracking {
		flags += "t"
	}
	if st.tracking && st.bcast {
		flags += "B"
	}
	if st.noEvict {
		flags += "e"
	}
	if flags == "" {
		flags = "N"
	}
	user := st.user
	if user == "" {
		user = "default"
	}
	proto := st.proto
	if proto == 0 {
		proto = 2
	}
	dst = append(dst, "id="...)
	dst = strconv.AppendInt(dst, ss.id, 10)
	dst = append(dst, " addr="...)
	dst = append(dst, ss.conn.RemoteAddr()...)
	dst = append(dst, " laddr="...)
	dst = append(dst, ss.conn.NetConn().LocalAddr().String()...)
	dst = append(dst, " fd=-1 name="...)
	dst = append(dst, st.name...)
	dst = append(dst, " age="...)
	dst = strconv.AppendInt(dst, int64(max(now.Sub(ss.view.created), 0).Seconds()), 10)
	dst = append(dst, " idle="...)
	dst = strconv.AppendInt(dst, int64(max(idle, 0).Seconds()), 10)
	dst = append(dst, " flags="...)
	dst = append(dst, flags...)
	dst = append(dst, " db="...)
	dst = strconv.AppendInt(dst, int64(st.db), 10)
	dst = append(dst, " sub="...)
	dst = strconv.AppendInt(dst, int64(st.subs), 10)
	dst = append(dst, " psub="...)
	dst = strconv.AppendInt(dst, int64(st.psubs), 10)
	dst = append(dst, " ssub="...)
	dst = strconv.AppendInt(dst, int64(st.ssubs), 10)
	dst = append(dst, " multi="...)
	dst = strconv.AppendInt(dst, int64(multi), 10)
	dst = append(dst, " qbuf="...)
	dst = strconv.AppendInt(dst, int64(qbuf), 10)
	dst = append(dst, " qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd="...)
	dst = append(dst, cmdName...)
	dst = append(dst, " user="...)
	dst = append(dst, user...)
	dst = append(dst, " redir="...)
	dst = strconv.AppendInt(dst, st.redirect, 10)
	dst = append(dst, " resp="...)
	dst = strconv.AppendInt(dst, int64(proto), 10)
	return append(dst, '\n')
}

// appendText appends text as CLIENT LIST's reply type: a bulk string in
// RESP2, a verbatim "txt" string in RESP3.
func appendText(dst []byte, proto int, text []byte) []byte {
	if proto != 3 {
		return resp.AppendBulk(dst, text)
	}
	dst = append(dst, '=')
	dst = strconv.AppendInt(dst, int64(len(text)+4), 10)
	dst = append(dst, "\r\ntxt:"...)
	dst = append(dst, text...)
	return append(dst, "\r\n"...)
}

// clientType is CLIENT LIST's and CLIENT KILL's TYPE of a session, as
// Redis types its clients: a replica after SYNC or PSYNC (not MONITOR),
// pubsub while subscribed to anything, else normal (tracking and MONITOR
// included, though rproxy gives them a stream).
func clientType(st clientState) string {
	switch {
	case st.role == 'S':
		return "replica"
	case st.subs+st.psubs+st.ssubs > 0:
		return "pubsub"
	}
	return "normal"
}

// validClientType reports whether Redis knows the TYPE name.
func validClientType(t []byte) bool {
	switch string(bytes.ToLower(t)) {
	case "normal", "master", "replica", "slave", "pubsub":
		return true
	}
	return false
}

// blockedOnRedis reports whether Redis holds ss's blocking command, which
// rproxy marks as it sends it, before Redis has it: a client that waits
// for the b flag to unblock the command (rueidis's UnblockOnCancel test)
// must find it blocked on Redis, or CLIENT UNBLOCK answers 0. Redis's
// CLIENT LIST line of the connection it waits on decides; if Redis cannot
// say (an error), rproxy's mark stands.
func (cc *clientCommands) blockedOnRedis(ss *session) bool {
	d := cc.sessions.blockableOf(ss.id)
	if d == nil || d.RedisID() == 0 {
		return false
	}
	backend := cc.pools[2]
	b := upstream.NewBatch()
	b.Add(resp.AppendCommand(nil, []byte("CLIENT"), []byte("LIST"), []byte("ID"), strconv.AppendInt(nil, d.RedisID(), 10)))
	backend.PinPool(slotOfServer(backend, d.Address())).Do(b)
	r := b.Reply(0)
	if len(r) == 0 || r[0] == '-' {
		return true
	}
	_, flags, ok := bytes.Cut(r, []byte(" flags="))
	if !ok {
		return false // not listed: the connection is gone
	}
	flags, _, _ = bytes.Cut(flags, []byte(" "))
	return bytes.IndexByte(flags, 'b') >= 0
}

// clientListText is CLIENT LIST's text, or the error reply for bad
// arguments.
func (cc *clientCommands) clientListText(ss *session, cmd resp.Command) ([]byte, []byte) {
	args := cmd.Args
	var typ []byte
	var ids []int64
	for i := 2; i < len(args); i++ {
		switch {
		case bytes.EqualFold(args[i], []byte("type")) && i+1 < len(args) && ids == nil:
			typ = bytes.ToLower(args[i+1])
			if !validClientType(typ) {
				return nil, resp.AppendError(nil, "ERR Unknown client type '"+string(args[i+1])+"'")
			}
			if string(typ) == "slave" {
				typ = []byte("replica")
			}
			i++
		case bytes.EqualFold(args[i], []byte("id")) && i+1 < len(args) && typ == nil:
			for _, a := range args[i+1:] {
				id, ok := resp.ParseInt(a)
				if !ok {
					return nil, resp.AppendError(nil, "ERR Invalid client ID")
				}
				// 0 or a negative id is an integer to Redis, which lists no one for it.
				ids = append(ids, id)
			}
			i = len(args)
		default:
			return nil, resp.AppendError(nil, "ERR syntax error")
		}
	}
	now := cc.clock()
	var text []byte
	for _, other := range cc.sessions.live() {
		if ids != nil && !slices.Contains(ids, other.id) {
			continue
		}
		if typ != nil && clientType(cc.clientStateOf(other, ss)) != string(typ) {
			continue
		}
		text = cc.clientLine(text, other, ss, cmd, now)
	}
	return text, nil
}

// clientKill answers CLIENT KILL: the old form (an address) and the
// filters ID, TYPE, USER, ADDR, LADDR and SKIPME, applied to rproxy's
// sessions as Redis applies them to its clients. Nothing is forwarded:
// Redis would kill whichever of its connections matched, possibly one that
// every client shares. A killed session is closed; the caller, when it
// asked for itself (SKIPME no, or the old form), after the reply.
func (cc *clientCommands) clientKill(ss *session, cmd resp.Command) {
	args := cmd.Args
	if _, here := effectClientCommand(args); !here {
		ss.forwardInMode(cmd.Raw) // Redis's arity error
		return
	}
	reply, victims := cc.kill(ss, args)
	if ss.stream && ss.pin != nil && len(victims) == 1 && victims[0] == ss {
		// It kills itself: Redis answers and closes the pinned connection,
		// which ends the stream and closes the client after the reply, as
		// Redis closes a client that killed itself.
		ss.killed.Store(true)
		kill := resp.AppendCommandString(nil, "CLIENT", "KILL", "ADDR", ss.pin.LocalAddr(), "SKIPME", "no")
		if len(args) == 3 {
			kill = resp.AppendCommandString(nil, "CLIENT", "KILL", ss.pin.LocalAddr()) // +OK, as the old form answers
		}
		ss.streamCmds = append(ss.streamCmds, kill)
		return
	}
	ss.replyInMode(reply)
	for _, v := range victims {
		cc.killSession(ss, v)
	}
}

// killInExec answers a CLIENT KILL queued inside MULTI, in EXEC's array
// (txClient), and kills what it matches: the caller, if among them, once
// EXEC's reply is written, as Redis closes a client that killed itself in
// a transaction.
func (cc *clientCommands) killInExec(ss *session, args [][]byte) []byte {
	reply, victims := cc.kill(ss, args)
	for _, v := range victims {
		cc.killSession(ss, v)
	}
	return reply
}

// kill reads CLIENT KILL's arguments (three or more) as Redis does and
// returns its reply and the sessions it kills (none when the reply is an
// error).
func (cc *clientCommands) kill(ss *session, args [][]byte) (reply []byte, victims []*session) {
	if len(args) == 3 {
		for _, other := range cc.sessions.live() {
			if other.conn.RemoteAddr() == string(args[2]) {
				return []byte("+OK\r\n"), []*session{other}
			}
		}
		return []byte("-ERR No such client\r\n"), nil
	}
	if len(args)%2 != 0 {
		return []byte("-ERR syntax error\r\n"), nil
	}
	var (
		id              int64
		typ, user       []byte
		addr, laddr     []byte
		skipMe, hasType = true, false
	)
	for i := 2; i < len(args); i += 2 {
		v := args[i+1]
		switch string(bytes.ToLower(args[i])) {
		case "id":
			n, ok := resp.ParseInt(v)
			if !ok || n <= 0 {
				return []byte("-ERR client-id should be greater than 0\r\n"), nil
			}
			id = n
		case "type":
			if !validClientType(v) {
				return resp.AppendError(nil, "ERR Unknown client type '"+string(v)+"'"), nil
			}
			typ, hasType = bytes.ToLower(v), true
			if string(typ) == "slave" {
				typ = []byte("replica")
			}
		case "user":
			user = v
		case "addr":
			addr = v
		case "laddr":
			laddr = v
		case "skipme":
			switch string(bytes.ToLower(v)) {
			case "yes":
				skipMe = true
			case "no":
				skipMe = false
			default:
				return []byte("-ERR syntax error\r\n"), nil
			}
		default:
			return []byte("-ERR syntax error\r\n"), nil
		}
	}
	if user != nil && !cc.userExists(user) {
		return resp.AppendError(nil, "ERR No such user '"+string(user)+"'"), nil
	}
	for _, other := range cc.sessions.live() {
		st := cc.clientStateOf(other, ss)
		u := st.user
		if u == "" {
			u = "default"
		}
		switch {
		case id != 0 && other.id != id,
			hasType && clientType(st) != string(typ),
			user != nil && u != string(user),
			addr != nil && other.conn.RemoteAddr() != string(addr),
			laddr != nil && other.conn.NetConn().LocalAddr().String() != string(laddr),
			skipMe && other == ss:
			continue
		}
		victims = append(victims, other)
	}
	return resp.AppendInt(nil, int64(len(victims))), victims
}

// userExists reports whether CLIENT KILL USER names a user sessions can
// log in as: one of rproxy's users (auth.mode proxy), or else one of
// Redis's ACL users, as Redis answers "No such user" for the rest. When
// Redis will not say (rproxy's upstream user may not run ACL GETUSER), the
// user is taken to exist: the kill then matches no session.
func (cc *clientCommands) userExists(user []byte) bool {
	if string(user) == "default" {
		return true
	}
	if cc.users != nil {
		_, ok := cc.users[string(user)]
		return ok
	}
	b := upstream.NewBatch()
	b.Add(resp.AppendCommand(nil, []byte("ACL"), []byte("GETUSER"), user))
	cc.pools[2].Do(b)
	switch string(b.Reply(0)) {
	case "$-1\r\n", "*-1\r\n", "_\r\n":
		return false
	}
	return true
}

// killSession closes victim: at once, or, when it is the caller, after the
// replies of its batch.
func (cc *clientCommands) killSession(caller, victim *session) {
	victim.killed.Store(true)
	if victim == caller {
		caller.quit = true
		return
	}
	victim.conn.NetConn().Close()
}

// clientUnblock answers CLIENT UNBLOCK id [TIMEOUT|ERROR]: the session's
// blocking command waits on its pinned connection, so Redis is asked to
// unblock that connection, by the id Redis knows it by.
func (cc *clientCommands) clientUnblock(ss *session, cmd resp.Command) {
	if _, here := effectClientCommand(cmd.Args); !here {
		ss.forwardInMode(cmd.Raw) // Redis's arity error
		return
	}
	reply, send, blocked := cc.unblock(cmd.Args)
	if reply != nil {
		ss.replyInMode(reply)
		return
	}
	if ss.stream && cc.cluster && !ss.resp2Subscribed() { // subscribed: Redis refuses it
		// The session's own connection reaches one master; the blocked
		// connection may be on another.
		ss.replyInMode(cc.unblockWhereBlocked(ss, send, blocked))
		return
	}
	if ss.pin == nil && !ss.stream {
		// On a cluster, to the master the blocked connection is on.
		ss.slot = slotOfServer(ss.pools[ss.proto], blocked.Address())
	}
	ss.forwardInMode(send)
}

// unblockInExec answers a CLIENT UNBLOCK queued inside MULTI, in EXEC's
// array (txClient): Redis is asked then, on a shared connection to the
// server the blocked connection is on, and its reply is the answer.
func (cc *clientCommands) unblockInExec(ss *session, args [][]byte) []byte {
	reply, send, blocked := cc.unblock(args)
	if reply != nil {
		return reply
	}
	return cc.unblockWhereBlocked(ss, send, blocked)
}

// unblockWhereBlocked sends send, a CLIENT UNBLOCK of blocked, on a shared
// connection to the server blocked is on, and returns the reply.
func (cc *clientCommands) unblockWhereBlocked(ss *session, send []byte, blocked *upstream.Dedicated) []byte {
	pools := ss.pools[ss.proto]
	b := upstream.NewBatch()
	b.Add(send)
	pools.PinPool(slotOfServer(pools, blocked.Address())).Do(b)
	return slices.Clone(b.Reply(0))
}

// unblock reads CLIENT UNBLOCK's arguments (three or four) as Redis does.
// It returns rproxy's reply (an error, or :0 when the session named has no
// connection of its own to unblock), or else the command to send Redis and
// the connection it unblocks.
func (cc *clientCommands) unblock(args [][]byte) (reply, send []byte, blocked *upstream.Dedicated) {
	// Redis reads the reason before the id.
	if len(args) == 4 && !bytes.EqualFold(args[3], []byte("timeout")) && !bytes.EqualFold(args[3], []byte("error")) {
		return []byte("-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n"), nil, nil
	}
	id, ok := resp.ParseInt(args[2])
	if !ok {
		return []byte("-ERR value is not an integer or out of range\r\n"), nil, nil
	}
	d := cc.sessions.blockableOf(id)
	if d == nil || d.RedisID() == 0 {
		return []byte(":0\r\n"), nil, nil // not blocked: it has no connection of its own
	}
	out := [][]byte{args[0], args[1], strconv.AppendInt(nil, d.RedisID(), 10)}
	out = append(out, args[3:]...)
	return nil, resp.AppendCommand(nil, out...), d
}

// slotOfServer is a slot whose connections backend makes to the server at
// addr: on a cluster one of that master's slots. SlotAny when there is one
// server, or none is at addr.
func slotOfServer(b backend, addr string) int {
	shards := b.Shards()
	if len(shards) < 2 {
		return upstream.SlotAny
	}
	for _, slot := range shards {
		if b.PinPool(slot).Address() == addr {
			return slot
		}
	}
	return upstream.SlotAny
}

// trackingRedirect rewrites CLIENT TRACKING ... REDIRECT id with the id
// Redis knows, on the server the command runs on, for a connection of that
// session's that receives invalidations there (redirectIDOn: its pin, or
// on a cluster a notify branch), and notes the redirection for CLIENT
// GETREDIR unless Redis refuses the command (refused: trackingRefused,
// asked before). A session with no pin yet takes one on the target's pin's
// master. It returns the command to send, or the error to reply.
func (cc *clientCommands) trackingRedirect(ss *session, cmd resp.Command, refused bool) ([]byte, []byte) {
	args := cmd.Args
	at, target, errReply := cc.redirectTarget(args)
	if errReply != nil {
		return nil, errReply
	}
	var upstreamID int64
	if target != nil {
		addr := target.pinRef.Load().Address()
		switch {
		case ss.pin != nil:
			addr = ss.pin.Address()
		case !ss.stream && cc.cluster:
			ss.slot = slotOfServer(ss.pools[ss.proto], addr)
		}
		if upstreamID = redirectIDOn(target, addr); upstreamID == 0 {
			return nil, redirectElsewhere(target.id)
		}
	}
	if len(args) > 2 && !refused {
		switch {
		case bytes.EqualFold(args[2], []byte("off")):
			ss.tracking.redirect, ss.tracking.trackBcast, ss.tracking.trackPrefixes = -1, false, nil
		case bytes.EqualFold(args[2], []byte("on")):
			ss.tracking.redirect, ss.tracking.trackBcast = 0, false
			for _, a := range args[3:] {
				ss.tracking.trackBcast = ss.tracking.trackBcast || bytes.EqualFold(a, []byte("bcast"))
			}
			if !ss.tracking.trackBcast {
				ss.tracking.trackPrefixes = nil
				break
			}
			prefixes := trackingPrefixes(args)
			if len(prefixes) == 0 {
				prefixes = [][]byte{{}} // Redis's prefix for BCAST alone
			}
			for _, p := range prefixes {
				if !slices.ContainsFunc(ss.tracking.trackPrefixes, func(q []byte) bool { return bytes.Equal(p, q) }) {
					ss.tracking.trackPrefixes = append(ss.tracking.trackPrefixes, bytes.Clone(p))
				}
			}
		}
	}
	if target == nil {
		return cmd.Raw, nil
	}
	if !refused {
		ss.tracking.redirect = target.id
	}
	out := slices.Clone(args)
	out[at] = strconv.AppendInt(nil, upstreamID, 10)
	return resp.AppendCommand(nil, out...), nil
}

// trackingRefused reports whether Redis refuses CLIENT TRACKING args (its
// reply an error, its tracking state unchanged), as Redis 7.0's
// clientCommand decides from the arguments and from what the session's
// tracking is now (ss.tracking.redirect, ss.tracking.trackBcast, ss.tracking.trackingArgs,
// ss.tracking.trackPrefixes): a syntax error, PREFIX without BCAST, BCAST with
// OPTIN or OPTOUT, both OPTIN and OPTOUT, two REDIRECTs, a switch of BCAST
// or of OPTIN/OPTOUT while tracking is on, or a prefix that overlaps one
// Redis holds (either starts the other) or, for the first prefix given,
// one given after it. REDIRECT's target is checked apart (redirectTarget).
// rproxy follows a session's tracking only through commands Redis accepts.
func (ss *session) trackingRefused(args [][]byte) bool {
	if len(args) < 3 {
		return true
	}
	var bcast, optin, optout, redirect bool
	prefixes := 0
	for j := 3; j < len(args); j++ {
		more := j+1 < len(args)
		switch strings.ToLower(string(args[j])) {
		case "redirect":
			if !more || redirect {
				return true
			}
			redirect = true
			j++
			if _, ok := resp.ParseInt(args[j]); !ok {
				return true
			}
		case "bcast":
			bcast = true
		case "optin":
			optin = true
		case "optout":
			optout = true
		case "noloop":
		case "prefix":
			if !more {
				return true
			}
			prefixes++
			j++
		default:
			return true
		}
	}
	switch strings.ToLower(string(args[2])) {
	case "off":
		return false
	case "on":
	default:
		return true
	}
	if prefixes > 0 && !bcast || bcast && (optin || optout) || optin && optout {
		return true
	}
	if ss.tracking.redirect != -1 { // tracking is on: its mode may not switch
		var wasIn, wasOut bool
		for _, a := range ss.tracking.trackingArgs {
			wasIn = wasIn || bytes.EqualFold(a, []byte("optin"))
			wasOut = wasOut || bytes.EqualFold(a, []byte("optout"))
		}
		if bcast != ss.tracking.trackBcast || optin && wasOut || optout && wasIn {
			return true
		}
	}
	if bcast {
		return prefixesCollide(ss.tracking.trackPrefixes, trackingPrefixes(args))
	}
	return false
}

// prefixesCollide reports whether Redis 7.0 refuses BCAST tracking of
// prefixes given held (checkPrefixCollisionsOrReply): a prefix overlaps
// one held, or the first overlaps one given after it. Redis 7.0 answers an
// overlap among the prefixes after the first with its error and +OK both,
// tracking on: rproxy answers that command itself (trackingOverlapReply).
func prefixesCollide(held, prefixes [][]byte) bool {
	for i, p := range prefixes {
		if slices.ContainsFunc(held, func(h []byte) bool { return prefixesOverlap(h, p) }) {
			return true
		}
		if slices.ContainsFunc(prefixes[i+1:], func(q []byte) bool { return prefixesOverlap(p, q) }) {
			return i == 0
		}
	}
	return false
}

// prefixesOverlap reports whether one of a and b starts the other: a key
// under both would be announced twice.
func prefixesOverlap(a, b []byte) bool {
	n := min(len(a), len(b))
	return bytes.Equal(a[:n], b[:n])
}

// trackingOverlapReply is rproxy's answer to a CLIENT TRACKING on BCAST
// that Redis accepts (refused: trackingRefused's verdict) but for two of
// its prefixes after the first that overlap: Redis 7.0 replies its error
// and then +OK, two replies to one command that put a client's replies out
// of step, and turns tracking on with them; later Redis refuses it
// (redis/redis#15073). rproxy answers Redis's error alone and sends
// nothing. nil: the command goes to Redis.
func (cc *clientCommands) trackingOverlapReply(args [][]byte, refused bool) []byte {
	if refused || !bcastOn(args) {
		return nil
	}
	if _, _, errReply := cc.redirectTarget(args); errReply != nil {
		return nil // Redis checks the target first
	}
	cString := func(b []byte) string { // as Redis's %s prints it
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return string(b)
	}
	prefixes := trackingPrefixes(args)
	for i, p := range prefixes {
		for _, q := range prefixes[i+1:] {
			if prefixesOverlap(p, q) {
				return resp.AppendError(nil, "ERR Prefix '"+cString(p)+"' overlaps with another provided prefix '"+
					cString(q)+"'. Prefixes for a single client must not overlap.")
			}
		}
	}
	return nil
}

// trackingPrefixes returns the prefixes CLIENT TRACKING args give.
func trackingPrefixes(args [][]byte) [][]byte {
	var prefixes [][]byte
	for j := 3; j+1 < len(args); j++ {
		switch {
		case bytes.EqualFold(args[j], []byte("prefix")):
			prefixes = append(prefixes, args[j+1])
			j++
		case bytes.EqualFold(args[j], []byte("redirect")):
			j++
		}
	}
	return prefixes
}

// redirectTarget finds CLIENT TRACKING's REDIRECT argument: its index and
// the session it names, which has a pin (nil: no REDIRECT), or Redis's
// error for it.
func (cc *clientCommands) redirectTarget(args [][]byte) (int, *session, []byte) {
	for i := 2; i+1 < len(args); i++ {
		if !bytes.EqualFold(args[i], []byte("redirect")) {
			continue
		}
		id, ok := resp.ParseInt(args[i+1])
		if !ok {
			return 0, nil, []byte("-ERR value is not an integer or out of range\r\n")
		}
		target := cc.sessions.byID(id)
		if target == nil || target.pinRef.Load() == nil {
			return 0, nil, []byte("-ERR The client ID you want redirect to does not exist\r\n")
		}
		return i + 1, target, nil
	}
	return 0, nil, nil
}

// redirectElsewhere is the error for a REDIRECT to a session that has no
// connection to a master this session's tracking runs on.
func redirectElsewhere(id int64) []byte {
	return resp.AppendError(nil, "ERR rproxy: the client "+strconv.FormatInt(id, 10)+
		" you want redirect to receives no invalidations from every cluster master this connection uses: on a cluster upstream it must be subscribed to __redis__:invalidate")
}

// trackingOnBranches returns, for each of the session's branches, the
// CLIENT TRACKING command args make: with REDIRECT, the target's id on
// that branch's master. The error is the reply, before anything is sent.
func (cc *clientCommands) trackingOnBranches(ss *session, args [][]byte) ([][]byte, []byte) {
	if len(ss.cstream().branches) == 0 {
		return nil, nil
	}
	cmds := make([][]byte, len(ss.cstream().branches))
	for i, b := range ss.cstream().branches {
		cmd, errReply := cc.trackingOnServer(args, b.pool.Address())
		if errReply != nil {
			return nil, errReply
		}
		cmds[i] = cmd
	}
	return cmds, nil
}

// trackingOnServer returns the CLIENT TRACKING command args make on the
// server at addr: a REDIRECT names the target's connection there
// (redirectIDOn).
func (cc *clientCommands) trackingOnServer(args [][]byte, addr string) ([]byte, []byte) {
	at, target, errReply := cc.redirectTarget(args)
	if errReply != nil {
		return nil, errReply
	}
	if target == nil {
		return resp.AppendCommand(nil, args...), nil
	}
	id := redirectIDOn(target, addr)
	if id == 0 {
		return nil, redirectElsewhere(target.id)
	}
	out := slices.Clone(args)
	out[at] = strconv.AppendInt(nil, id, 10)
	return resp.AppendCommand(nil, out...), nil
}

// streamClient handles, in stream mode, the CLIENT subcommands that speak in
// client ids, which Redis would answer with the pinned connection's: the
// reply must still come in order with what Redis sends (answerInStream).
// It reports whether it queued cmd.
func (cc *clientCommands) streamClient(ss *session, cmd resp.Command) bool {
	args := cmd.Args
	if len(args) < 2 {
		return false // Redis's arity error
	}
	switch {
	case len(args) == 2 && bytes.EqualFold(args[1], []byte("id")):
		ss.replyInMode(resp.AppendInt(nil, ss.id))
	case len(args) == 2 && bytes.EqualFold(args[1], []byte("getredir")):
		ss.replyInMode(resp.AppendInt(nil, ss.tracking.redirect))
	case len(args) == 2 && bytes.EqualFold(args[1], []byte("trackinginfo")):
		// Redis's reply, with the redirect in rproxy's ids: the id the
		// client gave, also after its session is gone (broken_redirect),
		// and on a cluster the broken_redirect flag of any of the
		// session's connections: Redis sets it on the connection that
		// failed to redirect an invalidation, that of the key's master.
		redirect := ss.tracking.redirect
		parts := cc.trackingInfoOfBranches(ss, cmd.Raw)
		if redirect <= 0 && len(parts) == 0 {
			return false
		}
		ss.rewriteInStream(cmd.Raw, func(r []byte) []byte {
			if redirect > 0 {
				r = withIntField(r, trackingRedirectKey, redirect)
			}
			var pushes []byte
			for _, p := range parts {
				reply, after := p.showApart()
				if bytes.Contains(reply, brokenRedirectFlag) {
					r = withLastFlag(r, brokenRedirectFlag)
				}
				pushes = append(pushes, after...)
			}
			return append(r, pushes...)
		})
		return true
	case len(args) == 3 && bytes.EqualFold(args[1], []byte("setname")):
		// Redis answers (and checks the name); the session keeps it for
		// CLIENT LIST and GETNAME.
		if validClientName(args[2]) {
			ss.name = string(args[2])
		}
		return false
	case len(args) == 2 && bytes.EqualFold(args[1], []byte("getname")):
		ss.answerInStream(ss.nameReply(), func() []byte { return scriptName(ss.name) })
	case bytes.EqualFold(args[1], []byte("list")):
		ss.settleSelect()
		text, errReply := cc.clientListText(ss, cmd)
		if errReply != nil {
			ss.replyInMode(errReply) // Redis's error for the arguments
			return true
		}
		ss.answerClientText(text)
	case len(args) == 2 && bytes.EqualFold(args[1], []byte("info")):
		ss.settleSelect()
		ss.answerClientText(cc.clientLine(nil, ss, ss, cmd, cc.clock()))
	case bytes.EqualFold(args[1], []byte("kill")):
		cc.clientKill(ss, cmd)
	case bytes.EqualFold(args[1], []byte("unblock")):
		cc.clientUnblock(ss, cmd)
	case bytes.EqualFold(args[1], []byte("tracking")):
		// The branches it would make first: Redis's refusal there is the
		// answer, and nothing has changed.
		refused := ss.trackingRefused(args)
		errReply := cc.trackingOverlapReply(args, refused)
		var branchCmds [][]byte
		if errReply == nil {
			branchCmds, errReply = cc.trackingOnBranches(ss, args)
		}
		if errReply == nil {
			errReply = cc.stream.bcastRedirectReaches(ss, args)
		}
		if errReply == nil {
			errReply = cc.stream.bcastEverywhere(ss, args)
		}
		if errReply == nil {
			var raw []byte
			if raw, errReply = cc.trackingRedirect(ss, cmd, refused); errReply == nil {
				ss.tracking.pinTracked = true
				if !refused {
					ss.tracking.trackingArgs = ss.branchTrackingArgs(args)
				}
				ss.trackingEverywhere(raw, branchCmds)
				return true
			}
		}
		ss.replyInMode(errReply) // Redis's error for the arguments, or rproxy's
	default:
		return false
	}
	return true
}

// trackingEverywhere sends a CLIENT TRACKING (raw) to the session's own
// connection and cmds to its branches on other masters (those made before
// bcastEverywhere's, which turned tracking on as they were made). The
// client's reply, the own connection's, waits for the branches' replies:
// when it came at once, a write the client (or another client it told)
// made next on another master could reach that master before its branch's
// CLIENT TRACKING, and its invalidation was never sent (Redis's
// unit/tracking "Tracking NOLOOP mode in BCAST mode works" waited for it
// for ever, once, on a cluster with procs 3). Where the client gets no
// reply (CLIENT REPLY OFF or SKIP) there is nothing to hold.
func (ss *session) trackingEverywhere(raw []byte, cmds [][]byte) {
	if len(cmds) == 0 || !ss.streamAnswered() {
		for i, cmd := range cmds {
			ss.cstream().branches[i].send([][]byte{cmd}, []bool{false})
		}
		ss.streamCmds = append(ss.streamCmds, raw)
		return
	}
	parts := make([]*branchReply, len(cmds))
	for i, cmd := range cmds {
		parts[i] = ss.cstream().branches[i].send([][]byte{cmd}, []bool{true})[0]
	}
	ss.joinInStream(raw, func(pinReply []byte) []byte {
		var pushes []byte
		for _, p := range parts {
			_, after := p.showApart()
			pushes = append(pushes, after...)
		}
		return append(slices.Clip(pinReply), pushes...)
	})
}

// nameReply is CLIENT GETNAME's reply: the name, or a null when there is
// none.
func (ss *session) nameReply() []byte {
	if ss.name == "" {
		return resp.AppendNullBulk(nil, ss.proto)
	}
	return resp.AppendBulk(nil, []byte(ss.name))
}

// scriptName is a command that makes Redis reply name as CLIENT GETNAME
// does: a bulk string, or a null when there is none.
func scriptName(name string) []byte {
	if name == "" {
		return resp.AppendCommandString(nil, "EVAL", "return false", "0")
	}
	return resp.AppendCommandString(nil, "EVAL", "return ARGV[1]", "0", name)
}

// scriptText is a command that makes Redis reply text as a bulk string
// (CLIENT LIST's RESP2 form; a RESP3 client gets a bulk string too, not
// Redis's verbatim string).
func scriptText(text []byte) []byte {
	return resp.AppendCommand(nil, []byte("EVAL"), []byte("return ARGV[1]"), []byte("0"), text)
}

// replyInMode queues a reply made here: in stream mode, in order with what
// Redis sends (answerInStream).
func (ss *session) replyInMode(r []byte) {
	if !ss.stream {
		ss.reply(r)
		return
	}
	ss.answerInStream(r, func() []byte { return scriptReplying(r) })
}

// answerInStream queues, in stream mode, r, rproxy's answer to a command.
// Outside a transaction Redis is sent errorCmd and the session's relay
// shows the client r in place of Redis's rejection (substituteInStream):
// nothing is asked of the upstream user, and nothing shows in MONITOR or
// SLOWLOG. Inside one, where errorCmd would abort the transaction, the
// command script makes is queued instead (made only then: it copies r's
// text), so that the answer comes in EXEC's array, an error failing that
// command alone, as Redis's own answer would.
func (ss *session) answerInStream(r []byte, script func() []byte) {
	ss.localCount++
	if ss.inTransaction() {
		ss.streamCmds = append(ss.streamCmds, script())
		return
	}
	ss.substituteInStream(r)
}

// replyClientText answers CLIENT INFO or CLIENT LIST with text, lines of
// the form of Redis's CLIENT LIST. The session's database is set from
// Redis's answers after the batch: after a SELECT earlier in the batch, or
// an EXEC of a transaction that queued one, the answer is made then, with
// the database Redis's replies before it left selected (as Redis's own
// answer shows it).
func (ss *session) replyClientText(text []byte) {
	settles := false
	for _, t := range ss.track {
		settles = settles || t.kind == trackSelect || t.kind == trackExec && len(ss.selects) > 0
	}
	if !settles {
		ss.reply(appendText(nil, ss.proto, text))
		return
	}
	ss.localCount++
	before := ss.pinnedState
	before.selects = slices.Clone(before.selects)
	tracks, proto, batch := slices.Clone(ss.track), ss.proto, ss.batch
	prefix := []byte("id=" + strconv.FormatInt(ss.id, 10) + " ")
	ss.queueMerge(merge{kind: mergeMade, made: func() []byte {
		st := before
		for i, t := range tracks {
			st.settle(t, batch.Reply(i))
		}
		return appendText(nil, proto, withOwnDB(text, prefix, st.db))
	}})
}

// answerClientText answers, in stream mode, CLIENT INFO or CLIENT LIST
// with text, lines of the form of Redis's CLIENT LIST. While a SELECT sent
// before it is unanswered (streamSelect), the session's own line shows the
// database it names, which Redis may refuse: the answer is then made when
// its turn comes, with the database the replies before it settled.
func (ss *session) answerClientText(text []byte) {
	if ss.selectSettled() || ss.inTransaction() || !ss.streamAnswered() || ss.cstream().branchTx != nil ||
		cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds) {
		ss.answerInStream(appendText(nil, ss.proto, text), func() []byte { return scriptText(text) })
		return
	}
	ss.localCount++
	proto, done, seq := ss.proto, &ss.selectDone, ss.selectSeq
	prefix := []byte("id=" + strconv.FormatInt(ss.id, 10) + " ")
	ss.relay.queue(relayAnswer{made: func() []byte {
		if last := done.Load(); uint32(last>>32) == seq {
			text = withOwnDB(text, prefix, int(int32(uint32(last))))
		}
		return appendText(nil, proto, text)
	}})
	ss.streamCmds = append(ss.streamCmds, errorCmd)
}

// withOwnDB is text, CLIENT LIST lines, with db set to db in the line that
// starts with prefix (the session's id).
func withOwnDB(text, prefix []byte, db int) []byte {
	for start := 0; start < len(text); {
		end := bytes.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		line := text[start:end]
		if bytes.HasPrefix(line, prefix) {
			i := bytes.Index(line, []byte(" db="))
			if i < 0 {
				return text
			}
			i += start + len(" db=")
			j := i
			for j < end && text[j] != ' ' {
				j++
			}
			out := append(bytes.Clone(text[:i]), strconv.Itoa(db)...)
			return append(out, text[j:]...)
		}
		start = end + 1
	}
	return text
}

// errorInStream is answerInStream for r, an error reply made here.
func (ss *session) errorInStream(r []byte) {
	ss.answerInStream(r, func() []byte { return scriptError(r) })
}

// scriptReplying is a command that makes Redis reply r, an integer, a status
// or an error.
func scriptReplying(r []byte) []byte {
	text := bytes.TrimSuffix(r[1:], []byte("\r\n"))
	switch r[0] {
	case ':':
		return scriptIntText(text)
	case '+':
		return resp.AppendCommand(nil, []byte("EVAL"), []byte("return redis.status_reply(ARGV[1])"), []byte("0"), text)
	}
	return scriptError(r)
}

// scriptError is a command that makes Redis reply the error reply r
// ("-ERR ...\r\n") when it runs.
func scriptError(r []byte) []byte {
	msg := bytes.TrimSuffix(bytes.TrimPrefix(r, []byte("-")), []byte("\r\n"))
	return resp.AppendCommand(nil, []byte("EVAL"), []byte("return redis.error_reply(ARGV[1])"), []byte("0"), msg)
}

// trackingRedirectKey is the redirect field's key in CLIENT TRACKINGINFO's
// reply, followed by its integer value.
var trackingRedirectKey = []byte("$8\r\nredirect\r\n:")

// brokenRedirectFlag is CLIENT TRACKINGINFO's flag of a connection whose
// redirect target has gone, the last of its flags.
var brokenRedirectFlag = []byte("$15\r\nbroken_redirect\r\n")

// trackingInfoOfBranches sends, on a cluster, a CLIENT TRACKINGINFO (raw)
// to each of the session's branches that track, for the pin's reply to
// take their broken_redirect flag (streamClient); none where that reply is
// not rewritten (rewriteInStream).
func (cc *clientCommands) trackingInfoOfBranches(ss *session, raw []byte) []*branchReply {
	if !cc.cluster || !ss.streamAnswered() || ss.inTransaction() || ss.tracking.redirect <= 0 {
		return nil
	}
	var parts []*branchReply
	for _, b := range ss.cstream().branches {
		if b.tracks {
			parts = append(parts, b.send([][]byte{raw}, []bool{true})[0])
		}
	}
	return parts
}

// withLastFlag returns r, a CLIENT TRACKINGINFO reply, with flag (a bulk
// string) added at the end of its flags, if it is not among them.
func withLastFlag(r, flag []byte) []byte {
	key := []byte("$5\r\nflags\r\n")
	i := bytes.Index(r, key)
	if i < 0 || i+len(key) >= len(r) || r[i+len(key)] != '*' && r[i+len(key)] != '~' {
		return r // an array in RESP2, a set in RESP3
	}
	at := i + len(key) + 1 // the flags' count
	eol := bytes.Index(r[at:], []byte("\r\n"))
	if eol < 0 {
		return r
	}
	n, ok := resp.ParseInt(r[at : at+eol])
	if !ok || n < 0 {
		return r
	}
	end := at + eol + 2 // past the flags, once n are skipped
	for range n {
		if bytes.HasPrefix(r[end:], flag) {
			return r
		}
		k, done, err := (&resp.Framer{}).Next(r[end:])
		if err != nil || !done {
			return r
		}
		end += k
	}
	out := append(slices.Clip(r[:at]), strconv.AppendInt(nil, n+1, 10)...)
	out = append(out, r[at+eol:end]...)
	out = append(out, flag...)
	return append(out, r[end:]...)
}

// resp2Subscribed reports whether the session may be in RESP2's
// subscribed mode (subscribedContext), by the subscriptions it asked for:
// Redis may have refused them.
func (ss *session) resp2Subscribed() bool {
	return ss.proto == 2 && len(ss.subscribed['c'])+len(ss.subscribed['p'])+len(ss.subscribed['s']) > 0
}

// forgetSubscriptions drops the subscriptions the session asked for once
// Redis has shown it holds none (a modeProbe).
func (ss *session) forgetSubscriptions() {
	for _, set := range ss.subscribed {
		clear(set)
	}
}

// substituteInStream queues, in stream mode, the reply r made here to the
// command passing the chain (ss.call): Redis is sent errorCmd, which it
// rejects, and the session's relay shows the client r in place of Redis's
// error (streamrelay.go). Where that command is a CLIENT one and Redis
// holds a CLIENT CACHING flag for the client's next command, the rejected
// command is clientErrorCmd, which keeps the flag, as the CLIENT command
// would have; any other command (AUTH, a policy refusal) drops it on
// Redis, and so does errorCmd (inside MULTI Redis keeps the flag until
// EXEC).
func (ss *session) substituteInStream(r []byte) {
	if b := ss.branchTo(ss.cstream().branchTx); b != nil {
		// Inside a transaction on a branch: Redis rejects errorCmd there
		// too, which makes its EXEC fail (EXECABORT), as on the pin; the
		// client sees r in its place.
		b.send([][]byte{errorCmd}, []bool{false})
	}
	if ss.streamAnswered() {
		ss.relay.substitute(r)
	}
	marker := errorCmd
	if args := ss.call.cmd.Args; len(args) > 0 && bytes.EqualFold(args[0], []byte("client")) &&
		!ss.inTransaction() && cachingHeldAfter(ss.tracking.cachingSent, ss.streamCmds) {
		marker = clientErrorCmd
	}
	ss.streamCmds = append(ss.streamCmds, marker)
}

// cachingHeldAfter reports whether Redis holds a CLIENT CACHING flag after
// cmds, sent in stream mode, given whether it held one before them. Redis
// drops it after any command but a CLIENT one; a CACHING Redis refuses
// counts as held, which costs only the choice of clientErrorCmd. Only the
// CLIENT commands at the end of cmds decide, so it looks at those alone:
// usually the last command, and it is not one.
func cachingHeldAfter(held bool, cmds [][]byte) bool {
	for i := len(cmds) - 1; i >= 0; i-- {
		if !bytes.EqualFold(rawCommandName(cmds[i]), []byte("client")) {
			return false
		}
		if bytes.EqualFold(rawSubcommand(cmds[i]), []byte("caching")) {
			return true
		}
	}
	return held
}

// forwardInMode sends a command on: queued in the batch, or in stream mode
// on the stream.
func (ss *session) forwardInMode(raw []byte) {
	if ss.stream {
		ss.streamCmds = append(ss.streamCmds, raw)
		return
	}
	ss.forward(raw)
}

// scriptIntText is a command that makes Redis reply the integer n, given
// in decimal text.
func scriptIntText(n []byte) []byte {
	return resp.AppendCommand(nil, []byte("EVAL"), []byte("return tonumber(ARGV[1])"), []byte("0"), n)
}

// noteSubscriptions follows what a (un)subscribe command asks for, and the
// role SYNC, PSYNC and MONITOR give the session, for CLIENT LIST and
// CLIENT KILL's TYPE: Redis's replies are not read in stream mode, so this is the
// client's view (a subscribe Redis refused counts until a modeProbe shows
// Redis holds none).
func (ss *session) noteSubscriptions(name string, args [][]byte) {
	var kind byte
	switch name {
	case "sync", "psync":
		ss.role = 'S'
		return
	case "monitor":
		ss.role = 'O'
		if ss.relay != nil && ss.stream {
			ss.relay.monitoring.Store(true) // already in stream mode (tracking, pub/sub in RESP3)
		}
		return
	case "subscribe", "unsubscribe":
		kind = 'c'
	case "psubscribe", "punsubscribe":
		kind = 'p'
	case "ssubscribe", "sunsubscribe":
		kind = 's'
	default:
		return
	}
	if ss.subscribed == nil {
		ss.subscribed = make(map[byte]map[string]struct{})
	}
	set := ss.subscribed[kind]
	if set == nil {
		set = make(map[string]struct{})
		ss.subscribed[kind] = set
	}
	if kind == 's' && ss.relay != nil {
		// For the copies to tell Redis's own sunsubscribe (shardmove.go).
		if name == "sunsubscribe" {
			ss.relay.shards.unsubscribing(set, args[1:])
		}
		defer ss.relay.shards.setWanted(set)
	}
	if strings.HasPrefix(name, "subscribe") || name == "psubscribe" || name == "ssubscribe" {
		for _, a := range args[1:] {
			set[string(a)] = struct{}{}
		}
		return
	}
	ss.subscribedSure = false // Redis may leave the mode
	if len(args) == 1 {
		clear(set) // unsubscribe from all
		return
	}
	for _, a := range args[1:] {
		delete(set, string(a))
	}
}
