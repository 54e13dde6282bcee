package proxy

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rproxy/rproxy/resp"
)

// clientView is what PROXY CLIENTS shows of a session. The session's own
// fields belong to its goroutine; publishView copies them here at the end
// of each batch, taking the lock only when one changed.
type clientView struct {
	created time.Time    // set before the session is shared
	active  atomic.Int64 // coarse clock (Unix ns) at the end of the last batch; 0: none yet
	mu      sync.Mutex
	// pub is written under mu by the session's goroutine only, which so
	// may read it without mu; other goroutines read it under mu.
	pub clientState
}

// clientState is the part of a session that changes as it runs.
type clientState struct {
	name   string
	user   string
	cmd    string // the last command's name
	db     int
	pinned bool // on a dedicated upstream connection (transaction, db, blocking, pub/sub)
	multi  bool // in a transaction (CLIENT LIST's x flag)
	stream bool // in stream mode: pub/sub, MONITOR, replication, tracking, CLIENT REPLY
	// role is 'S' after SYNC or PSYNC (a replica), 'O' after MONITOR, else 0.
	role byte
	// selectSeq: db is a stream-mode SELECT's, which Redis may refuse
	// (session.streamSelect): the relay's answer, if in, is the truth.
	selectSeq uint32
	proto     int // 2 or 3
	// Subscriptions (CLIENT LIST's sub, psub, ssub; P flag) and tracking
	// (t flag).
	subs, psubs, ssubs int
	redirect           int64 // CLIENT LIST's redir: -1 off, 0 on without REDIRECT, else rproxy's id
	tracking           bool
	bcast              bool // tracking in BCAST mode (B flag)
	noEvict            bool // CLIENT NO-EVICT ON (e flag)
}

// liveState is the session's clientState now; only its own goroutine may
// call it.
func (ss *session) liveState() clientState {
	return clientState{name: ss.name, user: ss.user, cmd: ss.lastCmd, db: ss.db, pinned: ss.pin != nil || ss.stream,
		multi: ss.inTransaction(), stream: ss.stream, role: ss.role, proto: ss.proto,
		subs: len(ss.subscribed['c']), psubs: len(ss.subscribed['p']), ssubs: len(ss.subscribed['s']), tracking: ss.tracking.redirect >= 0,
		redirect: ss.tracking.redirect, bcast: ss.tracking.trackBcast, noEvict: ss.noEvict, selectSeq: ss.selectSeq}
}

// publishedState is ss's state as published for other sessions, its db
// settled by the relay's answer to the SELECT it shows (streamSelect) if
// that has come since.
func (ss *session) publishedState() clientState {
	ss.view.mu.Lock()
	st := ss.view.pub
	ss.view.mu.Unlock()
	if st.selectSeq != 0 {
		if last := ss.selectDone.Load(); uint32(last>>32) == st.selectSeq {
			st.db = int(int32(uint32(last)))
		}
	}
	return st
}

// publishView publishes the session's state after a batch. It allocates
// only when the client name changes.
func (s *Server) publishView(ss *session) {
	ss.settleSelect()
	s.publishState(ss, ss.liveState())
}

// publishBlocked publishes, as a blocking batch starts to wait, the
// session's state with the blocking command as its last (Redis's CLIENT
// LIST shows a blocked client's command, even if more follow in its
// pipeline) and marks it blocked (the b flag).
func (s *Server) publishBlocked(ss *session) {
	st := ss.liveState()
	st.cmd = ss.blockingCmd
	s.publishState(ss, st)
	ss.blockedNow.Store(true)
}

func (s *Server) publishState(ss *session, st clientState) {
	v := &ss.view
	v.active.Store(s.clock().UnixNano())
	if st == v.pub {
		return
	}
	v.mu.Lock()
	v.pub = st
	v.mu.Unlock()
}

// clientsList answers PROXY CLIENTS: one line per client session, oldest
// first, in the form of Redis's CLIENT LIST (id, addr, name, age and idle
// in seconds, db, the last command, user, and upstream=shared|pinned).
// The asking session appears as it is now.
func (s *Server) clientsList(caller *session) []byte {
	sessions := s.sessions.all()
	now := s.clock()
	var b strings.Builder
	for _, ss := range sessions {
		var st clientState
		idle := now.Sub(ss.view.created)
		if ss == caller {
			st = clientState{name: ss.name, user: ss.user, cmd: "proxy|clients", db: ss.db, pinned: ss.pin != nil || ss.stream}
			idle = 0
		} else {
			st = ss.publishedState()
			if at := ss.view.active.Load(); at != 0 {
				idle = now.Sub(time.Unix(0, at))
			}
		}
		if st.cmd == "" {
			st.cmd = "NULL" // as Redis shows a client that has sent nothing
		}
		upstream := "shared"
		if st.pinned {
			upstream = "pinned"
		}
		fmt.Fprintf(&b, "id=%d addr=%s name=%s age=%d idle=%d db=%d cmd=%s user=%s upstream=%s\n",
			ss.id, ss.conn.RemoteAddr(), st.name, int64(max(now.Sub(ss.view.created), 0).Seconds()),
			int64(max(idle, 0).Seconds()), st.db, st.cmd, st.user, upstream)
	}
	return resp.AppendBulk(nil, []byte(b.String()))
}

// configGet answers PROXY CONFIG GET pattern [pattern ...]: the running
// configuration's keys (dotted paths, e.g. limits.idle_timeout) matching
// any of the glob patterns, case-insensitively as CONFIG GET matches, with
// their values, as CONFIG GET's flat key, value array. Every section is
// descended to its values (auth.users.NAME too); lists and empty maps are
// given in YAML flow form ([get], {}).
func configGet(effective string, patterns [][]byte) []byte {
	for _, p := range patterns {
		if _, err := path.Match(strings.ToLower(string(p)), ""); err != nil {
			return resp.AppendError(nil, fmt.Sprintf("ERR rproxy: bad pattern %q: %v", p, err))
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(effective), &doc); err != nil {
		return resp.AppendError(nil, "ERR rproxy: cannot read the running configuration: "+oneLine(err.Error()))
	}
	var pairs []string
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			walk(n.Content[0], prefix)
			return
		}
		if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
			if matchAny(patterns, prefix) {
				pairs = append(pairs, prefix, flowValue(n))
			}
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if prefix != "" {
				key = prefix + "." + key
			}
			walk(n.Content[i+1], key)
		}
	}
	walk(&doc, "")
	r := fmt.Appendf(nil, "*%d\r\n", len(pairs))
	for _, p := range pairs {
		r = resp.AppendBulk(r, []byte(p))
	}
	return r
}

func matchAny(patterns [][]byte, key string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(string(p)), strings.ToLower(key)); ok {
			return true
		}
	}
	return false
}

// flowValue renders a value: a scalar as it is, a list or map in YAML flow
// form on one line.
func flowValue(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	c := *n
	c.Style = yaml.FlowStyle
	b, err := yaml.Marshal(&c)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
