package proxy

import (
	"testing"

	"github.com/rproxy/rproxy/resp"
)

// TestJoinHistograms: LATENCY HISTOGRAM of every master joins as one
// server's: calls added, cumulative buckets summed at every bound either
// master reports (a master's count at a bound it lacks is that of its
// last bound below), commands in the order first seen, in RESP2 and RESP3.
func TestJoinHistograms(t *testing.T) {
	a2 := "*4\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:43\r\n$14\r\nhistogram_usec\r\n*6\r\n:4\r\n:8\r\n:8\r\n:36\r\n:16\r\n:43\r\n" +
		"$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:2\r\n:1\r\n"
	b2 := "*4\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n*4\r\n:2\r\n:1\r\n:8\r\n:5\r\n" +
		"$3\r\ndel\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*2\r\n:1\r\n:2\r\n"
	want2 := "*6\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:48\r\n$14\r\nhistogram_usec\r\n*8\r\n:2\r\n:1\r\n:4\r\n:9\r\n:8\r\n:41\r\n:16\r\n:48\r\n" +
		"$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:2\r\n:1\r\n" +
		"$3\r\ndel\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*2\r\n:1\r\n:2\r\n"
	if got := string(joinHistograms([][]byte{[]byte(a2), []byte(b2)})); got != want2 {
		t.Errorf("RESP2:\n got %q\nwant %q", got, want2)
	}
	a3 := "%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:43\r\n$14\r\nhistogram_usec\r\n%3\r\n:4\r\n:8\r\n:8\r\n:36\r\n:16\r\n:43\r\n"
	b3 := "%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n%2\r\n:2\r\n:1\r\n:8\r\n:5\r\n"
	want3 := "%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:48\r\n$14\r\nhistogram_usec\r\n%4\r\n:2\r\n:1\r\n:4\r\n:9\r\n:8\r\n:41\r\n:16\r\n:48\r\n"
	if got := string(joinHistograms([][]byte{[]byte(a3), []byte(b3)})); got != want3 {
		t.Errorf("RESP3:\n got %q\nwant %q", got, want3)
	}
	// A command rproxy sends to every master ran once for the client.
	each := "*2\r\n$16\r\nconfig|resetstat\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:16\r\n:1\r\n"
	if got := string(joinHistograms([][]byte{[]byte(each), []byte(each), []byte(each)})); got != each {
		t.Errorf("CONFIG RESETSTAT on every master: %q, want one call %q", got, each)
	}
	// Nothing recorded anywhere; an error, or a reply of another shape,
	// is the first master's.
	if got := string(joinHistograms([][]byte{[]byte("*0\r\n"), []byte("*0\r\n")})); got != "*0\r\n" {
		t.Errorf("empty histograms: %q", got)
	}
	for _, replies := range [][][]byte{
		{[]byte("-ERR x\r\n"), []byte(b2)},
		{[]byte(a2), []byte(b3)},
		{[]byte(a2), []byte("*2\r\n$3\r\nset\r\n:1\r\n")},
	} {
		if got := joinHistograms(replies); string(got) != string(replies[0]) {
			t.Errorf("joinHistograms(%q) = %q, want the first", replies, got)
		}
	}
}

// FuzzJoinHistograms: any two masters' replies join without a panic, into
// a reply that parses.
func FuzzJoinHistograms(f *testing.F) {
	f.Add("*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:43\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:8\r\n", "*0\r\n")
	f.Add("%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n%1\r\n:2\r\n:1\r\n", "%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n%1\r\n:2\r\n:1\r\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		got := joinHistograms([][]byte{[]byte(a), []byte(b)})
		if _, err := resp.Parse(got); err != nil && string(got) != a {
			t.Fatalf("joinHistograms(%q, %q) = %q: %v", a, b, got, err)
		}
	})
}
