// Package resp frames and encodes the Redis serialization protocol (RESP2
// and RESP3) on the proxy's hot path.
//
// The proxy forwards replies byte for byte; it only needs to know where each
// reply ends, not what it says. Framer finds those boundaries incrementally
// over whatever chunks the network delivers, keeping a few words of state
// and a reusable stack instead of buffering or copying reply bytes, so it
// allocates nothing per call and never looks at a byte twice.
//
// RequestParser reads what clients send as Redis does, with the same
// framing rules, limits and error replies: it parses each read's bytes once,
// keeping its place between reads, into commands whose arguments are
// sub-slices of its read buffer, and enforces the limits
// (proto-max-bulk-len, client-query-buffer-limit, the inline limit, the
// unauthenticated limits) as it goes.
//
// The Append functions encode commands and replies into caller-owned
// buffers. ReadReply and Parse are conveniences for tests and cold paths
// (reading a COMMAND reply at startup, say); they allocate and should not be
// used per request.
package resp
