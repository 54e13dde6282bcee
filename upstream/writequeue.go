package upstream

import "syscall"

// writeChunkSize is the size of a writeQueue's chunks after its first.
const writeChunkSize = 256 << 10

// firstChunkSize is a writeQueue's first chunk when what is queued is
// small: a connection that only ever sends small batches holds no more.
const firstChunkSize = 16 << 10

// borrowMin is the size from which a command is lent to a queue that may
// borrow, not copied into its chunks: the copy's cost (and, for a burst of
// large values, the memory: every client's batch twice over) grows with
// the size, an extra slice for the write call's vector does not.
const borrowMin = 32 << 10

// writeQueue is the bytes queued for a connection's next write, as a list
// of segments written in order by one vectored write call after another:
// parts of the queue's own chunks, into which small commands are copied
// (each once, never again however much is queued after it), and, in a
// queue that may borrow, commands of borrowMin bytes or more, referenced
// where the caller holds them. A borrowed command is the caller's until
// its batch's Do returns; a queue whose batches are failed before they
// are written (a drain) copies what it still borrows first (recall).
type writeQueue struct {
	segs   [][]byte // what to write, in order
	chunks [][]byte // the chunks segs' own parts are in
	lent   []int    // the indexes in segs of borrowed commands
	n      int      // bytes queued
	open   bool     // segs' last is the last chunk's tail: small bytes extend it

	// The writer's progress: segs[seg][off:] is the next byte to write.
	seg, off int
}

// add queues b (lending it when borrow and it is large), taking new
// chunks from free first.
func (q *writeQueue) add(b []byte, free *[][]byte, borrow bool) {
	if len(b) == 0 {
		return
	}
	q.n += len(b)
	if borrow && len(b) >= borrowMin {
		q.lent = append(q.lent, len(q.segs))
		q.segs = append(q.segs, b[:len(b):len(b)])
		q.open = false
		return
	}
	for len(b) > 0 {
		k := len(q.chunks)
		if k == 0 || len(q.chunks[k-1]) == cap(q.chunks[k-1]) {
			size := writeChunkSize
			if k == 0 && len(b) <= firstChunkSize {
				size = firstChunkSize
			}
			q.chunks = append(q.chunks, takeChunk(free, size))
			q.open = false
			k++
		}
		last := q.chunks[k-1]
		start := len(last)
		m := min(len(b), cap(last)-start)
		last = append(last, b[:m]...)
		q.chunks[k-1] = last
		if q.open {
			s := &q.segs[len(q.segs)-1]
			*s = (*s)[:len(*s)+m] // the segment reaches to the chunk's end
		} else {
			q.segs = append(q.segs, last[start:])
			q.open = true
		}
		b = b[m:]
	}
}

// next fills iov with the next bytes to write: at most maxBytes, and as
// many segments as iov has room for.
func (q *writeQueue) next(iov []syscall.Iovec, maxBytes int) []syscall.Iovec {
	iov = iov[:0]
	off := q.off
	for i := q.seg; i < len(q.segs) && len(iov) < cap(iov) && maxBytes > 0; i++ {
		s := q.segs[i][off:]
		off = 0
		if len(s) > maxBytes {
			s = s[:maxBytes]
		}
		v := syscall.Iovec{Base: &s[0]}
		v.SetLen(len(s))
		iov = append(iov, v)
		maxBytes -= len(s)
	}
	return iov
}

// advance records n more bytes written.
func (q *writeQueue) advance(n int) {
	for n > 0 {
		rest := len(q.segs[q.seg]) - q.off
		if n < rest {
			q.off += n
			return
		}
		n -= rest
		q.seg, q.off = q.seg+1, 0
	}
}

// written reports whether every byte queued has been written.
func (q *writeQueue) written() bool { return q.seg == len(q.segs) }

// recall replaces the borrowed commands not yet written whole by copies,
// so that their callers may change them from now on while what is left
// of them is still written.
func (q *writeQueue) recall() {
	if len(q.lent) == 0 {
		return // nothing borrowed (over TLS, never): q is not touched
	}
	for _, i := range q.lent {
		if i >= q.seg {
			q.segs[i] = append([]byte(nil), q.segs[i]...)
		}
	}
	q.lent = q.lent[:0]
}

// takeChunk returns an empty chunk of at least size bytes: the last such
// in free, or a new one.
func takeChunk(free *[][]byte, size int) []byte {
	f := *free
	for i := len(f) - 1; i >= 0; i-- {
		if c := f[i]; cap(c) >= size {
			f[i] = f[len(f)-1]
			f[len(f)-1] = nil
			*free = f[:len(f)-1]
			return c
		}
	}
	return make([]byte, 0, size)
}

// reset empties q, keeping its chunks in free up to maxWriteRetained bytes
// in all, and dropping what it borrowed.
func (q *writeQueue) reset(free *[][]byte) {
	kept := 0
	for _, c := range *free {
		kept += cap(c)
	}
	for i, c := range q.chunks {
		if kept+cap(c) <= maxWriteRetained {
			*free = append(*free, c[:0])
			kept += cap(c)
		}
		q.chunks[i] = nil
	}
	clear(q.segs)
	q.segs, q.chunks, q.lent = q.segs[:0], q.chunks[:0], q.lent[:0]
	q.n, q.open, q.seg, q.off = 0, false, 0, 0
}
