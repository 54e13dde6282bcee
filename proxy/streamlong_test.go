package proxy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/resp"
)

// TestStreamModeAsRedisLongSessions is TestStreamModeAsRedisRandomSequences
// without the RESET after each sequence: the state a sequence leaves
// (subscriptions, tracking, the protocol, the database, a name) carries
// over to the next sequence on its connection, and two connections on each
// side take turns, so one's PUBLISH reaches the other's subscriptions and
// one's writes invalidate keys the other tracks. Each sequence's replies
// are read in full before the next is sent; whatever Redis sent the other
// connection meanwhile is read, in its order, with that connection's next
// replies. A sequence ends with EXEC or DISCARD if it opened a
// transaction, RESET if it sent CLIENT REPLY (which Redis refuses in RESP2's
// subscribed mode, where only RESET turns replies back on), and PING with a
// marker (answered in subscribed mode too): its replies are read up to the
// marker's, so that all of it has run before the other connection's next
// sequence. Two sequences in a row share a key (k and n become k<seq/2>
// and n<seq/2>), so that a key one connection tracks is written by the
// other. Not one key for the whole run: Redis keeps a connection's tracked
// keys across RESET and a change of protocol, and invalidates them once
// it tracks again, where through rproxy RESP2 and RESP3 sessions track on
// connections of their own (docs/commands.md); with n shared, a RESP2
// read of n while tracking and an INCR n 28 sequences later in RESP3 gave
// Redis's stale invalidation only (seed 1795552263004573324, sequence 478). This test found CLIENT CACHING
// lost before a CLIENT command rproxy answers (TestStreamModeKeepsCachingFlag).
func TestStreamModeAsRedisLongSessions(t *testing.T) {
	servers := streamTestServers(t)
	p := proxytest.Start(t, servers[1].Addr)
	clients := [2][2]*rawClient{
		{dialClient(t, servers[0].Addr), dialClient(t, servers[0].Addr)},
		{dialClient(t, p.Addr), dialClient(t, p.Addr)},
	}
	pool := append(slices.Clip(streamPlainCommands), streamActedCommands...)
	rng := sequenceSource(t, 5, 6)
	var names []string
	defer func() {
		if t.Failed() {
			t.Logf("the sequence: %q", names)
		}
	}()
	for seq := 0; seq < 300; seq++ {
		who := rng.IntN(2)
		inMulti, replyOff, replyMode := false, false, false
		var batch []byte
		names = names[:0]
		add := func(cmd ...string) {
			batch = resp.AppendCommandString(batch, cmd...)
			names = append(names, strings.Join(cmd, " "))
		}
		for n := 1 + rng.IntN(10); n > 0; n-- {
			cmd := pool[rng.IntN(len(pool))]
			if inMulti {
				cmd = streamPlainCommands[rng.IntN(len(streamPlainCommands))]
			}
			if len(cmd) > 1 && (cmd[1] == "k" || cmd[1] == "n") {
				cmd = append([]string{cmd[0], fmt.Sprintf("%s%d", cmd[1], seq/2)}, cmd[2:]...)
			}
			if replyOff && cmd[0] == "SUBSCRIBE" && cmd[1] == "forbidden" {
				continue // rproxy cannot ask Redis for the mode then (TestStreamModeAsRedisRandomSequences)
			}
			switch strings.Join(cmd, " ") {
			case "MULTI":
				inMulti = true
			case "EXEC", "DISCARD", "RESET":
				inMulti, replyOff = false, replyOff && cmd[0] != "RESET"
			case "CLIENT REPLY OFF":
				replyOff = true
			case "CLIENT REPLY ON":
				replyOff = false
			}
			replyMode = replyMode || (cmd[0] == "CLIENT" && cmd[1] == "REPLY")
			add(cmd...)
		}
		if inMulti {
			add([]string{"EXEC", "DISCARD"}[rng.IntN(2)])
		}
		if replyMode {
			// Replies may be off: CLIENT REPLY ON is refused in RESP2's
			// subscribed mode. RESET turns them on in any mode.
			add("RESET")
		}
		// Read until the marker's answer, so that every command of the
		// sequence has run before the other connection's next one.
		marker := fmt.Sprintf("end-%d", seq)
		add("PING", marker)
		var got [2]string
		for i := range clients {
			c := clients[i][who]
			c.send(batch)
			got[i] = readUntilContains(t, c, marker)
			got[i] = helloIDField.ReplaceAllString(got[i], "id\r\n:ID")
			got[i] = clientInfoLine.ReplaceAllString(got[i], "CLIENT INFO db=$1")
		}
		if got[0] != got[1] {
			t.Fatalf("sequence %d on connection %d %q:\nRedis:  %q\nrproxy: %q", seq, who, names, got[0], got[1])
		}
	}
}

// readUntilContains reads c's replies until one holds marker, and returns
// them all.
func readUntilContains(t *testing.T, c *rawClient, marker string) string {
	t.Helper()
	var all strings.Builder
	for i := 0; i < 1000; i++ {
		r := string(c.read())
		all.WriteString(r)
		if strings.Contains(r, marker) {
			return all.String()
		}
	}
	t.Fatalf("no reply with %q in 1000: %q", marker, all.String())
	return ""
}
