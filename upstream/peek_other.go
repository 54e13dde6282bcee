//go:build !unix

package upstream

import "net"

// peekConn cannot look without blocking here: the connection is taken as
// open, and a dead one fails on use.
func peekConn(net.Conn) peekResult { return peekUnknown }
