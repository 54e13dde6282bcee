package proxy

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// txClient is the CLIENT commands rproxy answers itself (ID, GETNAME,
// SETNAME, SETINFO, INFO, LIST, KILL, UNBLOCK), and AUTH where rproxy
// checks it, that a session queued inside MULTI, outside stream mode.
// Redis would queue each and run it at EXEC, its reply in EXEC's array,
// where rproxy alone knows the answer. So an ECHO of a marker goes to
// Redis in each one's place: Redis answers QUEUED (or refuses it, as it
// would the command, when MULTI was refused), and EXEC's array holds the
// marker where the command's reply goes. When that array comes, each marker is replaced by rproxy's answer,
// made then and in order, so a SETNAME takes effect only if the
// transaction ran, and a GETNAME after it in the transaction sees it.
type txClient struct {
	pending      []txClientCmd
	pendingBytes int    // of the pending commands' arguments
	seq          uint64 // numbers the markers
	// tx numbers the session's transactions (each EXEC or DISCARD ends
	// one); ended is the last one ended: once the batch that ended it is
	// written, no marker of it can come.
	tx, ended uint64
	// execCount: while EXEC's array is being answered, its length (CLIENT
	// INFO and LIST show the session running EXEC, as Redis does).
	execCount int
}

// maxTxClient and maxTxClientBytes bound what a session's open
// transactions may queue for rproxy to answer (each command's arguments
// are kept until EXEC): past them the command is refused, which aborts the
// transaction, rather than held in memory without end.
const (
	maxTxClient      = 1024
	maxTxClientBytes = 1 << 20
)

// full reports whether queueing args would pass maxTxClient or
// maxTxClientBytes.
func (tc *txClient) full(args [][]byte) bool {
	return len(tc.pending) >= maxTxClient || tc.pendingBytes+argsLen(args) > maxTxClientBytes
}

// txClientCmd is one queued CLIENT or AUTH command and its marker's reply.
type txClientCmd struct {
	marker []byte   // the ECHO's reply: the marker as a bulk string
	args   [][]byte // the command, copied
	tx     uint64   // the transaction it was queued in
}

// inMulti says what becomes of a command rproxy answers when it is sent
// inside MULTI (outside stream mode).
type inMulti uint8

const (
	refusedInMulti   inMulti = iota // refused, aborting the transaction (transactionGuard)
	answeredInExec                  // queued as a marker, answered in EXEC's array (txClient)
	forwardedInMulti                // sent as it came: Redis's own error, as outside MULTI (Server.client)
)

// placeInMulti places a command rproxy answers, sent inside MULTI outside
// stream mode. CLIENT ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL and
// UNBLOCK, and AUTH where rproxy checks it (auth.mode none or proxy), are
// answered in EXEC's array; those CLIENT commands with another number of
// arguments, or a SETINFO the server does not know, go to Redis as sent,
// as outside MULTI; the rest is refused.
func placeInMulti(table *command.Table, info *command.Info, args [][]byte, passthrough bool) inMulti {
	if isAuth(args[0]) {
		if passthrough {
			return refusedInMulti // the user's connections change: not done at EXEC
		}
		return answeredInExec
	}
	if info == nil || info.Handling != command.Client {
		return refusedInMulti
	}
	known, here := sessionClientCommand(table, args)
	if !known {
		known, here = effectClientCommand(args)
	}
	switch {
	case !known:
		return refusedInMulti
	case !here:
		return forwardedInMulti
	}
	return answeredInExec
}

// effectClientCommand reports whether args is CLIENT KILL or UNBLOCK,
// which rproxy carries out on its sessions, and whether rproxy answers
// this one: with another number of arguments Redis gives its arity error
// (inside MULTI and outside: clientKill, clientUnblock).
func effectClientCommand(args [][]byte) (known, here bool) {
	if len(args) < 2 {
		return false, false
	}
	switch string(bytes.ToLower(args[1])) {
	case "kill":
		return true, len(args) >= 3
	case "unblock":
		return true, len(args) == 3 || len(args) == 4
	}
	return false, false
}

// sessionClientCommand reports whether args is one of the CLIENT
// subcommands about the session that rproxy answers (ID, GETNAME, SETNAME,
// SETINFO, INFO, LIST), and whether rproxy answers this one: with another
// number of arguments, or a SETINFO the server does not know, Redis gives
// its own error.
func sessionClientCommand(table *command.Table, args [][]byte) (known, here bool) {
	if len(args) < 2 {
		return false, false
	}
	switch string(bytes.ToLower(args[1])) {
	case "id", "getname", "info":
		return true, len(args) == 2
	case "setname":
		return true, len(args) == 3
	case "setinfo":
		return true, len(args) == 4 && tableKnows(table, "client", "setinfo")
	case "list":
		return true, true
	}
	return false, false
}

// execAnswers makes rproxy's answers inside EXEC's array: the CLIENT
// commands' (clientCommands: KILL and UNBLOCK act then) and AUTH's (the
// auth stage).
type execAnswers struct {
	clients *clientCommands
	auth    *authenticating
}

func (e execAnswers) answer(ss *session, args [][]byte) []byte {
	if isAuth(args[0]) {
		return e.auth.answerInExec(ss, args)
	}
	switch string(bytes.ToLower(args[1])) {
	case "kill":
		return e.clients.killInExec(ss, args)
	case "unblock":
		return e.clients.unblockInExec(ss, args)
	}
	return e.clients.answer(ss, resp.Command{Args: args})
}

// queueInTransaction puts an ECHO of a new marker in c's place (the chain
// then routes and queues it as any keyless command) and remembers c.
func (tc *txClient) queueInTransaction(ss *session, c *call) {
	tc.seq++
	marker := []byte("rproxy:client-in-multi:" + strconv.FormatInt(ss.id, 10) + ":" + strconv.FormatUint(tc.seq, 10))
	args := make([][]byte, len(c.cmd.Args))
	for i, a := range c.cmd.Args {
		args[i] = slices.Clone(a)
		tc.pendingBytes += len(a)
	}
	tc.pending = append(tc.pending, txClientCmd{marker: resp.AppendBulk(nil, marker), args: args, tx: tc.tx})
	echo := [][]byte{[]byte("ECHO"), marker}
	c.cmd = resp.Command{Raw: resp.AppendCommand(nil, echo...), Args: echo}
	c.info = c.table.Lookup(echo[0])
}

// noteEnd is told of each command once it has passed the chain while
// CLIENT or AUTH commands are queued; it reports whether the batch should
// go at once: after an EXEC, so that the commands after it see what those
// did, as on Redis.
func (tc *txClient) noteEnd(info *command.Info) (sendNow bool) {
	if info == nil {
		return false
	}
	switch info.Name {
	case "exec":
		tc.end()
		return true
	case "discard":
		tc.end()
	}
	return false
}

// answerMarkers returns r with the markers of the session's queued CLIENT
// and AUTH commands replaced by their answers: in EXEC's array, or as the reply
// itself when Redis ran the ECHO at once (MULTI had been refused).
func (tc *txClient) answerMarkers(ss *session, r []byte, answers execAnswers) []byte {
	if len(r) == 0 {
		return r
	}
	if r[0] == '$' {
		if i := tc.find(r); i >= 0 {
			return tc.answerQueued(ss, i, answers)
		}
		return r
	}
	if r[0] != '*' {
		return r
	}
	elems, err := arrayElements(r)
	if err != nil {
		return r
	}
	replaced := false
	tc.execCount = len(elems)
	for j, e := range elems {
		if i := tc.find(e); i >= 0 {
			elems[j] = tc.answerQueued(ss, i, answers)
			replaced = true
		}
	}
	tc.execCount = 0
	if !replaced {
		return r
	}
	return appendArray(make([]byte, 0, len(r)), '*', elems)
}

// find returns the index of the pending command whose marker reply is r,
// or -1.
func (tc *txClient) find(r []byte) int {
	for i, p := range tc.pending {
		if bytes.Equal(p.marker, r) {
			return i
		}
	}
	return -1
}

// answerQueued answers the pending command i now, as Redis runs it at
// EXEC, and forgets it.
func (tc *txClient) answerQueued(ss *session, i int, answers execAnswers) []byte {
	args := tc.pending[i].args
	tc.pending = slices.Delete(tc.pending, i, i+1)
	tc.pendingBytes -= argsLen(args)
	return answers.answer(ss, args)
}

// end notes that the open transaction ends with the command just queued.
func (tc *txClient) end() {
	tc.ended = tc.tx
	tc.tx++
}

// afterFlush forgets what no reply can answer any more: the commands of
// the transactions that ended in the batch written. Those of one still
// open (a MULTI after a DISCARD, its EXEC in a later read) stay.
func (tc *txClient) afterFlush() {
	if len(tc.pending) > 0 && tc.pending[0].tx <= tc.ended && tc.ended < tc.tx {
		tc.pending = slices.DeleteFunc(tc.pending, func(p txClientCmd) bool { return p.tx <= tc.ended })
		tc.pendingBytes = 0
		for _, p := range tc.pending {
			tc.pendingBytes += argsLen(p.args)
		}
	}
}

// argsLen is the bytes of a command's arguments.
func argsLen(args [][]byte) int {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	return n
}

// forget drops every queued command (RESET).
func (tc *txClient) forget() {
	tc.pending, tc.pendingBytes = nil, 0
	tc.ended = tc.tx
	tc.tx++
}

// answer is rproxy's answer to one of the CLIENT commands that
// sessionClientCommand says it answers, with its effect on the session
// (outside a transaction, and in EXEC's array).
func (cc *clientCommands) answer(ss *session, cmd resp.Command) []byte {
	args := cmd.Args
	switch string(bytes.ToLower(args[1])) {
	case "id":
		return resp.AppendInt(nil, ss.id)
	case "getname":
		return ss.nameReply()
	case "setname":
		return setNameReply(ss, args[2])
	case "setinfo":
		return setInfoReply(ss, args)
	}
	text, errReply := cc.clientText(ss, cmd)
	if errReply != nil {
		return errReply
	}
	return appendText(nil, ss.proto, text)
}

// clientText is CLIENT INFO's or CLIENT LIST's text, or the error for a
// CLIENT LIST whose options Redis would refuse.
func (cc *clientCommands) clientText(ss *session, cmd resp.Command) (text, errReply []byte) {
	if bytes.EqualFold(cmd.Args[1], []byte("info")) {
		return cc.clientLine(nil, ss, ss, cmd, cc.clock()), nil
	}
	return cc.clientListText(ss, cmd)
}
