// Package upstream owns rproxy's connections to Redis: a small set of
// long-lived connections shared by every client session, pipelined.
//
// A session hands a Batch (one or more raw RESP commands) to a Pool. The pool
// picks a connection and appends the batch's bytes to that connection's write
// buffer and wakes the connection's writer goroutine. Before each write the
// writer yields to the scheduler (Config.GatherYields, while the queue or
// the coalesced joins keep growing), so commands queued by the clients woken
// in the same network poll leave in one write. One reader goroutine per
// connection frames
// replies with resp.Framer and appends them, byte for byte, to the waiting
// batches in the order their commands were written.
//
// Sessions that hold connection state borrow a Dedicated connection
// (Pool.Acquire), used by one session at a time and reset before reuse.
// What the pools send of their own (a new connection's handshake and
// Setup, the ROLE that confirms a master, a returned connection's reset)
// is recorded in Config.Own (OwnCommands) before it is sent, so that a
// MONITOR relay can hide it (OwnMonitor).
//
// A connection that fails (read or write error, or no reply progress for
// Config.Timeout while requests wait) fails every waiting command with
// "-ERR upstream unavailable: <reason>" and is redialled with backoff; while it
// is down, new commands fail at once with the same error. A connection that
// times out while Redis answers nothing (stopped, hung) is drained instead
// (conn.startDrain, Dedicated.drain): its waiting commands fail the same
// way, but it stays open until Redis has answered what was written, and
// the pool's new commands wait for that (at most Config.Timeout each), so
// none of them runs before a command reported failed.
//
// For a Redis Cluster, a Cluster keeps a Pool per node and protocol and the
// slot map (CLUSTER SHARDS, or CLUSTER SLOTS), and a Router per protocol
// takes the Pool's place: it sends each command of a batch (Batch.AddSlot)
// to its slot's master, splitting a batch that spans masters, and follows
// MOVED, ASK and TRYAGAIN. A transaction's commands (InTransaction) are
// never sent again alone: a transaction Redis discarded for redirects alone
// (TRYAGAIN included) goes again whole (txredirect.go). A slot an ASK was
// met for is Migrating until the map names another master for it
// (migrating.go). Commands that come before the first
// slot map is read wait for it (Cluster.AwaitMap).
package upstream
