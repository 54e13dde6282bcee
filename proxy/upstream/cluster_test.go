package upstream

import (
	"slices"
	"testing"
)

// Replies captured from a Redis 7.0 cluster of three masters.
const (
	shardsReply = "*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n4138ab161bf128ccd9e647bd744e64e159c2b786\r\n$4\r\nport\r\n:17003\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n" +
		"*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n86db9c46589dc895fc496261aebf1dc24b18c10b\r\n$4\r\nport\r\n:17002\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n" +
		"*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:100\r\n:200\r\n:5460\r\n$5\r\nnodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n7ad7fbb0870803e691dee0103170339ab8e746ff\r\n$4\r\nport\r\n:17001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n" +
		"*14\r\n$2\r\nid\r\n$40\r\n9ad7fbb0870803e691dee0103170339ab8e746ff\r\n$4\r\nport\r\n:17004\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
	slotsReply = "*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:17001\r\n$40\r\n7ad7fbb0870803e691dee0103170339ab8e746ff\r\n*0\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$0\r\n\r\n:17002\r\n$40\r\n86db9c46589dc895fc496261aebf1dc24b18c10b\r\n*0\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:17003\r\n$40\r\n4138ab161bf128ccd9e647bd744e64e159c2b786\r\n*0\r\n"
)

func TestParseClusterShards(t *testing.T) {
	got, err := parseClusterShards([]byte(shardsReply), "10.0.0.9", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []shard{
		{master: "127.0.0.1:17003", ranges: [][2]int{{10923, 16383}}},
		{master: "127.0.0.1:17002", ranges: [][2]int{{5461, 10922}}}, // endpoint "?": the ip
		{master: "127.0.0.1:17001", ranges: [][2]int{{0, 100}, {200, 5460}}},
	}
	if !slices.EqualFunc(got, want, func(a, b shard) bool { return a.master == b.master && slices.Equal(a.ranges, b.ranges) }) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseClusterSlots(t *testing.T) {
	got, err := parseClusterSlots([]byte(slotsReply), "10.0.0.9")
	if err != nil {
		t.Fatal(err)
	}
	want := []shard{
		{master: "127.0.0.1:17001", ranges: [][2]int{{0, 5460}}},
		{master: "10.0.0.9:17002", ranges: [][2]int{{5461, 10922}}}, // no ip: the host asked
		{master: "127.0.0.1:17003", ranges: [][2]int{{10923, 16383}}},
	}
	if !slices.EqualFunc(got, want, func(a, b shard) bool { return a.master == b.master && slices.Equal(a.ranges, b.ranges) }) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseRedirect(t *testing.T) {
	for _, c := range []struct {
		in   string
		kind string
		slot int
		addr string
		ok   bool
	}{
		{"-MOVED 3999 127.0.0.1:6381\r\n", "moved", 3999, "127.0.0.1:6381", true},
		{"-ASK 1 [::1]:7000\r\n", "ask", 1, "[::1]:7000", true},
		{"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", "tryagain", -1, "", true},
		{"-MOVED 3999 :6381\r\n", "", 0, "", false}, // unknown endpoint
		{"-MOVED x 127.0.0.1:6381\r\n", "", 0, "", false},
		{"-MOVED\r\n", "", 0, "", false},
	} {
		kind, slot, addr, ok := parseRedirect([]byte(c.in))
		if kind != c.kind || slot != c.slot || addr != c.addr || ok != c.ok {
			t.Errorf("parseRedirect(%q) = %q %d %q %v", c.in, kind, slot, addr, ok)
		}
	}
}

// FuzzClusterReplies: the slot map and redirect parsers never panic on
// what a (broken) server might send, and what they accept is in range.
func FuzzClusterReplies(f *testing.F) {
	f.Add([]byte(shardsReply))
	f.Add([]byte(slotsReply))
	f.Add([]byte("-MOVED 1 a:1\r\n"))
	f.Add([]byte("*1\r\n*3\r\n:0\r\n:99999\r\n*2\r\n$1\r\na\r\n:1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func() ([]shard, error){
			func() ([]shard, error) { return parseClusterShards(b, "h", false) },
			func() ([]shard, error) { return parseClusterShards(b, "h", true) },
			func() ([]shard, error) { return parseClusterSlots(b, "h") },
		} {
			shards, err := parse()
			if err != nil {
				continue
			}
			for _, s := range shards {
				for _, r := range s.ranges {
					if r[0] < 0 || r[1] >= Slots || r[0] > r[1] {
						t.Fatalf("accepted range %v", r)
					}
				}
			}
		}
		parseRedirect(b)
	})
}
