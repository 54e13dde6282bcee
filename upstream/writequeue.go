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
		if k == 0 || len(q.chunks[k-1]) == cap(q.chunks[k-1]) {
			q.chunks = append(q.chunks, newChunk(free, k == 0 && len(b) <= firstChunkSize))
			k++
		}
		last := q.chunks[k-1]
		m := min(len(b), cap(last)-len(last))
		q.chunks[k-1] = append(last, b[:m]...)
		b = b[m:]
	}
}

// newChunk returns an empty chunk: a free one, or a new one of
// firstChunkSize (small) or writeChunkSize.
func newChunk(free *[][]byte, small bool) []byte {
	if n := len(*free); n > 0 {
		c := (*free)[n-1]
		(*free)[n-1] = nil
		*free = (*free)[:n-1]
		return c
	}
	if small {
		return make([]byte, 0, firstChunkSize)
	}
	return make([]byte, 0, writeChunkSize)
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
