package upstream

// writeChunkSize is the largest chunk of a writeQueue: one write call's
// most (sysio's maxCall).
const writeChunkSize = 256 << 10

// firstChunkSize is a writeQueue's first chunk when what is queued is
// small: a connection that only ever sends small batches holds no more.
const firstChunkSize = 16 << 10

// writeQueue is the bytes queued for a connection's next write, in
// chunks: a command is copied once, into the last chunk and the next ones
// where it does not fit, and never again however much is queued after it.
// (One contiguous buffer regrows by copying what it holds; with large
// values, sessions that each send a batch of megabytes made writes of tens
// of megabytes, past maxWriteRetained, regrown on every write.)
type writeQueue struct {
	chunks [][]byte
	n      int // bytes queued
}

// add queues b, taking new chunks from free first.
func (q *writeQueue) add(b []byte, free *[][]byte) {
	q.n += len(b)
	for len(b) > 0 {
		k := len(q.chunks)
		switch {
		case k == 0:
			size := writeChunkSize
			if len(b) <= firstChunkSize {
				size = firstChunkSize
			}
			q.chunks = append(q.chunks, takeChunk(free, size))
			k = 1
		case len(q.chunks[k-1]) < cap(q.chunks[k-1]):
		case k == 1 && cap(q.chunks[0]) < writeChunkSize:
			// A small first chunk is full: its bytes move to a chunk of
			// writeChunkSize, so that a write up to that size stays one
			// call (the small one is dropped: free chunks serve from now).
			q.chunks[0] = append(takeChunk(free, writeChunkSize), q.chunks[0]...)
		default:
			q.chunks = append(q.chunks, takeChunk(free, writeChunkSize))
			k++
		}
		last := q.chunks[k-1]
		m := min(len(b), cap(last)-len(last))
		q.chunks[k-1] = append(last, b[:m]...)
		b = b[m:]
	}
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
// in all.
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
	q.chunks, q.n = q.chunks[:0], 0
}
