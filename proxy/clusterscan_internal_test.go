package proxy

import (
	"slices"
	"strconv"
	"testing"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// FuzzClusterScanCursor: a client's SCAN cursor and a master's SCAN reply,
// any bytes, give a request or Redis's invalid-cursor refusal and a reply
// or an error, never a panic; and the cursor made from a valid reply
// names the master walked (its own cursor kept) or the next master.
func FuzzClusterScanCursor(f *testing.F) {
	reply := func(cursor string, keys ...string) []byte {
		out := appendAggregate(nil, '*', 2)
		out = resp.AppendBulk(out, []byte(cursor))
		return resp.AppendCommandString(out, keys...)
	}
	f.Add("0", reply("17", "a", "b"), uint16(5000))
	f.Add("0", reply("0"), uint16(0))
	f.Add(strconv.FormatUint(5461<<scanNodeBits|99, 10), reply("0", "k#rproxy-copy-1"), uint16(5461))
	f.Add("18446744073709551615", reply("1125899906842623"), uint16(16383))
	f.Add("-1", []byte("*2\r\n$1\r\n0\r\n*-1\r\n"), uint16(1))
	f.Add("+1", []byte("*11111111111111\r\n"), uint16(2))
	f.Fuzz(func(t *testing.T, cursor string, masterReply []byte, second uint16) {
		shards := []int{0}
		if s := int(second) % upstream.Slots; s > 0 {
			shards = append(shards, s)
		}
		r := &routing{}
		slot, raw, m, ok := r.scanPart(shards, [][]byte{[]byte("SCAN"), []byte(cursor)})
		if !ok {
			return
		}
		if !slices.Contains(shards, slot) && cursor == "0" {
			t.Fatalf("cursor 0 goes to slot %d, not the first master's", slot)
		}
		if _, err := resp.Parse(raw); err != nil {
			t.Fatalf("request %q: %v", raw, err)
		}
		m.hideCopies = second%2 == 1
		// KEYS and RANDOMKEY join the same replies' shapes; what Redis
		// sends is one whole value (the upstream reader frames it).
		joined := merge{kind: mergeKeys, parts: 2, hideCopies: m.hideCopies, randN: func(n int) int { return n - 1 }}
		for _, j := range [][]byte{joined.keys([][]byte{masterReply, masterReply}), joined.randomKey([][]byte{masterReply, masterReply})} {
			if _, err := resp.Parse(masterReply); err != nil {
				break
			}
			if _, err := resp.Parse(j); err != nil {
				t.Fatalf("KEYS or RANDOMKEY joined %q from %q: %v", j, masterReply, err)
			}
		}
		out := m.scanReply(masterReply)
		v, err := resp.Parse(out)
		if err != nil {
			t.Fatalf("reply %q: %v", out, err)
		}
		if v.Kind == '-' {
			return
		}
		if v.Kind != '*' || len(v.Elems) != 2 {
			t.Fatalf("reply %q is not a SCAN reply", out)
		}
		made, err := strconv.ParseUint(string(v.Elems[0].Str), 10, 64)
		if err != nil {
			t.Fatalf("cursor made %q: %v", v.Elems[0].Str, err)
		}
		elems, _ := arrayElements(masterReply)
		mv, _ := resp.Parse(elems[0])
		node, _ := strconv.ParseUint(string(mv.Str), 10, 64)
		switch {
		case node != 0 && (int(made>>scanNodeBits) != slot || made&scanNodeMask != node):
			t.Fatalf("master cursor %d on slot %d gave %d", node, slot, made)
		case node == 0 && made != 0 && int(made>>scanNodeBits) != m.scanNext:
			t.Fatalf("a finished master gave cursor %d, not the next master's slot %d", made, m.scanNext)
		case node == 0 && made == 0 && m.scanNext >= 0:
			t.Fatalf("the walk ended before the master at slot %d", m.scanNext)
		}
	})
}
