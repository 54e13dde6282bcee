package resp

import (
	"bytes"
	"testing"
)

// frameAll frames every reply in buf and returns how many it found.
func frameAll(b *testing.B, f *Framer, buf []byte) int {
	replies := 0
	for p := buf; len(p) > 0; {
		n, done, err := f.Next(p)
		if err != nil {
			b.Fatal(err)
		}
		if done {
			replies++
		}
		p = p[n:]
	}
	return replies
}

// BenchmarkFramerSmallReplies frames a pipeline of 1000 typical small
// replies held in one buffer.
func BenchmarkFramerSmallReplies(b *testing.B) {
	var buf []byte
	for range 500 {
		buf = append(buf, "+OK\r\n"...)
		buf = append(buf, "$10\r\n0123456789\r\n"...)
	}
	var f Framer
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if frameAll(b, &f, buf) != 1000 {
			b.Fatal("wrong reply count")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/reply")
}

// BenchmarkFramerLargeBulk frames a 1 MiB bulk string arriving in 16 KiB
// reads, the shape of a large GET.
func BenchmarkFramerLargeBulk(b *testing.B) {
	const size = 1 << 20
	buf := AppendBulk(nil, bytes.Repeat([]byte("x"), size))
	var f Framer
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		done := false
		for p := buf; len(p) > 0; {
			chunk := p[:min(len(p), 16<<10)]
			n, d, err := f.Next(chunk)
			if err != nil {
				b.Fatal(err)
			}
			done = d
			p = p[n:]
		}
		if !done {
			b.Fatal("reply not complete")
		}
	}
}

// BenchmarkFramerNested frames a HGETALL-like map and an array of arrays.
func BenchmarkFramerNested(b *testing.B) {
	var buf []byte
	buf = append(buf, "%50\r\n"...)
	for range 50 {
		buf = AppendBulk(buf, []byte("field:0001"))
		buf = AppendBulk(buf, []byte("value:0001"))
	}
	buf = append(buf, "*20\r\n"...)
	for range 20 {
		buf = append(buf, "*2\r\n:1\r\n$3\r\nabc\r\n"...)
	}
	var f Framer
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if frameAll(b, &f, buf) != 2 {
			b.Fatal("wrong reply count")
		}
	}
}

// BenchmarkRequestParser parses a pipeline of small SET and GET commands,
// and then one command with a 1 MiB value, in 16 KiB reads.
func BenchmarkRequestParser(b *testing.B) {
	var small []byte
	for range 500 {
		small = AppendCommandString(small, "SET", "key:000001", "0123456789")
		small = AppendCommandString(small, "GET", "key:000001")
	}
	large := AppendCommand(nil, []byte("SET"), []byte("key"), bytes.Repeat([]byte("x"), 1<<20))
	for _, bc := range []struct {
		name string
		buf  []byte
	}{{"SmallCommands", small}, {"LargeValue", large}} {
		b.Run(bc.name, func(b *testing.B) {
			var p RequestParser
			var cmds []Command
			b.SetBytes(int64(len(bc.buf)))
			b.ReportAllocs()
			for b.Loop() {
				for data := bc.buf; len(data) > 0; {
					buf := p.ReadBuffer()
					n := copy(buf[:min(len(buf), 16<<10)], data)
					data = data[n:]
					var err error
					if cmds, err = p.Parse(n, RequestLimits{}, cmds[:0]); err != nil {
						b.Fatal(err)
					}
				}
				p.Release()
			}
		})
	}
}
