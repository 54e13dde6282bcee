package resp

import "errors"

// Framer and Parse wrap these sentinels with the type and byte at fault, so
// callers match them with errors.Is while logs still say what was wrong.
var (
	// ErrUnknownType means a value started with a byte that is not a RESP2
	// or RESP3 type. In a reply stream it almost always means the proxy lost
	// track of the framing, so the connection cannot be trusted any more.
	ErrUnknownType = errors.New("resp: unknown type byte")

	// ErrStreamed means a streamed string or aggregate ($?, *?, ...). Redis
	// never sends them and framing them would need extra state, so they are
	// refused rather than half supported.
	ErrStreamed = errors.New("resp: streamed values are not supported")

	// ErrMissingCR means a line feed arrived without the carriage return
	// that must precede it.
	ErrMissingCR = errors.New("resp: line feed without carriage return")

	// ErrMissingLF means a carriage return ending a line was not followed by
	// a line feed.
	ErrMissingLF = errors.New("resp: carriage return not followed by line feed")

	// ErrBadLength means a length or element count was empty, had a sign or
	// leading zero, or held a byte other than a decimal digit.
	ErrBadLength = errors.New("resp: malformed length")

	// ErrNegativeLength means a negative length other than the -1 that $ and
	// * use for null.
	ErrNegativeLength = errors.New("resp: negative length")

	// ErrLengthOverflow means a length or count above MaxLength. No real
	// reply is that large; a value that big means a corrupt stream.
	ErrLengthOverflow = errors.New("resp: length too large")

	// ErrBulkTerminator means a length-prefixed payload was not followed by
	// CRLF, i.e. the declared length was wrong.
	ErrBulkTerminator = errors.New("resp: bulk payload not followed by CRLF")

	// ErrTooDeep means aggregates nested deeper than the framer's MaxDepth.
	// The limit bounds the framer's stack and Parse's recursion.
	ErrTooDeep = errors.New("resp: nesting too deep")

	// ErrBadInteger means an integer (:) or big number (() line that is not
	// an optionally signed run of digits, or an integer outside int64.
	ErrBadInteger = errors.New("resp: malformed integer")

	// ErrBadBoolean means a boolean (#) line other than t or f.
	ErrBadBoolean = errors.New("resp: malformed boolean")

	// ErrBadNull means a RESP3 null (_) with a payload.
	ErrBadNull = errors.New("resp: malformed null")

	// ErrIncomplete means Parse was given the start of a reply but not all
	// of it.
	ErrIncomplete = errors.New("resp: incomplete reply")

	// ErrTrailingData means Parse was given bytes after the end of the
	// reply; it decodes exactly one reply.
	ErrTrailingData = errors.New("resp: trailing bytes after reply")
)
