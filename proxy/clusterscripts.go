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
}

func newLoadedScripts(now func() time.Time) *loadedScripts {
	return &loadedScripts{seed: maphash.MakeSeed(), now: now, since: now(), bodies: map[uint64]struct{}{}}
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
	for _, slot := range shards {
		ss.batch.AddSlot(load, slot)
		ss.order = append(ss.order, replySource{from: fromDiscard})
	}
}
