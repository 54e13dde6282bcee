package proxy

import (
	"cmp"
	"slices"
	"sync"

	"github.com/rproxy/rproxy/upstream"
)

// sessionSet is the sessions the proxy serves, each from its accept to its
// close: what CLIENT LIST, KILL and UNBLOCK, PROXY CLIENTS, the drain, the
// park sweep and a deleted user's close look through. Its zero value is
// empty and ready.
type sessionSet struct {
	mu sync.Mutex
	m  map[*session]struct{}
}

func (set *sessionSet) add(ss *session) {
	set.mu.Lock()
	if set.m == nil {
		set.m = make(map[*session]struct{})
	}
	set.m[ss] = struct{}{}
	set.mu.Unlock()
}

func (set *sessionSet) remove(ss *session) {
	set.mu.Lock()
	delete(set.m, ss)
	set.mu.Unlock()
}

// each calls f for every session, killed ones too, under the set's lock:
// f must not wait, nor add or remove sessions.
func (set *sessionSet) each(f func(ss *session)) {
	set.mu.Lock()
	defer set.mu.Unlock()
	for ss := range set.m {
		f(ss)
	}
}

// all returns every session, killed ones too, oldest first.
func (set *sessionSet) all() []*session {
	return oldestFirst(set.filtered(func(*session) bool { return true }))
}

// live returns the sessions not killed, oldest first.
func (set *sessionSet) live() []*session {
	return oldestFirst(set.unordered())
}

// unordered returns the sessions not killed, in no order: for counts.
func (set *sessionSet) unordered() []*session {
	return set.filtered(func(ss *session) bool { return !ss.killed.Load() })
}

// on returns the sessions on the shared connections ps, in no order.
func (set *sessionSet) on(ps *poolSet) []*session {
	return set.filtered(func(ss *session) bool { return ss.poolsRef.Load() == ps })
}

// filtered copies the sessions keep accepts, under the lock, so that the
// caller may then wait or take other locks.
func (set *sessionSet) filtered(keep func(ss *session) bool) []*session {
	set.mu.Lock()
	defer set.mu.Unlock()
	out := make([]*session, 0, len(set.m))
	for ss := range set.m {
		if keep(ss) {
			out = append(out, ss)
		}
	}
	return out
}

// oldestFirst sorts sessions by rproxy id, as CLIENT LIST lists them.
func oldestFirst(sessions []*session) []*session {
	slices.SortFunc(sessions, func(a, b *session) int { return cmp.Compare(a.id, b.id) })
	return sessions
}

// byID returns the session with rproxy id id, or nil (also when killed).
func (set *sessionSet) byID(id int64) *session {
	set.mu.Lock()
	defer set.mu.Unlock()
	for ss := range set.m {
		if ss.id == id && !ss.killed.Load() {
			return ss
		}
	}
	return nil
}

// blockableOf is the connection of its own on which session id may wait
// in a blocking command (nil: none): the branch a stream-mode session's
// blocking command waits on, on a cluster, else its pin.
func (set *sessionSet) blockableOf(id int64) *upstream.Dedicated {
	target := set.byID(id)
	if target == nil {
		return nil
	}
	if d := target.blockedBranch.Load(); d != nil {
		return d
	}
	return target.pinRef.Load()
}
