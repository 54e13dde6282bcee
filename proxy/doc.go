// Package proxy is rproxy's client side: it accepts Redis clients (RESP2,
// RESP3 and inline commands; client.go's read loop parses each read with
// resp.RequestParser, which enforces Redis's framing rules and limits),
// keeps each client's session state, and forwards commands to Redis.
//
// The request path reads top to bottom in chain.go: each command of a
// client's read passes a chain of stages declared there in one place
// (bookkeeping, the MULTI guard, auth, policy, the local tier's writes,
// SCRIPT KILL, replica reads, cluster routing, the tier's reads, salted
// copies, coalescing, dispatch), until one takes it; the batch then goes
// upstream as one Batch, on the shared pipelined connections of package
// upstream, or on a connection pinned to the session while it holds state
// (pin.go: transactions, WATCH, SELECT, blocking commands; stream mode for
// pub/sub, MONITOR and tracking). A transaction sent whole in one read
// stays on the shared connections (sharedtx.go); the CLIENT and AUTH
// commands rproxy answers, queued in a transaction, are answered in EXEC's
// array (txclient.go). On a cluster, a key that
// moves under a pinned session is answered as one Redis would
// (pinmoved.go), and a stream session's commands follow a migration
// (streamasked.go). Once the replies are in, the chain's
// replies phase runs (salted copies, the tier's written keys, flights
// published). The engines behind the tier and the salted copies are
// packages of their own (tier, salt): here is only their session side.
// Then flush (session.go) writes every reply back in the
// client's order, byte for byte as Redis sent it or as a stage made it.
//
// Besides the stages, the parts that need no Server are types of their
// own holding only what they use: clusterStream (streamcluster.go: stream
// mode beyond the pin on a cluster, with a session's state for it in
// clusterStreamState), clientCommands (clientcmd.go: the CLIENT commands
// that name clients), facade (facade.go: the CLUSTER commands rproxy
// answers), sessionSet (sessionset.go: the sessions served),
// commandTable (commandtable.go: the command table kept in step with
// Redis's) and connSummary (connlog.go).
//
// Each client's read loop runs on a goroutine of its own while the client
// is active; a client idle for limits.idle_park_after is parked (park.go):
// its goroutine ends and its socket waits in an epoll set of rproxy's own
// (internal/idlepoll) until it sends again.
package proxy
