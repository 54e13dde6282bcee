package proxy

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// maxLoadedScripts bounds the scripts loadedScripts remembers; past it, it
// starts again (each script is then loaded everywhere once more).
const maxLoadedScripts = 4096

// loadedScriptsFor is how long loadedScripts trusts what it remembers: a
// master's cache can empty without the slot map changing (a restarted
// master, a SCRIPT FLUSH sent by another rproxy node or straight to it),
// and after this each script is loaded everywhere again, once.
const loadedScriptsFor = time.Minute

// loadedScripts remembers the bodies of the scripts that EVAL through rproxy
// has loaded on every master of a cluster. On one Redis an EVAL leaves its
// script in the server's cache, so that a later EVALSHA of it runs and
// SCRIPT EXISTS says 1 (the way go-redis's Script.Run and redis-py's
// register_script go: EVALSHA, NOSCRIPT, EVAL, then EVALSHA). On a
// cluster the EVAL runs on its key's master only, so the first EVAL of
// each script also sends SCRIPT LOAD to every master (replies dropped).
// A new slot map (a failover brings a master whose cache is empty), a
// SCRIPT FLUSH through rproxy, or loadedScriptsFor passing starts it again.
type loadedScripts struct {
	seed    maphash.Seed
	now     func() time.Time
	mu      sync.Mutex
	version uint64
	since   time.Time // when bodies was last emptied
	bodies  map[uint64]struct{}
	// shown: the bodies of the SCRIPT LOADs rproxy sent lately, as MONITOR
	// shows them (monitorRepr), and until when a MONITOR line of one is
	// rproxy's own (ownMonitorCommand).
	shown map[string]time.Time
}

// scriptLoadShownFor is how long after rproxy sends a SCRIPT LOAD its
// MONITOR lines are taken for its own: the time for them to come back.
const scriptLoadShownFor = 5 * time.Second

func newLoadedScripts(now func() time.Time) *loadedScripts {
	return &loadedScripts{seed: maphash.MakeSeed(), now: now, since: now(), bodies: map[uint64]struct{}{}, shown: map[string]time.Time{}}
}

// noteShown notes that rproxy is sending SCRIPT LOAD of body, whose
// MONITOR lines are its own, not a client's.
func (l *loadedScripts) noteShown(body []byte) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.shown) >= maxLoadedScripts {
		for k, until := range l.shown {
			if now.After(until) {
				delete(l.shown, k)
			}
		}
		if len(l.shown) >= maxLoadedScripts {
			clear(l.shown)
		}
	}
	l.shown[string(monitorRepr(nil, body))] = now.Add(scriptLoadShownFor)
}

// sentLately reports whether repr, a script body as MONITOR shows it, was
// sent by rproxy in SCRIPT LOAD lately (noteShown).
func (l *loadedScripts) sentLately(repr []byte) bool {
	l.mu.Lock()
	until, ok := l.shown[string(repr)]
	l.mu.Unlock()
	return ok && !l.now().After(until)
}

// monitorRepr appends s as MONITOR shows an argument: quoted, with
// backslash escapes for quotes, backslashes and control characters
// (Redis's sdscatrepr).
func monitorRepr(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch c {
		case '\\', '"':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\a':
			dst = append(dst, '\\', 'a')
		case '\b':
			dst = append(dst, '\\', 'b')
		default:
			if c >= 0x20 && c < 0x7f {
				dst = append(dst, c)
			} else {
				dst = append(dst, '\\', 'x', hex[c>>4], hex[c&0xf])
			}
		}
	}
	return append(dst, '"')
}

// first reports whether body is not yet loaded everywhere under slot map
// version, and notes it as loaded.
func (l *loadedScripts) first(body []byte, version uint64) bool {
	h := maphash.Bytes(l.seed, body)
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); version != l.version || len(l.bodies) >= maxLoadedScripts || now.Sub(l.since) >= loadedScriptsFor {
		clear(l.bodies)
		l.version, l.since = version, now
	}
	if _, ok := l.bodies[h]; ok {
		return false
	}
	l.bodies[h] = struct{}{}
	return true
}

// forget is for SCRIPT FLUSH: no script is loaded anywhere.
func (l *loadedScripts) forget() {
	l.mu.Lock()
	clear(l.bodies)
	l.mu.Unlock()
}

// loadEverywhere queues, before an EVAL of body, SCRIPT LOAD of it on every
// master, the first time that script goes through (loadedScripts).
func (r *routing) loadEverywhere(ss *session, body []byte) {
	shards := ss.pools[ss.proto].Shards()
	if len(shards) < 2 || !r.scripts.first(body, r.cluster.MapVersion()) {
		return
	}
	load := resp.AppendCommand(nil, []byte("SCRIPT"), []byte("LOAD"), body)
	r.scripts.noteShown(body) // MONITOR leaves it out: no client sent it
	for _, slot := range shards {
		ss.batch.AddSlot(load, slot)
		ss.order = append(ss.order, replySource{from: fromDiscard})
	}
}
