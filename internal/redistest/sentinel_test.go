package redistest

import "testing"

// TestStartSentinel: the group starts with the master as master, and the
// Sentinels name it.
func TestStartSentinel(t *testing.T) {
	g := StartSentinel(t, "mymaster")
	if !IsMaster(g.Master) || IsMaster(g.Replica) {
		t.Fatal("roles at start: want the master as master and the replica as replica")
	}
	for _, s := range g.Sentinels {
		want := "*2\r\n$9\r\n127.0.0.1\r\n$" + itoaLen(g.Master.Port) + "\r\n"
		if got := string(s.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")); got[:len(want)] != want {
			t.Errorf("%s names the master %q", s.Addr, got)
		}
	}
}

func itoaLen(port int) string {
	n := 0
	for ; port > 0; port /= 10 {
		n++
	}
	return string(rune('0' + n))
}
