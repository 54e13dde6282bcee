package proxy

import (
	"hash/maphash"
	"sync"

	"github.com/rproxy/rproxy/resp"
)

// maxLoadedScripts bounds the scripts loadedScripts remembers; past it, it
// starts again (each script is then loaded everywhere once more).
const maxLoadedScripts = 4096

// loadedScripts remembers the bodies of the scripts that EVAL through rproxy
// has loaded on every master of a cluster. On one Redis an EVAL leaves its
// script in the server's cache, so that a later EVALSHA of it runs and
// SCRIPT EXISTS says 1 (the way go-redis's Script.Run and redis-py's
// register_script go: EVALSHA, NOSCRIPT, EVAL, then EVALSHA). On a
// cluster the EVAL runs on its key's master only, so the first EVAL of
// each script also sends SCRIPT LOAD to every master (replies dropped).
// A new slot map (a failover brings a master whose cache is empty) or a
// SCRIPT FLUSH through rproxy starts it again.
type loadedScripts struct {
	seed    maphash.Seed
	mu      sync.Mutex
	version uint64
	bodies  map[uint64]struct{}
}

func newLoadedScripts() *loadedScripts {
	return &loadedScripts{seed: maphash.MakeSeed(), bodies: map[uint64]struct{}{}}
}

// first reports whether body is not yet loaded everywhere under slot map
// version, and notes it as loaded.
func (l *loadedScripts) first(body []byte, version uint64) bool {
	h := maphash.Bytes(l.seed, body)
	l.mu.Lock()
	defer l.mu.Unlock()
	if version != l.version || len(l.bodies) >= maxLoadedScripts {
		clear(l.bodies)
		l.version = version
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
