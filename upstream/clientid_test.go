package upstream

import (
	"fmt"
	"testing"
)

// TestClientIDByAddr: the connection's line is found in CLIENT LIST's
// reply in both protocols, wherever Redis lists it: first too, where RESP3's
// verbatim string puts its "txt:" format before it (Redis rotates its
// client list, so any client comes first at times: CLIENT UNBLOCK through
// rproxy answered 0 then).
func TestClientIDByAddr(t *testing.T) {
	lines := "id=17 addr=127.0.0.1:36610 laddr=127.0.0.1:6379 fd=15 name= flags=b cmd=blpop\n" +
		"id=6 addr=127.0.0.1:36518 laddr=127.0.0.1:6379 fd=12 name= flags=N cmd=ping\n"
	for _, tc := range []struct{ kind, reply string }{
		{"RESP2 bulk", fmt.Sprintf("$%d\r\n%s\r\n", len(lines), lines)},
		{"RESP3 verbatim", fmt.Sprintf("=%d\r\ntxt:%s\r\n", len(lines)+4, lines)},
	} {
		for addr, want := range map[string]int64{"127.0.0.1:36610": 17, "127.0.0.1:36518": 6, "127.0.0.1:1": 0, "127.0.0.1:3661": 0} {
			if got := clientIDByAddr([]byte(tc.reply), addr); got != want {
				t.Errorf("%s: id of %s = %d, want %d", tc.kind, addr, got, want)
			}
		}
	}
	for _, bad := range []string{"-ERR no\r\n", "*0\r\n", "$5\r\nid=1\r\n", ""} {
		if got := clientIDByAddr([]byte(bad), "127.0.0.1:1"); got != 0 {
			t.Errorf("clientIDByAddr(%q) = %d, want 0", bad, got)
		}
	}
}
