package proxy

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/rproxy/rproxy/resp"
)

// errorMarker names the command a stream-mode session sends Redis in place
// of one rproxy answers with an error (a policy refusal, Redis's error for
// arguments rproxy checks). Redis rejects it as unknown before anything
// else: also in RESP2's subscribed mode, where a script would not run, and
// inside MULTI when it is queued, which makes the transaction's EXEC fail
// with EXECABORT, the abort abortTransaction gets outside stream mode. The
// session's streamRelay shows the client rproxy's error in place of
// Redis's "unknown command" one.
const errorMarker = "rproxy-error"

// errorCmd is the command sent for an error made here, in stream mode.
var errorCmd = resp.AppendCommandString(nil, errorMarker)

// maxHeldError bounds the top-level error a streamRelay holds back while
// it waits for the end of the line: Redis's answer to errorCmd is far
// shorter, so a longer one is passed on as it comes.
const maxHeldError = 512

// errStreamReset ends a stream's copy once Redis's answer to the client's
// RESET has been passed on: the session leaves stream mode.
var errStreamReset = errors.New("stream ended by RESET")

// resetReply is Redis's answer to RESET.
const resetReply = "+RESET\r\n"

// streamRelay is what a stream-mode session's copy goroutine writes Redis's
// bytes to. It passes them on to the client unchanged, but for Redis's
// answers to errorCmd, each replaced by the error it stands for, in the
// order they were queued (substitute), and it ends the copy after the answer
// to a RESET it was told of (endAtReset). It frames the stream's top-level
// replies to find them; if the stream cannot be framed, it stops looking
// and passes everything on (the client then sees Redis's error).
type streamRelay struct {
	dst io.Writer

	mu      sync.Mutex
	pending [][]byte // errors sent as errorCmd whose answers have not come yet

	resetSent atomic.Bool // a RESET was sent: the copy ends after its +RESET

	// The copy goroutine's own state.
	fr      resp.Framer
	held    []byte // the start of a top-level error, held until its end
	status  []byte // the start of a top-level status reply (up to len(resetReply)+1 bytes), while resetSent
	passing bool   // the current reply is passed on as it comes
	broken  bool   // framing failed: everything is passed on
}

func newStreamRelay(dst io.Writer) *streamRelay {
	return &streamRelay{dst: dst}
}

// substitute queues the error reply that Redis's answer to the next
// errorCmd sent is replaced by. It must be called before the command is
// sent.
func (r *streamRelay) substitute(errReply []byte) {
	r.mu.Lock()
	r.pending = append(r.pending, bytes.Clone(errReply))
	r.mu.Unlock()
}

// endAtReset tells the relay that a RESET is about to be sent: the copy
// ends (with errStreamReset) once Redis's +RESET has been passed on.
func (r *streamRelay) endAtReset() { r.resetSent.Store(true) }

// Write passes p on. A top-level error is looked at once complete: one
// that ends in a later write is held back until then.
func (r *streamRelay) Write(p []byte) (int, error) {
	if r.broken {
		return r.dst.Write(p)
	}
	out := 0 // p[:out] is written or held
	for i := 0; i < len(p); {
		k, done, err := r.fr.Next(p[i:])
		if err != nil {
			r.broken = true
			if err := r.flushHeld(); err != nil {
				return 0, err
			}
			break
		}
		if r.fr.Kind() == '+' && r.resetSent.Load() {
			if len(r.status) <= len(resetReply) {
				r.status = append(r.status, p[i:i+min(k, len(resetReply)+1-len(r.status))]...)
			}
			if done {
				isReset := string(r.status) == resetReply
				r.status = r.status[:0]
				if isReset {
					// Nothing follows: the RESET ended the subscriptions,
					// tracking and MONITOR, and nothing was sent after it.
					if err := r.write(p[out : i+k]); err != nil {
						return 0, err
					}
					return len(p), errStreamReset
				}
			}
		}
		if r.fr.Kind() == '-' && !r.passing {
			switch {
			case done && len(r.held) == 0: // the whole error is in p
				if mine := r.answerTo(p[i : i+k]); mine != nil {
					if err := r.write(p[out:i], mine); err != nil {
						return 0, err
					}
					out = i + k
				}
			case done: // the end of a held error (so i == 0)
				r.held = append(r.held, p[:k]...)
				reply := r.held
				if mine := r.answerTo(reply); mine != nil {
					reply = mine
				}
				if err := r.write(reply); err != nil {
					return 0, err
				}
				r.held, out = r.held[:0], k
			default: // p ends inside the error
				if err := r.write(p[out:i]); err != nil {
					return 0, err
				}
				r.held, out = append(r.held, p[i:]...), len(p)
				if len(r.held) > maxHeldError {
					r.passing = true
					if err := r.flushHeld(); err != nil {
						return 0, err
					}
				}
			}
		}
		if done {
			r.passing = false
		}
		i += k
	}
	if err := r.write(p[out:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// answerTo returns the error that reply, a complete top-level error, stands
// for: nil unless it is Redis's rejection of errorCmd (Redis 6 quotes the
// name with backquotes, 7 with quotes) and an error waits.
func (r *streamRelay) answerTo(reply []byte) []byte {
	rest, ok := bytes.CutPrefix(reply, []byte("-ERR unknown command "))
	if !ok || len(rest) < len(errorMarker)+2 || (rest[0] != '\'' && rest[0] != '`') ||
		!bytes.HasPrefix(rest[1:], []byte(errorMarker)) || rest[1+len(errorMarker)] != rest[0] {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return nil // the client sent the marker itself
	}
	mine := r.pending[0]
	r.pending[0] = nil
	r.pending = r.pending[1:]
	return mine
}

func (r *streamRelay) flushHeld() error {
	err := r.write(r.held)
	r.held = r.held[:0]
	return err
}

// write passes on bufs, skipping empty ones.
func (r *streamRelay) write(bufs ...[]byte) error {
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if _, err := r.dst.Write(b); err != nil {
			return err
		}
	}
	return nil
}
