package upstream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/rproxy/rproxy/resp"
)

// queued is what q would write, in order, from its writer's position.
func queued(q *writeQueue) []byte {
	var out []byte
	for i := q.seg; i < len(q.segs); i++ {
		s := q.segs[i]
		if i == q.seg {
			s = s[q.off:]
		}
		out = append(out, s...)
	}
	return out
}

// TestWriteQueue: what is added comes out in order, small commands are
// copied into chunks none over writeChunkSize (a queue of small commands
// takes one small chunk), large ones are borrowed only where the queue
// may borrow, and reset keeps at most maxWriteRetained bytes of chunks
// for reuse.
func TestWriteQueue(t *testing.T) {
	sizes := []int{3, 100 << 10, 300 << 10, 1, 700 << 10, 40, borrowMin - 1, borrowMin}
	for _, borrow := range []bool{false, true} {
		var q writeQueue
		var free [][]byte
		var want []byte
		lent := 0
		for i, size := range sizes {
			b := bytes.Repeat([]byte{byte('a' + i)}, size)
			q.add(b, &free, borrow)
			want = append(want, b...)
			if borrow && size >= borrowMin {
				lent++
				if s := q.segs[len(q.segs)-1]; &s[0] != &b[0] {
					t.Fatalf("a command of %d bytes was copied where the queue may borrow", size)
				}
			}
		}
		for _, c := range q.chunks {
			if cap(c) > writeChunkSize {
				t.Fatalf("a chunk of %d bytes", cap(c))
			}
		}
		if got := queued(&q); !bytes.Equal(got, want) || q.n != len(want) || len(q.lent) != lent {
			t.Fatalf("borrow %v: queued %d bytes (n %d), got %d back, equal %v; %d lent, want %d",
				borrow, len(want), q.n, len(got), bytes.Equal(got, want), len(q.lent), lent)
		}
		q.reset(&free)
		if q.n != 0 || len(q.segs) != 0 || len(q.chunks) != 0 || len(q.lent) != 0 || len(free) == 0 {
			t.Fatalf("after reset: n %d, %d segments, %d chunks, %d lent, %d free", q.n, len(q.segs), len(q.chunks), len(q.lent), len(free))
		}
	}

	var small writeQueue
	small.add([]byte("*1\r\n$4\r\nPING\r\n"), new([][]byte), true)
	if len(small.chunks) != 1 || cap(small.chunks[0]) != firstChunkSize || len(small.segs) != 1 {
		t.Fatalf("a small command took %d chunks (first of %d bytes)", len(small.chunks), cap(small.chunks[0]))
	}
	// Small commands around a borrowed one share their chunk, each run of
	// them one segment.
	var mixed writeQueue
	var want []byte
	for i := range 1000 {
		b := []byte("*2\r\n$3\r\nGET\r\n$4\r\nk" + string(rune('a'+i%26)) + "xx\r\n")
		if i == 500 {
			b = make([]byte, borrowMin)
		}
		mixed.add(b, new([][]byte), true)
		want = append(want, b...)
	}
	if len(mixed.chunks) != 2 || len(mixed.segs) != 4 || !bytes.Equal(queued(&mixed), want) {
		t.Fatalf("%d bytes of small commands and one large took %d chunks, %d segments", len(want), len(mixed.chunks), len(mixed.segs))
	}

	var big writeQueue
	free := [][]byte(nil)
	big.add(make([]byte, 3*maxWriteRetained), &free, false)
	big.reset(&free)
	kept := 0
	for _, c := range free {
		kept += cap(c)
	}
	if kept > maxWriteRetained {
		t.Fatalf("reset kept %d bytes of chunks, over %d", kept, maxWriteRetained)
	}
}

// TestWriteQueueNextAndRecall: the writer's vectors follow the queue's
// segments within the byte and slice bounds, advance across segments, and
// recall leaves the bytes still to write unchanged while the borrowed
// commands are changed by their callers.
func TestWriteQueueNextAndRecall(t *testing.T) {
	var q writeQueue
	var free [][]byte
	var want []byte
	var lent [][]byte
	for i := range 20 {
		size := 10
		if i%3 == 0 {
			size = borrowMin + i
		}
		b := bytes.Repeat([]byte{byte('a' + i)}, size)
		if size >= borrowMin {
			lent = append(lent, b)
		}
		q.add(b, &free, true)
		want = append(want, b...)
	}
	iov := make([]syscall.Iovec, 0, 3)
	var got []byte
	step := 0
	for {
		v := q.next(iov, 50_000)
		if len(v) == 0 {
			break
		}
		total := 0
		for _, e := range v {
			total += int(e.Len)
		}
		if total > 50_000 || len(v) > 3 {
			t.Fatalf("a vector of %d slices, %d bytes", len(v), total)
		}
		// Write part of it: what a short write call leaves.
		n := total - total/3
		for _, e := range v {
			m := min(n, int(e.Len))
			got = append(got, unsafe.Slice(e.Base, m)...)
			n -= m
		}
		q.advance(total - total/3)
		if step++; step == 3 {
			q.recall()
			for _, b := range lent {
				clear(b) // the callers change them once their batches fail
			}
		}
	}
	if !q.written() || !bytes.Equal(got, want) {
		t.Fatalf("wrote %d bytes of %d, equal %v", len(got), len(want), bytes.Equal(got, want))
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
			q.add(cmd, &free, false)
		}
		q.reset(&free)
	}
}

// TestLargeCommandsFromReusedBuffers: sessions that, as a client's read
// buffer is, build each batch's commands in one buffer they reuse for the
// next batch, with small commands and large ones (borrowed, written by
// writev in parts) mixed, from many goroutines on two connections: each
// ECHO's reply is its own value.
func TestLargeCommandsFromReusedBuffers(t *testing.T) {
	f := startFake(t, echoReply)
	p := testPool(t, f.ln.Addr().String(), 2)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			b := NewBatch()
			var buf []byte
			var ends []int
			var vals [][]byte
			for round := range 40 {
				b.Reset()
				buf, ends, vals = buf[:0], ends[:0], vals[:0]
				n := 1 + rng.IntN(4)
				for i := range n {
					size := 1 + rng.IntN(100)
					if rng.IntN(2) == 0 {
						size = borrowMin + rng.IntN(300<<10)
					}
					v := bytes.Repeat([]byte{byte('a' + (g+round+i)%26)}, size)
					buf = resp.AppendCommand(buf, []byte("ECHO"), v)
					ends = append(ends, len(buf))
					vals = append(vals, v)
				}
				start := 0
				for _, end := range ends {
					b.Add(buf[start:end])
					start = end
				}
				p.Do(b)
				for i, v := range vals {
					want := fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
					if string(b.Reply(i)) != want {
						errs <- fmt.Sprintf("goroutine %d round %d: reply %d of %d bytes is not its ECHO's value (%d bytes)", g, round, i, len(b.Reply(i)), len(v))
						return
					}
				}
				clear(buf) // the buffer is the session's again
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
