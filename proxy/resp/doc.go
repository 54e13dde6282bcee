// Package resp frames and encodes the Redis serialization protocol (RESP2
// and RESP3) on the proxy's hot path.
//
// The proxy forwards replies byte for byte; it only needs to know where each
// reply ends, not what it says. Framer finds those boundaries incrementally
// over whatever chunks the network delivers, keeping a few words of state
// and a reusable stack instead of buffering or copying reply bytes, so it
// allocates nothing per call and never looks at a byte twice.
//
// RequestLimiter plays the same trick on the client side: it watches the
// bytes clients send only to enforce Redis's size limits (proto-max-bulk-len,
// client-query-buffer-limit, the inline request limit) before the RESP server
// library buffers an oversized request in memory.
//
// The Append functions encode commands and replies into caller-owned
// buffers. ReadReply and Parse are conveniences for tests and cold paths
// (reading a COMMAND reply at startup, say); they allocate and should not be
// used per request.
package resp
