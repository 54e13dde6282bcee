package upstream

import (
	"bytes"
	"testing"
)

// TestWriteQueue: what is added comes out in order across chunks, no chunk
// is over writeChunkSize, a queue of small commands takes one small chunk,
// and reset keeps at most maxWriteRetained bytes of chunks for reuse.
func TestWriteQueue(t *testing.T) {
	var q writeQueue
	var free [][]byte
	var want []byte
	for i, size := range []int{3, 100 << 10, 300 << 10, 1, 700 << 10, 40} {
		b := bytes.Repeat([]byte{byte('a' + i)}, size)
		q.add(b, &free)
		want = append(want, b...)
	}
	var got []byte
	for _, c := range q.chunks {
		if len(c) > writeChunkSize {
			t.Fatalf("a chunk of %d bytes", len(c))
		}
		got = append(got, c...)
	}
	if !bytes.Equal(got, want) || q.n != len(want) {
		t.Fatalf("queued %d bytes (n %d), got %d back, equal %v", len(want), q.n, len(got), bytes.Equal(got, want))
	}
	q.reset(&free)
	if q.n != 0 || len(q.chunks) != 0 || len(free) == 0 {
		t.Fatalf("after reset: n %d, %d chunks, %d free", q.n, len(q.chunks), len(free))
	}

	var small writeQueue
	small.add([]byte("*1\r\n$4\r\nPING\r\n"), new([][]byte))
	if len(small.chunks) != 1 || cap(small.chunks[0]) != firstChunkSize {
		t.Fatalf("a small command took %d chunks (first of %d bytes)", len(small.chunks), cap(small.chunks[0]))
	}
	// Past the small chunk, up to writeChunkSize: still one chunk (one
	// write call), the bytes in order.
	var medium writeQueue
	want = nil
	for i := range 1000 {
		b := []byte("*2\r\n$3\r\nGET\r\n$4\r\nk" + string(rune('a'+i%26)) + "xx\r\n")
		medium.add(b, new([][]byte))
		want = append(want, b...)
	}
	if len(medium.chunks) != 1 || !bytes.Equal(medium.chunks[0], want) {
		t.Fatalf("%d bytes of small commands took %d chunks", len(want), len(medium.chunks))
	}

	var big writeQueue
	free = nil
	big.add(make([]byte, 3*maxWriteRetained), &free)
	big.reset(&free)
	kept := 0
	for _, c := range free {
		kept += cap(c)
	}
	if kept > maxWriteRetained {
		t.Fatalf("reset kept %d bytes of chunks, over %d", kept, maxWriteRetained)
	}
}

// BenchmarkWriteQueue100KB: queuing 100 KB commands, 50 to a write, then
// emptying the queue, as a shared connection does under 100 KB SETs.
func BenchmarkWriteQueue100KB(b *testing.B) {
	cmd := make([]byte, 100<<10)
	var q writeQueue
	var free [][]byte
	b.SetBytes(int64(50 * len(cmd)))
	b.ReportAllocs()
	for b.Loop() {
		for range 50 {
			q.add(cmd, &free)
		}
		q.reset(&free)
	}
}
