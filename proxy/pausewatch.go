package proxy

import (
	"bytes"
	"sync/atomic"
	"time"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// pauseWatch follows the CLIENT PAUSE and CLIENT UNPAUSE that clients send
// through rproxy. While Redis pauses writes, it holds a connection at its
// first write (or command, in mode ALL) and reads nothing more from it, so
// on a shared connection every other client's commands behind the write
// waited for the whole pause, where on Redis only the writer waits (Redis's
// Tcl suite in cluster mode, unit/pause: INFO queued behind a paused SET).
// During a pause rproxy knows of, such a command goes on a connection of
// its session's own, as a blocking command does (dispatch), and waits
// there as long as Redis holds it; one queued in a transaction from its
// EXEC. A pause sent straight to Redis, or by another rproxy node, is not
// known here: upstream.stall_divert sends the
// commands after it around the stalled connection, and upstream.timeout
// waits while Redis holds the write (upstream's waitProbe).
type pauseWatch struct {
	until atomic.Int64 // unix nanoseconds the pause ends at; 0: none known
	all   atomic.Bool  // mode ALL: every command is held, not only writes
	clock func() time.Time
}

func (p *pauseWatch) command(ss *session, c *call) bool {
	info, args := c.info, c.cmd.Args
	if info == nil {
		return false
	}
	switch {
	case info.Handling == command.Client && len(args) >= 2:
		if ss.inTransaction() {
			// Queued: it runs at EXEC, or never after DISCARD. Copied:
			// args point into the read buffer, which the client's next
			// read (a client that waits for QUEUED) writes over.
			ss.queuedPause = make([][]byte, len(args))
			for i, a := range args {
				ss.queuedPause[i] = bytes.Clone(a)
			}
		} else {
			p.note(args)
		}
		return false
	case info.Name == "exec" && ss.queuedPause != nil:
		p.note(ss.queuedPause)
		ss.queuedPause = nil
	case info.Name == "discard" || info.Name == "multi":
		ss.queuedPause = nil
	}
	if until := p.until.Load(); until != 0 && p.clock().UnixNano() < until {
		c.heldByPause = p.all.Load() || info.Has(command.Write) || mayReplicate[info.Name]
	}
	return false
}

func (*pauseWatch) replies(*session) {}

// active reports whether a pause rproxy knows of is in force.
func (p *pauseWatch) active() bool {
	until := p.until.Load()
	return until != 0 && p.clock().UnixNano() < until
}

// mayReplicate are the commands that are not writes but that Redis holds
// during a write pause, as it may propagate them (MAY_REPLICATE in Redis's
// command table, which COMMAND does not report in Redis 7.0).
var mayReplicate = map[string]bool{
	"eval": true, "evalsha": true, "fcall": true, "pfcount": true, "publish": true, "spublish": true,
}

// note records a CLIENT PAUSE timeout [WRITE|ALL] or a CLIENT UNPAUSE. A
// pause Redis refuses (a bad timeout or mode) is recorded too, at worst
// taking writes off the shared connections until its time passes.
func (p *pauseWatch) note(args [][]byte) {
	switch {
	case bytes.EqualFold(args[1], []byte("unpause")):
		p.until.Store(0)
	case bytes.EqualFold(args[1], []byte("pause")) && len(args) >= 3:
		ms, ok := resp.ParseInt(args[2])
		if !ok || ms < 0 {
			return
		}
		p.all.Store(len(args) < 4 || !bytes.EqualFold(args[3], []byte("write")))
		p.until.Store(p.clock().Add(time.Duration(min(ms, int64(24*time.Hour/time.Millisecond))) * time.Millisecond).UnixNano())
	}
}
