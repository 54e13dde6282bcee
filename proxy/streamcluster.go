package proxy

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/upstream"
)

// clusterStream is stream mode's reach beyond a session's pin on a
// cluster upstream: branches to the other masters for tracking, keyspace
// notifications and shard channels (streambranch.go, streamnotify.go,
// streamshard.go, shardmove.go), the whole data's commands sent to every
// master (streamfanout.go) and commands of a migrating slot run where the
// redirect says (streamasked.go). Its dependencies on the rest of the
// proxy are the fields below; on a standalone or Sentinel upstream (on
// false) each of its entry points declines and the pin serves alone.
type clusterStream struct {
	on      bool                           // a cluster upstream
	routing *routing                       // the cluster stage (nil when on is false)
	table   *atomic.Pointer[command.Table] // the table in force (keys of commands)
	timeout time.Duration                  // upstream.timeout: a branch's reply, a moved shard's resubscription
	log     *zap.Logger
	clock   func() time.Time

	// The session machinery it sends and answers through.
	refuseMsg        func(ss *session, msg string)                     // "-ERR rproxy: msg" in the reply's place
	sendStreamBatch  func(ss *session)                                 // the pin's queued commands sent
	trackingOnServer func(args [][]byte, addr string) ([]byte, []byte) // CLIENT TRACKING as one master is sent it
	redisSubscribed  func(ss *session) (subscribed, ok bool)           // the pin's RESP2 subscribed mode as Redis sees it
	infoReply        func(reply []byte, caller *session, withProxy bool) []byte
}

// clusterStreamState is a session's state in clusterStream.
type clusterStreamState struct {
	// Tracking across a cluster's masters (streambranch.go): the session's
	// connections to masters other than the pin's, and the last CLIENT
	// CACHING sent.
	branches    []*streamBranch
	lastCaching []byte
	branchTx    *upstream.Pool // a transaction sent on this master's branch, until its EXEC
	watchPool   *upstream.Pool // a WATCH sent on this master's branch, until UNWATCH, EXEC or DISCARD
	// multiDeferred: a MULTI answered and not sent yet; the transaction's
	// first command decides where it goes (deferStreamMulti).
	// multiCaching: Redis held a CLIENT CACHING flag when it came, which
	// the transaction takes (Redis keeps it from MULTI to EXEC).
	multiDeferred bool
	multiCaching  bool
	shardBranched bool        // an SSUBSCRIBE went to a branch (streamshard.go)
	divertedTx    *divertedTx // a transaction of a migrating slot, run on the shared connections at its EXEC (streamasked.go)
	// Keyspace notifications from masters other than the pin's
	// (streamnotify.go).
	notifyBranches []*notifyBranch
}

// cstream is the session's clusterStreamState, made at the first use; only
// the session's own goroutine may call it.
func (ss *session) cstream() *clusterStreamState {
	if ss.cs == nil {
		ss.cs = new(clusterStreamState)
	}
	return ss.cs
}

func (s *Server) newClusterStream() *clusterStream {
	return &clusterStream{on: s.cfg.Cluster != nil, routing: s.routing, table: &s.table, timeout: s.cfg.Upstream.Timeout,
		log: s.log, clock: s.clock, refuseMsg: s.refuseMsg, sendStreamBatch: s.sendStreamBatch,
		trackingOnServer: s.clientCmds.trackingOnServer, redisSubscribed: s.redisSubscribed, infoReply: s.infoReply}
}
