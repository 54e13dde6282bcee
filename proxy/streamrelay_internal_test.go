package proxy

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Redis's answers to errorCmd: Redis 7 quotes the name, Redis 6
// backquotes it.
const (
	markerReply7 = "-ERR unknown command 'rproxy-error', with args beginning with: \r\n"
	markerReply6 = "-ERR unknown command `rproxy-error`, with args beginning with: \r\n"
)

// relayAll writes stream through a relay in writes of the given sizes
// (cycled), after queueing refusals, and returns what reached the client.
func relayAll(t *testing.T, stream string, sizes []int, refusals ...string) string {
	t.Helper()
	var out bytes.Buffer
	r := newStreamRelay(&out, false)
	for _, f := range refusals {
		r.substitute([]byte(f))
	}
	writeInPieces(t, r, stream, sizes)
	return out.String()
}

// writeInPieces writes stream to r in writes of the given sizes (cycled).
func writeInPieces(t *testing.T, r *streamRelay, stream string, sizes []int) {
	t.Helper()
	p := []byte(stream)
	for i := 0; len(p) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(p))
		if k, err := r.Write(p[:n]); k != n || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
		}
		p = p[n:]
	}
}

func TestStreamRelayReplacesMarkerReplies(t *testing.T) {
	push := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n"
	// clientErrorCmd's answers, from Redis 7 and 6, stand for refusals too.
	in := "+QUEUED\r\n" + markerReply7 + push + "-ERR other\r\n" + markerReply6 + ":1\r\n" +
		string(clientErrorAnswers[0]) + string(clientErrorAnswers[1])
	want := "+QUEUED\r\n-DENIED one\r\n" + push + "-ERR other\r\n-DENIED two\r\n:1\r\n:3\r\n$0\r\n\r\n"
	refusals := []string{"-DENIED one\r\n", "-DENIED two\r\n", ":3\r\n", "$0\r\n\r\n"}
	// Every split of the stream into two writes, and byte by byte.
	for cut := 0; cut <= len(in); cut++ {
		if got := relayAll(t, in, []int{max(cut, 1), len(in)}, refusals...); got != want {
			t.Fatalf("cut at %d: got %q, want %q", cut, got, want)
		}
	}
	if got := relayAll(t, in, []int{1}, refusals...); got != want {
		t.Fatalf("byte by byte: got %q, want %q", got, want)
	}
}

// Only Redis's own rejection of the marker command is replaced: not the
// marker inside another error, a message or a bulk string, and not when no
// refusal waits (the client sent the command itself).
func TestStreamRelayLeavesEverythingElse(t *testing.T) {
	for _, in := range []string{
		"-ERR unknown command 'get', with args beginning with: 'rproxy-error' \r\n",
		"-ERR unknown command 'rproxy-error2', with args beginning with: \r\n",
		"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$" + strconv.Itoa(len(markerReply7)) + "\r\n" + markerReply7 + "\r\n",
		"+" + strings.TrimPrefix(markerReply7, "-"),
		"-" + strings.Repeat("x", 2*maxHeldError) + "\r\n",
	} {
		for _, sizes := range [][]int{{1 << 16}, {1}, {7}} {
			if got := relayAll(t, in, sizes, "-DENIED x\r\n"); got != in {
				t.Fatalf("writes of %v: got %q, want it unchanged %q", sizes, got, in)
			}
		}
	}
	if got := relayAll(t, markerReply7, []int{64}); got != markerReply7 {
		t.Fatalf("no refusal waiting: got %q", got)
	}
}

// A stream that is not RESP (a replica's RDB payload has no CRLF after it)
// stops the relay's framing: everything is passed on unchanged after that.
func TestStreamRelayPassesUnframableStreams(t *testing.T) {
	in := "+FULLRESYNC abc 0\r\n\n$5\r\nREDIS*1\r\n$4\r\nPING\r\n" + markerReply7
	for _, sizes := range [][]int{{1 << 16}, {1}, {3}} {
		if got := relayAll(t, in, sizes, "-DENIED x\r\n"); got != in {
			t.Fatalf("writes of %v: got %q, want it unchanged", sizes, got)
		}
	}
	// A partial error held when framing fails is passed on too.
	in = "-ERR unknown command 'rproxy-ref\r\n\x00"
	if got := relayAll(t, in, []int{20, 100}, "-DENIED x\r\n"); got != in {
		t.Fatalf("got %q, want it unchanged", got)
	}
}

// The end marker sent after a RESET: the copy ends at Redis's rejection of
// it, which is dropped, however the stream is cut into writes; the +RESET
// just before it is held back for the session (streamEnd.reset), and there
// is none if Redis refused the RESET. A status reply like +RESET earlier (a
// script's) is passed on and ends nothing, nor the rejection of another
// unknown command.
func TestStreamRelayEndsAtResetMarker(t *testing.T) {
	before := "+OK\r\n+RESET\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$6\r\n+RESET\r\n+RESET\r\n" + markerReply7 +
		"+RESET\r\n-ERR unknown command 'rproxy-end-x', with args beginning with: \r\n+RESETS\r\n"
	shown := "+OK\r\n+RESET\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$6\r\n+RESET\r\n+RESET\r\n-DENIED x\r\n" +
		"+RESET\r\n-ERR unknown command 'rproxy-end-x', with args beginning with: \r\n+RESETS\r\n"
	end7 := "-ERR unknown command 'rproxy-end-xy', with args beginning with: \r\n"
	end6 := "-ERR unknown command `rproxy-end-xy`, with args beginning with: \r\n"
	for _, tc := range []struct {
		in, want string
		reset    string
	}{
		{before + "+RESET\r\n" + end7, shown, "+RESET\r\n"},
		{before + "+RESET\r\n" + end6, shown, "+RESET\r\n"},
		{before + "-NOPERM no\r\n" + end7, shown + "-NOPERM no\r\n", ""},
	} {
		for _, size := range []int{1, 2, 3, 5, 8, 64, len(tc.in)} {
			var out bytes.Buffer
			r := newStreamRelay(&out, false)
			r.substitute([]byte("-DENIED x\r\n"))
			e := newStreamEnd([]byte("rproxy-end-xy"))
			if got := string(e.command()); got != "*1\r\n$13\r\nrproxy-end-xy\r\n" {
				t.Fatalf("end marker command = %q", got)
			}
			r.endAfterReset(e)
			var err error
			for b := []byte(tc.in); len(b) > 0 && err == nil; {
				k := min(size, len(b))
				_, err = r.Write(b[:k])
				b = b[k:]
			}
			if err != errStreamReset || out.String() != tc.want || string(e.reset) != tc.reset {
				t.Fatalf("%q in writes of %d: %q, %v, reset %q; want %q, errStreamReset, reset %q",
					tc.in, size, out.String(), err, e.reset, tc.want, tc.reset)
			}
		}
	}
}

// rewriteNext: errorCmd's answer is dropped and the reply after it (pushes
// aside) gets the session's id, however the stream is cut into writes.
func TestStreamRelayRewritesTheNextReply(t *testing.T) {
	push := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n"
	hello := func(id string) string {
		return "%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$2\r\nid\r\n:" + id + "\r\n$5\r\nproto\r\n:3\r\n"
	}
	in := "+OK\r\n" + markerReply7 + push + hello("812") + hello("813")
	want := "+OK\r\n" + push + hello("42") + hello("813")
	for _, size := range []int{1, 2, 5, 13, 1 << 16} {
		var out bytes.Buffer
		r := newStreamRelay(&out, false)
		r.rewriteNext(func(b []byte) []byte { return helloWithID(b, 42) })
		for p := []byte(in); len(p) > 0; {
			k := min(size, len(p))
			if _, err := r.Write(p[:k]); err != nil {
				t.Fatal(err)
			}
			p = p[k:]
		}
		if out.String() != want {
			t.Fatalf("writes of %d: got %q, want %q", size, out.String(), want)
		}
	}
}

// With no refusal waiting, any byte stream reaches the client unchanged,
// however it is cut into writes (but for the start of an error the stream
// ends in, which is still held: the client is closed then anyway).
func FuzzStreamRelay(f *testing.F) {
	f.Add([]byte("+OK\r\n-ERR x\r\n>2\r\n$1\r\na\r\n:1\r\n"), uint8(3))
	f.Add([]byte(markerReply7+markerReply6), uint8(1))
	f.Add([]byte("$5\r\nREDIS*1\r\n$4\r\nPING\r\n"), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		var out bytes.Buffer
		r := newStreamRelay(&out, false)
		n := int(step%16) + 1
		for p := in; len(p) > 0; {
			k := min(n, len(p))
			if w, err := r.Write(p[:k]); w != k || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			p = p[k:]
		}
		if got := append(out.Bytes(), r.held...); !bytes.Equal(got, in) {
			t.Fatalf("relayed %q, want %q", got, in)
		}
	})
}

// BenchmarkStreamRelay: the relay's cost on a pub/sub stream (RESP3
// pushes of 100-byte messages, 64 KB writes as the copy makes them).
func BenchmarkStreamRelay(b *testing.B) {
	msg := ">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$100\r\n" + strings.Repeat("m", 100) + "\r\n"
	chunk := []byte(strings.Repeat(msg, (64<<10)/len(msg)))
	r := newStreamRelay(io.Discard, false)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(chunk)/len(msg))), "ns/msg")
}

// With answers waiting (an error to show, a reply to rewrite, a mode
// probe, an end marker), any byte stream is relayed without a panic or an
// error, but the end of the copy at the probe's answer.
func FuzzStreamRelayAnswers(f *testing.F) {
	f.Add([]byte(markerReply7+markerReply7+"%1\r\n$2\r\nid\r\n:5\r\n+RESET\r\n-ERR unknown command 'rproxy-end-m1', with args beginning with: \r\n"), uint8(1))
	f.Add([]byte(markerReply6+">1\r\n:1\r\n-ERR x\r\n"+markerReply7+"*2\r\n$2\r\nid\r\n:5\r\n"), uint8(7))
	f.Add([]byte("*2\r\n$4\r\npong\r\n$2\r\nm2\r\n$2\r\nm2\r\n*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n"), uint8(3))
	f.Add(append(slices.Clone(clientErrorAnswers[0]), markerReply7+"+RESET\r\n"...), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		r := newStreamRelay(io.Discard, true)
		r.substitute([]byte("-DENIED x\r\n"))
		r.rewriteNext(func(b []byte) []byte { return helloWithID(b, 42) })
		r.substitute([]byte("-DENIED y\r\n"))
		r.probe(newModeProbe([]byte("m2")))
		r.endAfterReset(newStreamEnd([]byte("rproxy-end-m1")))
		n := int(step%16) + 1
		for p := in; len(p) > 0; {
			k := min(n, len(p))
			w, err := r.Write(p[:k])
			if err == errStreamReset {
				return
			}
			if w != k || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			p = p[k:]
		}
	})
}

// A modeProbe's answer, in either mode, is dropped and reports the mode,
// however the stream is split; what comes around it (a message, a bulk
// string that only starts like the answer, a longer array) passes on.
func TestStreamRelayAnswersModeProbes(t *testing.T) {
	msg := "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
	for _, tc := range []struct {
		answer     string
		subscribed bool
	}{
		{"*2\r\n$4\r\npong\r\n$5\r\nmark1\r\n", true},
		{"$5\r\nmark1\r\n", false},
	} {
		before := msg + "$6\r\nmark1x\r\n" + "*2\r\n$4\r\npong\r\n$5\r\nmark2\r\n"
		after := msg + "$" + strconv.Itoa(200) + "\r\n" + strings.Repeat("m", 200) + "\r\n"
		in := before + tc.answer + after
		for _, size := range []int{1, 3, 7, len(in)} {
			var out bytes.Buffer
			r := newStreamRelay(&out, false)
			p := newModeProbe([]byte("mark1"))
			if got := string(p.command()); got != "*2\r\n$4\r\nPING\r\n$5\r\nmark1\r\n" {
				t.Fatalf("probe command = %q", got)
			}
			r.probe(p)
			for b := []byte(in); len(b) > 0; {
				n := min(size, len(b))
				if k, err := r.Write(b[:n]); k != n || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
				}
				b = b[n:]
			}
			if got, want := out.String(), before+after; got != want {
				t.Fatalf("%q in writes of %d: got %q, want %q", tc.answer, size, got, want)
			}
			select {
			case got := <-p.result:
				if got != tc.subscribed {
					t.Fatalf("%q: subscribed = %v, want %v", tc.answer, got, tc.subscribed)
				}
			default:
				t.Fatalf("%q in writes of %d: no result", tc.answer, size)
			}
			if r.probing.Load() != nil {
				t.Fatalf("the probe still waits after its answer")
			}
		}
	}
}

// TestStreamRelayHidesOwnMonitorLines: in MONITOR mode the lines hideLine
// reports are dropped whole, whatever the writes' sizes, long ones too (a
// SCRIPT LOAD of rproxy's carries a script: it leaked when it came in
// pieces, past 128 bytes); others, long ones and errors pass as sent, and
// outside MONITOR mode nothing is dropped.
func TestStreamRelayHidesOwnMonitorLines(t *testing.T) {
	own := "+1.0 [0 127.0.0.1:1] \"PING\"\r\n"
	other := "+1.1 [0 127.0.0.1:2] \"PING\"\r\n"
	long := "+1.2 [0 127.0.0.1:1] \"SET\" \"k\" \"" + strings.Repeat("v", 300) + "\"\r\n"
	// rproxy's SCRIPT LOAD carries a script's text: long, and own.
	ownLong := "+1.3 [0 127.0.0.1:1] \"SCRIPT\" \"LOAD\" \"" + strings.Repeat("x", 3000) + "\"\r\n"
	stream := own + other + own + long + ownLong + "-ERR x\r\n" + own
	hide := func(line []byte) bool {
		return bytes.Contains(line, []byte("127.0.0.1:1] \"PING\"")) || bytes.Contains(line, []byte("127.0.0.1:1] \"SCRIPT\" \"LOAD\""))
	}
	for _, sizes := range [][]int{{1}, {3, 7}, {len(stream)}} {
		for _, monitoring := range []bool{true, false} {
			var out bytes.Buffer
			r := newStreamRelay(&out, false)
			r.hideLine = hide
			r.monitoring.Store(monitoring)
			writeInPieces(t, r, stream, sizes)
			want := stream
			if monitoring {
				want = other + long + "-ERR x\r\n"
			}
			if out.String() != want {
				t.Errorf("sizes %v, monitoring %v: %q, want %q", sizes, monitoring, out.String(), want)
			}
		}
	}
}

// TestStreamRelayHidesOwnMonitorLinesWhileResetting: the client's RESET
// ends MONITOR, and until Redis's +RESET every status line is held to see
// whether it is that one. A MONITOR line of rproxy's own that came in
// between (a spare connection's ROLE, dialled in mode sentinel when MONITOR
// took a connection) was shown: Redis's Tcl suite ("RESET clears MONITOR
// state", in database 0 through a Sentinel) read "ROLE" where it wanted
// RESET. Lines of others still show, and the RESET ends the copy.
func TestStreamRelayHidesOwnMonitorLinesWhileResetting(t *testing.T) {
	own := "+1.0 [0 127.0.0.1:1] \"ROLE\"\r\n"
	other := "+1.1 [0 127.0.0.1:2] \"PING\"\r\n"
	end := "-ERR unknown command 'rproxy-end-m1', with args beginning with: \r\n"
	stream := own + other + "+RESET\r\n" + end
	for _, size := range []int{1, 3, 7, len(stream)} {
		var out bytes.Buffer
		r := newStreamRelay(&out, false)
		r.hideLine = func(line []byte) bool { return bytes.Contains(line, []byte("127.0.0.1:1]")) }
		r.monitoring.Store(true)
		e := newStreamEnd([]byte("rproxy-end-m1"))
		r.endAfterReset(e)
		var err error
		for p := []byte(stream); len(p) > 0 && err == nil; {
			k := min(size, len(p))
			_, err = r.Write(p[:k])
			p = p[k:]
		}
		if err != errStreamReset {
			t.Fatalf("size %d: the copy did not end at the marker's answer: %v", size, err)
		}
		if out.String() != other {
			t.Errorf("size %d: %q shown before the RESET, want only %q", size, out.String(), other)
		}
		if string(e.reset) != "+RESET\r\n" {
			t.Errorf("size %d: the RESET's reply held back: %q", size, e.reset)
		}
	}
}

// TestStreamRelayCountsShardChannels: once shard channels are counted, the
// pin's ssubscribe and sunsubscribe confirmations (RESP2 arrays, RESP3
// pushes, long channels, while a mode probe waits too) show the session's
// count, the pin's own plus the other masters' (2 here), in writes of any
// size; messages, other arrays and the probe's answer pass as sent, and
// nothing is rewritten before counting starts.
func TestStreamRelayCountsShardChannels(t *testing.T) {
	long := strings.Repeat("c", 300)
	conf := func(kind, name, ch string, n int) string {
		return kind + "3\r\n$" + strconv.Itoa(len(name)) + "\r\n" + name + "\r\n$" + strconv.Itoa(len(ch)) + "\r\n" + ch + "\r\n:" + strconv.Itoa(n) + "\r\n"
	}
	msg := "*3\r\n$8\r\nsmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n*2\r\n$10\r\nssubscribe\r\n$1\r\nx\r\n"
	in := conf("*", "ssubscribe", "a", 1) + msg + conf(">", "ssubscribe", long, 2) +
		conf("*", "sunsubscribe", long, 1) + conf(">", "sunsubscribe", "a", 0) + "$5\r\nmark1\r\n"
	want := conf("*", "ssubscribe", "a", 3) + msg + conf(">", "ssubscribe", long, 4) +
		conf("*", "sunsubscribe", long, 3) + conf(">", "sunsubscribe", "a", 2)
	for _, size := range []int{1, 2, 5, 64, 129, len(in)} {
		for _, probing := range []bool{false, true} {
			var out bytes.Buffer
			r := newStreamRelay(&out, true)
			r.shards.pinAddr = "pin:1"
			r.shards.start()
			r.shards.rewriteOne("other:2", []byte(conf(">", "ssubscribe", "b", 2)))
			p := newModeProbe([]byte("mark1"))
			if probing {
				r.probe(p)
			}
			writeInPieces(t, r, in, []int{size})
			w := want
			if !probing {
				w += "$5\r\nmark1\r\n"
			}
			if got := out.String(); got != w {
				t.Fatalf("writes of %d, probing %v:\n got %q\nwant %q", size, probing, got, w)
			}
			if got := r.shards.others("other:2"); got != 0 {
				t.Fatalf("writes of %d: the pin holds %d after its last confirmation, want 0", size, got)
			}
		}
	}
	var out bytes.Buffer
	r := newStreamRelay(&out, true)
	writeInPieces(t, r, conf("*", "ssubscribe", "a", 1), []int{3})
	if got, want := out.String(), conf("*", "ssubscribe", "a", 1); got != want {
		t.Fatalf("before counting: got %q, want %q", got, want)
	}
}
