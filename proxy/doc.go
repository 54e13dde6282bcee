// Package proxy is rproxy's client side: it accepts Redis clients (RESP2,
// RESP3 and inline commands; client.go's read loop parses each read with
// resp.RequestParser, which enforces Redis's framing rules and limits),
// keeps each client's session state, and forwards commands to Redis.
//
// The request path reads top to bottom in session.go (exec): a client's
// batch of pipelined commands is classified by the command table; the
// policy stage (policy.go, package policy) may refuse or rewrite a command
// and spreads cache-write TTLs below the one asked for; writes drop their
// keys from the local tier (package tier, which keeps package hotkey's
// tier coherent with Redis); commands answered by the proxy (HELLO, CLIENT
// SETNAME/GETNAME/ID/SETINFO, AUTH, PROXY, refusals) are answered in
// place; a GET of a cached hot key is answered from the tier, and on a
// cluster may read a salted copy (salt.go, package salt); eligible reads
// may join an identical read in flight (package coalesce); the rest go
// upstream as one Batch, on the shared pipelined connections of package
// upstream, or on a connection pinned to the session while it holds state
// (pin.go: transactions, WATCH, SELECT, blocking commands; stream mode for
// pub/sub, MONITOR and tracking). Replies are written back in the client's
// order, byte for byte as Redis sent them.
package proxy
