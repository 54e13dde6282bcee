// Package idlepoll waits for idle sockets to become readable without a
// goroutine per socket.
//
// A goroutine parked in the runtime's poller keeps its stack (4 KB or more
// once it has served a request, and the runtime does not shrink a stack
// that deep), which is most of what an idle client connection costs. A
// Poller holds idle sockets in an epoll set of its own instead: one
// goroutine waits for all of them, and calls a socket's Waiter when it has
// something to read (or was hung up), so that its owner can start a
// goroutine to serve it again.
//
// The socket stays registered with the runtime's poller too; epoll allows
// a file in several sets, and the runtime's edge-triggered registration
// ignores readiness no goroutine waits for.
//
// Only Linux has one; elsewhere New returns ErrUnsupported and callers
// keep their goroutine per connection.
package idlepoll

import "errors"

// ErrUnsupported is New's error where the platform has no Poller.
var ErrUnsupported = errors.New("idlepoll: not supported on this platform")

// A Waiter is called back once its socket is readable or hung up.
type Waiter interface {
	// Ready is called on the Poller's goroutine: it must not block (start
	// a goroutine to read).
	Ready()
}

// Token names one Wait, so that Cancel never cancels a later Wait of
// another socket that reuses the descriptor number.
type Token uint32
