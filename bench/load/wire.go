package load

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// headLen is how many leading bytes of each reply wire keeps: enough for
// "$-1" and for the first word of any Redis error.
const headLen = 40

// wire reads replies from one connection, framing them with resp.Framer
// over a reused buffer, so reading allocates nothing.
type wire struct {
	conn   net.Conn
	base   time.Time // origin of readAt
	buf    []byte
	r, w   int // unread bytes are buf[r:w]
	framer resp.Framer
	head   [headLen]byte
	headN  int
	// readAt is when the chunk that completed the last reply was read, in
	// nanoseconds since base: the reply's arrival time, taken once per read
	// rather than once per reply.
	readAt int64
}

func newWire(conn net.Conn, base time.Time) *wire {
	return &wire{conn: conn, base: base, buf: make([]byte, 64<<10)}
}

// next reads one complete reply and returns its type byte and its first
// bytes (at most headLen). RESP3 pushes (invalidations, with -tracking) are
// read past: they answer no command.
func (c *wire) next() (kind byte, head []byte, err error) {
	c.headN = 0
	for {
		if c.r == c.w {
			n, err := c.conn.Read(c.buf)
			c.readAt = int64(time.Since(c.base))
			if n == 0 {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF // the server closed the connection mid-batch
				}
				return 0, nil, err
			}
			// A Read that returns data and an error returns the error again
			// next time; handle the data first.
			c.r, c.w = 0, n
		}
		chunk := c.buf[c.r:c.w]
		n, done, err := c.framer.Next(chunk)
		if c.headN < headLen {
			c.headN += copy(c.head[c.headN:], chunk[:n])
		}
		c.r += n
		if err != nil {
			return 0, nil, fmt.Errorf("framing reply: %w", err)
		}
		if done && c.framer.Kind() == '>' {
			c.headN = 0
			continue
		}
		if done {
			return c.framer.Kind(), c.head[:c.headN], nil
		}
	}
}

// drained reports whether every byte read so far belonged to a reply.
func (c *wire) drained() bool { return c.r == c.w }

// errorWord returns the first word of an error reply's head ("-ERR unknown
// command" gives "ERR"), the error class Redis puts first by convention.
func errorWord(head []byte) []byte {
	w := head[1:] // skip '-'
	for i, b := range w {
		if b == ' ' || b == '\r' {
			return w[:i]
		}
	}
	return w
}

// isNull reports whether a reply is a null (RESP2 "$-1" or "*-1", RESP3 "_").
func isNull(kind byte, head []byte) bool {
	return kind == '_' || (len(head) >= 3 && head[1] == '-' && head[2] == '1' && (kind == '$' || kind == '*'))
}
