package proxy

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// errorMarker names the command a stream-mode session sends Redis in place
// of one rproxy answers (a policy refusal, Redis's error for arguments
// rproxy checks, CLIENT ID and the like). Redis rejects it as unknown
// before anything else: also in RESP2's subscribed mode, where a script
// would not run, and inside MULTI when it is queued, which makes the
// transaction's EXEC fail with EXECABORT, the abort abortTransaction gets
// outside stream mode. The session's streamRelay shows the client rproxy's
// answer in place of Redis's "unknown command" error.
const errorMarker = "rproxy-error"

// errorCmd is the command sent, in stream mode, for a reply made here.
var errorCmd = resp.AppendCommandString(nil, errorMarker)

var errorMarkerBytes = []byte(errorMarker)

// clientErrorCmd is errorCmd for a connection on which Redis holds a
// CLIENT CACHING flag: Redis drops the flag after any command but a CLIENT
// one, an unknown command included, and the client's next read would go
// untracked where it asked for tracking. CLIENT ID with an argument is
// rejected for its arity, before anything else and before any ACL check,
// as an unknown command is, and keeps the flag.
var clientErrorCmd = resp.AppendCommandString(nil, "CLIENT", "ID", errorMarker)

// clientErrorAnswers are Redis's answers to clientErrorCmd: 7's arity
// error, and 6's, where CLIENT checks its own arguments.
var clientErrorAnswers = [][]byte{
	[]byte("-ERR wrong number of arguments for 'client|id' command\r\n"),
	[]byte("-ERR Unknown subcommand or wrong number of arguments for 'ID'. Try CLIENT HELP.\r\n"),
}

// answersErrorCmd reports whether reply, a complete top-level error, is
// Redis's answer to errorCmd or to clientErrorCmd.
func answersErrorCmd(reply []byte) bool {
	if rejectsUnknown(reply, errorMarkerBytes) {
		return true
	}
	for _, a := range clientErrorAnswers {
		if bytes.Equal(reply, a) {
			return true
		}
	}
	return false
}

// maxHeldError bounds the top-level error a streamRelay holds back while
// it waits for the end of the line: Redis's answer to errorCmd is far
// shorter, so a longer one is passed on as it comes.
const maxHeldError = 512

// errStreamReset ends a stream's copy at Redis's answer to the end marker
// sent after the client's RESET (endAfterReset): the session leaves stream
// mode, and Redis sends nothing more on the connection.
var errStreamReset = fmt.Errorf("stream ended by RESET: %w", upstream.ErrStreamEnd)

// resetReply is Redis's answer to RESET.
const resetReply = "+RESET\r\n"

// maxHeldRewrite bounds the reply a streamRelay holds back to rewrite (a
// HELLO's, a CLIENT TRACKINGINFO's): a longer one, a HELLO with many
// modules say, is passed on as Redis sent it.
const maxHeldRewrite = 64 << 10

// maxHeldMonitor bounds the MONITOR line a streamRelay holds back to see
// whether it is not to be shown (hideLine): rproxy's own commands, of which
// the SCRIPT LOAD before a script's first EVAL carries the script's text,
// and the copies of a command sent to every master. A longer line is
// passed on as it comes.
const maxHeldMonitor = 64 << 10

// maxHeldProbe bounds the array or bulk string a streamRelay holds back
// while a modeProbe waits: longer than the probe's answer in either mode.
const maxHeldProbe = 128

// streamRelay is what a stream-mode session's copy goroutine writes Redis's
// bytes to. It passes them on to the client unchanged, but for Redis's
// answers to errorCmd, each replaced by what it stands for, in the order
// they were queued: a reply made here (substitute), or nothing, with the
// reply after it rewritten (rewriteNext: a HELLO's id, a TRACKINGINFO's
// redirect, in rproxy's ids).
// It drops the answer to a modeProbe, ends the copy at the answer to the
// end marker sent after a RESET, and on a cluster upstream (hideRedirects)
// replaces a MOVED or ASK with an error saying why, and, once the session
// has sent an SSUBSCRIBE, shows shard channel confirmations with the
// session's count over every master (shards, streamshard.go), finds a
// transaction's EXEC reply to merge with the other masters' (streamTx)
// and drops the flush invalidations beyond Redis's one of a session's
// FLUSHALL sent to every master (dropNulls, streamfanout.go). It frames the stream's
// top-level replies to find them; if the stream cannot be framed, it stops
// looking and passes everything on (the client then sees Redis's own
// replies).
type streamRelay struct {
	dst           io.Writer
	hideRedirects bool // a cluster upstream: clients see one node (facade.go)
	// noteMoved, on a cluster upstream, learns a slot's master from a
	// MOVED the pin or a branch sent, and that a slot is migrating from an
	// ASK (set before the copy starts): the session's later commands of
	// the slot go there, or run on the shared connections (streamasked.go).
	noteMoved func(reply []byte)

	mu      sync.Mutex
	pending []relayAnswer // answers to errorCmds sent whose replies have not come yet

	// shards counts the session's shard channels on each master, to show
	// them in every confirmation (streamshard.go).
	shards shardCounts

	probing atomic.Pointer[modeProbe] // a modeProbe waiting for its answer
	ending  atomic.Pointer[streamEnd] // an end marker sent after a RESET

	// In MONITOR mode, the lines hideLine reports are not shown: rproxy's
	// own housekeeping and, on a cluster, the other masters' copies of a
	// command sent to every master (monitorLines). hideLine is set before
	// the copy starts.
	monitoring atomic.Bool
	hideLine   func(line []byte) bool

	// The copy goroutine's own state.
	fr      resp.Framer
	inReply bool                // the framer is inside a reply
	hold    holdMode            // what is done with the current reply
	held    []byte              // the current reply so far, while held
	rewrite func([]byte) []byte // non-nil: what the next reply is passed through
	join    bool                // rewrite is a joinInStream's
	hiding  *shardHide          // non-nil: between the answers of a relayAnswer's hide and unhide
	// tx, while a transaction on the pin is followed: txReplies counts
	// the whole replies (pushes aside) from its MULTI's on.
	tx        *streamTx
	txReplies int64
	// dropNulls counts the pin's flush invalidations to come that are not
	// shown (streamBranch.dropNulls).
	dropNulls atomic.Int32
	// redirect is the session's CLIENT TRACKING REDIRECT target, in
	// rproxy's ids (session.noteRedirect): a tracking-redir-broken push
	// names it, not the id of its connection to Redis.
	redirect atomic.Int64
	stash    []byte // a +RESET held while ending: the RESET's, if the end marker's answer follows
	ended    bool   // the end marker's answer has come
	broken   bool   // framing failed: everything is passed on
	// frames is the client's write lock, shared with the session's
	// tracking branches (streambranch.go), which write whole pushes; the
	// copy holds it (framesHeld) while it is inside a reply.
	frames     sync.Mutex
	framesHeld bool
}

// relayAnswer is what Redis's answer to one errorCmd is replaced by.
type relayAnswer struct {
	reply   []byte              // shown in its place (nil: nothing)
	rewrite func([]byte) []byte // non-nil: the reply after it is passed through this
	join    bool                // rewrite sees that reply whatever its length, an error too (joinInStream)
	later   *branchReply        // non-nil: shown in its place once it has come (streambranch.go)
	// hide starts, and unhide ends, the replies not shown to the client:
	// those of the SSUBSCRIBEs rproxy sends between the two (shardmove.go).
	hide   *shardHide
	unhide bool
	// tx: the reply after it starts a transaction on the pin, whose EXEC's
	// reply the relay finds by counting (streamTx, streamfanout.go). then:
	// a later reply (its pushes aside) is passed through it.
	tx   *streamTx
	then func([]byte) []byte
	// made: shown in its place, made when its turn comes (after the
	// replies before it: settledInfo).
	made func() []byte
}

// shardHide is the SSUBSCRIBEs rproxy sent on the pin to subscribe again
// channels whose slot moved there: their confirmations are counted, not
// shown, and an error (a MOVED: rproxy's slot map was behind) has them
// tried again (retry).
type shardHide struct {
	failed bool
	retry  func()
}

// holdMode says whether a reply is held back until complete, and why.
type holdMode uint8

const (
	holdNone    holdMode = iota // passed on as it comes
	holdError                   // an error: errorCmd's answer?
	holdRewrite                 // the reply rewrite is for
	holdProbe                   // an array or bulk string: a modeProbe's answer?
	holdStatus                  // a status while ending: the RESET's +RESET?
	holdMonitor                 // a status in MONITOR mode: one of rproxy's own commands?
	holdShard                   // an array or push: a shard channel's confirmation, to count?
	holdTx                      // EXEC's reply of a followed transaction (tx), whole
	holdNull                    // a push: a flush invalidation not to show (dropNulls)?
	holdRedir                   // a push: tracking-redir-broken, its id to rewrite?
)

// modeProbe asks Redis whether it is in RESP2's subscribed mode: the
// session sends PING with an unguessable marker, which Redis answers as
// ["pong", marker] in that mode and as the bulk string marker outside it.
// The relay drops the answer and sends the mode on result.
type modeProbe struct {
	marker                   []byte
	subscribed, unsubscribed []byte    // the answer in either mode
	result                   chan bool // buffered: true if subscribed
}

// streamEnd is the end marker sent after the client's RESET: a command
// named "rproxy-end-" and an unguessable text, which Redis rejects as
// unknown before anything else (also on the connection RESET logged out,
// and whatever CLIENT REPLY said before the RESET). The copy ends at that
// rejection (errStreamReset); a script's status reply could pass for
// +RESET, the rejection cannot be forged.
type streamEnd struct {
	name []byte
	// reset, set before the copy ends: the RESET's +RESET, when it came
	// right before the marker's answer (nil: Redis refused the RESET). It
	// is held back for the session to write once it has left stream
	// mode, so that a client that has read it sees the session reset.
	reset []byte
}

func newStreamEnd(name []byte) *streamEnd { return &streamEnd{name: name} }

// command is the marker command.
func (e *streamEnd) command() []byte { return resp.AppendCommand(nil, e.name) }

// answers reports whether reply, a complete top-level error, is Redis's
// rejection of the marker.
func (e *streamEnd) answers(reply []byte) bool { return rejectsUnknown(reply, e.name) }

// rejectsUnknown reports whether reply, a complete top-level error, is
// Redis's rejection of the command name as unknown (Redis 7 quotes the
// name, 6 backquotes it).
func rejectsUnknown(reply, name []byte) bool {
	rest, ok := bytes.CutPrefix(reply, []byte("-ERR unknown command "))
	return ok && len(rest) >= len(name)+2 && (rest[0] == '\'' || rest[0] == '`') &&
		bytes.HasPrefix(rest[1:], name) && rest[1+len(name)] == rest[0]
}

func newModeProbe(marker []byte) *modeProbe {
	bulk := resp.AppendBulk(nil, marker)
	return &modeProbe{
		marker:       marker,
		subscribed:   append([]byte("*2\r\n$4\r\npong\r\n"), bulk...),
		unsubscribed: bulk,
		result:       make(chan bool, 1),
	}
}

// command is the PING that asks.
func (p *modeProbe) command() []byte {
	return resp.AppendCommand(nil, []byte("PING"), p.marker)
}

func newStreamRelay(dst io.Writer, hideRedirects bool) *streamRelay {
	return &streamRelay{dst: dst, hideRedirects: hideRedirects}
}

// substitute queues the reply (an error, or an answer rproxy makes) that
// Redis's answer to the next errorCmd sent is replaced by. It must be
// called before the command is sent.
func (r *streamRelay) substitute(reply []byte) {
	r.queue(relayAnswer{reply: bytes.Clone(reply)})
}

// rewriteNext queues, for the next errorCmd sent, that its answer is
// dropped and the reply after it (pushes aside) is passed through f, which
// gets it complete. The command f is for must be sent right after. An
// error reply is not passed through f.
func (r *streamRelay) rewriteNext(f func([]byte) []byte) {
	r.queue(relayAnswer{rewrite: f})
}

func (r *streamRelay) queue(a relayAnswer) {
	r.mu.Lock()
	r.pending = append(r.pending, a)
	r.mu.Unlock()
}

// probe watches for p's answer, which the relay drops; its mode is sent
// on p.result. It must be called before p's command is sent, and only one
// probe may wait at a time.
func (r *streamRelay) probe(p *modeProbe) { r.probing.Store(p) }

// endAfterReset tells the relay that a RESET and then e's command are
// about to be sent: the copy ends at e's answer, which is dropped.
func (r *streamRelay) endAfterReset(e *streamEnd) { r.ending.Store(e) }

// Write passes p on. A reply that may be replaced or changed (an error, a
// HELLO's) is held back until complete.
func (r *streamRelay) Write(p []byte) (int, error) {
	n, err := r.copyOut(p)
	if err != nil || r.broken || !r.inReply {
		r.releaseFrames()
	}
	return n, err
}

func (r *streamRelay) copyOut(p []byte) (int, error) {
	if r.broken {
		return len(p), r.write(p)
	}
	out := 0 // p[:out] is written or held
	for i := 0; i < len(p); {
		starts := !r.inReply
		k, done, err := r.fr.Next(p[i:])
		if err != nil {
			r.broken = true
			if err := r.write(r.stash, r.held, p[out:]); err != nil {
				return 0, err
			}
			r.held = r.held[:0]
			return len(p), nil
		}
		r.inReply = !done
		kind := r.fr.Kind()

		if starts && r.stash != nil && kind != '-' {
			// Not the end marker's answer: the +RESET held was a script's.
			if err := r.write(p[out:i], r.stash); err != nil {
				return 0, err
			}
			out, r.stash = i, nil
		}
		if starts {
			switch {
			case r.tx != nil && kind != '>' && r.txReplies+1 == r.tx.execAt.Load():
				r.hold = holdTx
			case r.rewrite != nil && kind != '>': // a push may come first
				r.hold = holdRewrite
			case kind == '-':
				r.hold = holdError
			case (kind == '*' || kind == '$') && r.probing.Load() != nil:
				r.hold = holdProbe
			case kind == '+' && r.ending.Load() != nil:
				r.hold = holdStatus
			case kind == '+' && r.hideLine != nil && r.monitoring.Load():
				r.hold = holdMonitor
			case (kind == '*' || kind == '>') && r.shards.on.Load() && mayBeShardConfirmation(p[i:i+k]):
				r.hold = holdShard
			case kind == '>' && r.dropNulls.Load() > 0 && mayBeNullInvalidation(p[i:i+k]):
				r.hold = holdNull
			case kind == '>' && r.redirect.Load() > 0 && mayBeRedirBroken(p[i:i+k]):
				r.hold = holdRedir
			default:
				r.hold = holdNone
			}
		}
		if done && r.tx != nil && kind != '>' {
			r.txReplies++ // after the hold is chosen: EXEC's is found at its start
		}
		if r.hold != holdNone {
			if err := r.write(p[out:i]); err != nil {
				return 0, err
			}
			r.held, out = append(r.held, p[i:i+k]...), i+k
			switch {
			case done:
				stash := r.stash
				r.stash = nil
				reply := r.finish() // may hold a +RESET in r.stash, or end the copy
				if r.ended {
					r.ending.Load().reset = stash
				} else {
					err = r.write(stash, reply)
				}
				r.held = r.held[:0]
			case r.hold == holdProbe && len(r.held) > maxHeldProbe && r.shards.on.Load() && mayBeShardConfirmation(r.held):
				r.hold = holdShard // longer than the probe's answer, and may be a confirmation to count
			case r.hold == holdError && len(r.held) > maxHeldError,
				r.hold == holdRewrite && len(r.held) > maxHeldRewrite && !r.join,
				r.hold == holdProbe && len(r.held) > maxHeldProbe,
				r.hold == holdStatus && len(r.held) > maxHeldError,
				r.hold == holdMonitor && len(r.held) > maxHeldMonitor,
				r.hold == holdShard && (len(r.held) > maxHeldRewrite || !mayBeShardConfirmation(r.held)),
				r.hold == holdNull && !mayBeNullInvalidation(r.held),
				r.hold == holdRedir && (len(r.held) > maxHeldError || !mayBeRedirBroken(r.held)):
				if r.hold == holdRewrite {
					r.rewrite = nil
				}
				r.hold = holdNone // the rest of the reply is passed on as it comes
				err = r.write(r.stash, r.held)
				r.held, r.stash = r.held[:0], nil
			}
			if err != nil {
				return 0, err
			}
			if r.ended {
				// Nothing follows: the RESET ended the subscriptions,
				// tracking and MONITOR, and nothing was sent after the marker.
				return len(p), errStreamReset
			}
		}
		i += k
	}
	if err := r.write(p[out:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// finish returns what the client gets for the held reply, now complete.
func (r *streamRelay) finish() []byte {
	if len(r.held) == 0 {
		return nil // a reply is at least a byte; never in the copy goroutine's path
	}
	if r.hold == holdNull {
		if bytes.Equal(r.held, nullInvalidation) && r.dropNulls.Load() > 0 {
			r.dropNulls.Add(-1)
			return nil
		}
		return r.held
	}
	if r.hold == holdRedir {
		return r.redirBroken(r.held)
	}
	if r.hold == holdTx {
		t := r.tx
		r.tx = nil
		if t.f == nil {
			return r.held
		}
		return t.f(r.held)
	}
	if r.hold == holdProbe {
		p := r.probing.Load()
		if p == nil {
			return r.held
		}
		subscribed := bytes.Equal(r.held, p.subscribed)
		if !subscribed && !bytes.Equal(r.held, p.unsubscribed) {
			return r.shardCount(r.held)
		}
		r.probing.Store(nil)
		p.result <- subscribed
		return nil
	}
	if r.hold == holdRewrite {
		f, join := r.rewrite, r.join
		r.rewrite, r.join = nil, false
		if (r.held[0] == '-' || r.held[0] == '!') && !join {
			return r.held
		}
		return f(r.held)
	}
	if r.hold == holdStatus {
		if string(r.held) == resetReply {
			r.stash = bytes.Clone(r.held) // until the reply after it shows whose it is
			return nil
		}
		if r.hideLine != nil && r.monitoring.Load() && r.hideLine(r.held) {
			return nil // a MONITOR line of rproxy's own while the RESET is under way
		}
		return r.held
	}
	if r.hold == holdMonitor && r.hideLine(r.held) {
		return nil
	}
	if r.hold == holdShard {
		return r.shardCount(r.held)
	}
	if e := r.ending.Load(); e != nil && e.answers(r.held) {
		r.ended = true
		return nil
	}
	a, ok := r.answerTo(r.held)
	if !ok && r.hiding != nil && r.held[0] == '-' {
		r.hiding.failed = true // the hidden SSUBSCRIBE's error
		return nil
	}
	switch {
	case ok && a.hide != nil:
		r.hiding = a.hide
		return nil
	case ok && a.unhide:
		if h := r.hiding; h != nil && h.failed {
			h.retry()
		}
		r.hiding = nil
		return nil
	}
	if !ok {
		if slot, redirect := upstream.RedirectSlot(r.held); redirect && r.hideRedirects {
			r.movedSeen(r.held)
			return streamRedirectError(slot)
		}
		return r.held
	}
	if a.later != nil {
		// Only whole replies have been written: a branch's push may be
		// written while its reply is waited for. Once it has come, the
		// client's write lock is held from before it is marked shown, so
		// that a push the branch sends after it cannot come first.
		r.releaseFrames()
		a.later.followInTurn()
		r.frames.Lock()
		r.framesHeld = true
		if a.later.shard != "" {
			reply, after := a.later.showApart()
			return append(r.shards.rewrite(a.later.shard, reply), after...)
		}
		if a.then != nil {
			reply, after := a.later.showApart()
			return append(slices.Clip(a.then(reply)), after...)
		}
		return a.later.show()
	}
	r.rewrite, r.join = a.rewrite, a.join
	if a.tx != nil {
		r.tx, r.txReplies = a.tx, 0
	}
	if a.made != nil {
		return a.made()
	}
	return a.reply
}

// nullInvalidation is the RESP3 push Redis sends a tracking client when a
// FLUSHALL or FLUSHDB invalidates everything.
var nullInvalidation = []byte(">2\r\n$10\r\ninvalidate\r\n_\r\n")

// mayBeNullInvalidation reports whether b, the start of a frame, may be
// nullInvalidation.
func mayBeNullInvalidation(b []byte) bool {
	return bytes.HasPrefix(b, nullInvalidation) || bytes.HasPrefix(nullInvalidation, b)
}

// redirBrokenPrefix starts the push Redis sends a RESP3 tracking client
// whose REDIRECT target has gone, before the target's id.
var redirBrokenPrefix = []byte(">2\r\n$21\r\ntracking-redir-broken\r\n:")

// mayBeRedirBroken reports whether b, the start of a frame, may be a
// tracking-redir-broken push.
func mayBeRedirBroken(b []byte) bool {
	return bytes.HasPrefix(b, redirBrokenPrefix) || bytes.HasPrefix(redirBrokenPrefix, b)
}

// redirBroken returns frame, a whole push, with the id of a
// tracking-redir-broken one the session's redirect, in rproxy's ids.
func (r *streamRelay) redirBroken(frame []byte) []byte {
	id := r.redirect.Load()
	if id <= 0 || !bytes.HasPrefix(frame, redirBrokenPrefix) {
		return frame
	}
	out := strconv.AppendInt(slices.Clip(redirBrokenPrefix), id, 10)
	return append(out, '\r', '\n')
}

// movedSeen passes reply, a redirect, to noteMoved.
func (r *streamRelay) movedSeen(reply []byte) {
	if r.noteMoved != nil {
		r.noteMoved(reply)
	}
}

// streamRedirectError is what a stream-mode client of a cluster upstream
// gets for a command whose key (in slot) is on another master than its
// connection's: never the MOVED, which names a node clients do not see
// (the facade). Not TRYAGAIN, as outside stream mode (upstream.HideRedirects):
// on this connection a retry never reaches the key's master.
func streamRedirectError(slot string) []byte {
	return resp.AppendError(nil, "ERR rproxy: slot "+slot+" is on another master than this connection's: in pub/sub, tracking or MONITOR mode a connection uses one master of the cluster; run the command on another connection")
}

// answerTo returns what reply, a complete top-level error, stands for, if
// it is Redis's rejection of errorCmd (Redis 6 quotes the name with
// backquotes, 7 with quotes) or of clientErrorCmd and an answer waits.
func (r *streamRelay) answerTo(reply []byte) (relayAnswer, bool) {
	if !answersErrorCmd(reply) {
		return relayAnswer{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return relayAnswer{}, false // the client sent the marker itself
	}
	a := r.pending[0]
	r.pending[0] = relayAnswer{}
	r.pending = r.pending[1:]
	return a, true
}

// shardCount returns frame, a whole reply of the pin's, with the
// session's shard channel count if it is a confirmation (streamshard.go).
func (r *streamRelay) shardCount(frame []byte) []byte {
	if !r.shards.on.Load() {
		return frame
	}
	if r.hiding != nil && bytes.HasPrefix(frame[1:], shardConfirmationPrefixes[0][1:]) {
		if _, n, ok := shardConfirmation(frame); ok {
			r.shards.note(r.shards.pinAddr, n) // a hidden SSUBSCRIBE's (shardmove.go)
			return nil
		}
	}
	if r.shards.takeUnasked(r.shards.pinAddr, frame) {
		return nil // the channel's slot moved: subscribed again where it is (shardmove.go)
	}
	return r.shards.rewriteOne(r.shards.pinAddr, frame)
}

// write passes on bufs, skipping empty ones. It takes the client's write
// lock (frames) for the branches' pushes, held until the copy is between
// replies (Write).
func (r *streamRelay) write(bufs ...[]byte) error {
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if !r.framesHeld {
			r.frames.Lock()
			r.framesHeld = true
		}
		if _, err := r.dst.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// releaseFrames lets a branch write: the copy is between replies.
func (r *streamRelay) releaseFrames() {
	if r.framesHeld {
		r.framesHeld = false
		r.frames.Unlock()
	}
}

// writeFrame writes a branch's whole push between the copy's replies.
func (r *streamRelay) writeFrame(b []byte) error {
	r.frames.Lock()
	defer r.frames.Unlock()
	_, err := r.dst.Write(b)
	return err
}

// monitorLineParts splits a MONITOR line (+<time> [<db> <addr>] <command>)
// into the client's address and the command as MONITOR quotes it.
func monitorLineParts(line []byte) (addr, cmd []byte, ok bool) {
	open := bytes.IndexByte(line, '[')
	end := bytes.Index(line, []byte("] "))
	if open < 0 || end < open || !bytes.HasSuffix(line, []byte("\r\n")) {
		return nil, nil, false
	}
	db, addr, ok := bytes.Cut(line[open+1:end], []byte(" "))
	if !ok || len(db) == 0 {
		return nil, nil, false
	}
	return addr, line[end+2 : len(line)-2], true
}

// ownMonitorCommand reports whether a MONITOR line's address and command
// (monitorLineParts) show one of rproxy's own housekeeping commands,
// which no client sent and a MONITOR of Redis without rproxy would not
// show: the local tier's PINGs on its tracking connections (its lag
// probe, four a second while the tier holds something, and the barrier
// after a write whose keys rproxy cannot see), and on a cluster the slot
// map's CLUSTER SHARDS or SLOTS (a client's are answered by rproxy), and
// the SCRIPT LOAD it sends every master before a script's first EVAL. The
// tier's fills, reads of what clients asked for, still show.
func (s *Server) ownMonitorCommand(addr, cmd []byte) bool {
	if body, ok := bytes.CutPrefix(cmd, []byte(`"SCRIPT" "LOAD" `)); ok {
		// The SCRIPT LOAD rproxy sends every master before a script's
		// first EVAL (loadEverywhere).
		return s.routing != nil && s.routing.cluster.HasConn(string(addr)) && s.routing.scripts.sentLately(body)
	}
	switch string(cmd) {
	case `"PING"`:
		return s.ownCommand(string(addr), pingArgs)
	case `"CLUSTER" "SHARDS"`:
		return s.ownCommand(string(addr), clusterShardsArgs)
	case `"CLUSTER" "SLOTS"`:
		return s.ownCommand(string(addr), clusterSlotsArgs)
	}
	return false
}

var (
	pingArgs          = [][]byte{[]byte("PING")}
	clusterShardsArgs = [][]byte{[]byte("CLUSTER"), []byte("SHARDS")}
	clusterSlotsArgs  = [][]byte{[]byte("CLUSTER"), []byte("SLOTS")}
)

// ownCommand reports whether args, which a master logged (MONITOR,
// SLOWLOG) as sent from addr, is one of rproxy's own housekeeping commands
// (ownMonitorCommand says which), spelled as rproxy sends them.
func (s *Server) ownCommand(addr string, args [][]byte) bool {
	owns := func(addr string) bool { return s.tiering != nil && s.tiering.engine.OwnsConn(addr) }
	switch {
	case len(args) == 1 && string(args[0]) == "PING":
		return owns(addr)
	case len(args) == 2 && string(args[0]) == "CLUSTER" && (string(args[1]) == "SHARDS" || string(args[1]) == "SLOTS"):
		return s.routing != nil && (s.routing.cluster.HasConn(addr) || owns(addr))
	}
	return false
}
