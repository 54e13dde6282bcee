// Package proxy is rproxy's client side: it accepts Redis clients (RESP2,
// RESP3 and inline commands, through github.com/tidwall/redcon), keeps each
// client's session state, and forwards commands to Redis over the shared,
// pipelined connections of package upstream.
//
// The request path reads top to bottom in session.go: a client's batch of
// pipelined commands is classified by the command table, commands answered by
// the proxy (HELLO, CLIENT SETNAME/GETNAME/ID/SETINFO, refusals) are answered in
// place, the rest go upstream as one Batch, and all replies are written back in
// the client's order, byte for byte as Redis sent them.
package proxy
