package proxy_test

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// readUpTo reads c's frames up to the reply end (its bytes; "": the first
// reply that is not a push) and returns them run together, end excluded.
func readUpTo(c *rawClient, end string) string {
	var out strings.Builder
	for {
		f := string(c.read())
		if f == end || end == "" && f[0] != '>' {
			if end == "" {
				out.WriteString(f)
			}
			return out.String()
		}
		out.WriteString(f)
	}
}

// oneByOne sends cmds to c one at a time, each after the last one's reply,
// then PING end, and returns what came up to end's reply: the replies
// with the pushes before each.
func oneByOne(c *rawClient, cmds [][]string) string {
	var out strings.Builder
	for _, cmd := range cmds {
		c.send(resp.AppendCommandString(nil, cmd...))
		out.WriteString(readUpTo(c, ""))
	}
	c.send(resp.AppendCommandString(nil, "PING", "end"))
	out.WriteString(readUpTo(c, "$3\r\nend\r\n"))
	return out.String()
}

// TestClusterServerCommandsInTransaction: a server-wide command (FLUSHALL,
// FLUSHDB, DBSIZE, SCRIPT LOAD, KEYS) inside a transaction, or while a
// WATCH pins the session, ran on the pinned master alone: MULTI, FLUSHALL,
// EXEC left two masters' keys, and DBSIZE counted one master's. Each
// sequence here gets, through rproxy in front of three masters, the bytes
// one standalone Redis answers; a transaction that does not run (a failed
// WATCH, EXECABORT) changes nothing on any master. The same in stream
// mode (a RESP3 tracking client), where before 2026-11-29 such a command
// in a transaction still ran on one master.
func TestClusterServerCommandsInTransaction(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	direct := redistest.Start(t)
	keys := []string{"{t}a"}
	masters := map[*redistest.ClusterNode]bool{}
	for n := 0; len(masters) < 3 || len(keys) < 7; n++ {
		k := fmt.Sprintf("k%d", n)
		masters[cl.MasterForSlot(t, cl.Slot(k))] = true
		keys = append(keys, k)
	}
	seed := []string{"MSET"}
	for _, k := range keys {
		seed = append(seed, k, "v")
	}
	script := "return 1"
	sum := sha1.Sum([]byte(script))
	sha := hex.EncodeToString(sum[:])
	evalsha := [][]string{}
	for _, k := range keys {
		evalsha = append(evalsha, []string{"EVALSHA", sha, "1", k})
	}
	for _, tc := range []struct {
		name string
		pipe [][]string
	}{
		{"DBSIZE around a write", [][]string{{"MULTI"}, {"DBSIZE"}, {"SET", "{t}b", "1"}, {"DBSIZE"}, {"KEYS", "k1*"}, {"EXEC"}}},
		{"FLUSHALL then writes", [][]string{{"MULTI"}, {"SET", "{t}b", "1"}, {"FLUSHALL"}, {"SET", "{t}c", "1"}, {"DBSIZE"}, {"EXEC"}, {"DBSIZE"}, {"KEYS", "*"}}},
		{"FLUSHDB", [][]string{{"MULTI"}, {"FLUSHDB"}, {"EXEC"}, {"DBSIZE"}}},
		{"a queue-time error", [][]string{{"MULTI"}, {"FLUSHALL"}, {"NOSUCH"}, {"EXEC"}, {"DBSIZE"}}},
		{"a WATCH that fails", [][]string{{"WATCH", "{t}a"}, {"SET", "{t}a", "x"}, {"MULTI"}, {"FLUSHALL"}, {"EXEC"}, {"DBSIZE"}}},
		{"while watching", [][]string{{"WATCH", "{t}a"}, {"DBSIZE"}, {"FLUSHALL"}, {"MULTI"}, {"SET", "{t}a", "2"}, {"EXEC"}, {"DBSIZE"}}},
		{"SCRIPT LOAD", append([][]string{{"SCRIPT", "FLUSH"}, {"MULTI"}, {"SCRIPT", "LOAD", script}, {"EXEC"}}, evalsha...)},
		{"CONFIG SET of a node's own setting", [][]string{{"MULTI"}, {"CONFIG", "SET", "port", "1"}, {"EXEC"}, {"DBSIZE"}}},
	} {
		// Outside stream mode, and in it (RESP3 tracking: the session
		// runs on one master's connection and its branches), with the
		// commands in one write or one by one (a MULTI rproxy answers and
		// sends with its first command).
		for _, mode := range []string{"", "tracking", "tracking, one by one"} {
			var got [2]string
			for i, addr := range []string{direct.Addr, p.Addr} {
				c := dialClient(t, addr)
				c.pipeline([]string{"FLUSHALL"}, seed)
				if mode != "" {
					c.pipeline([]string{"HELLO", "3"}, []string{"CLIENT", "TRACKING", "ON"})
				}
				pipe := tc.pipe
				if i == 0 && tc.name == "CONFIG SET of a node's own setting" {
					// One Redis would move to port 1; what rproxy refuses
					// there is the point, and Redis's EXECABORT its form.
					pipe = [][]string{{"MULTI"}, {"NOSUCH"}, {"EXEC"}, {"DBSIZE"}}
				}
				switch mode {
				case "":
					got[i] = c.pipeline(pipe...)
				case "tracking":
					// Invalidation pushes come among the replies: read up
					// to a marker's.
					var batch []byte
					for _, cmd := range append(slices.Clone(pipe), []string{"PING", "end"}) {
						batch = resp.AppendCommandString(batch, cmd...)
					}
					c.send(batch)
					got[i] = readUpTo(c, "$3\r\nend\r\n")
				default:
					got[i] = oneByOne(c, pipe)
				}
				c.nc.Close()
			}
			if tc.name == "CONFIG SET of a node's own setting" {
				want := "+OK\r\n-ERR rproxy: CONFIG SET port is each cluster node's own setting, and on a cluster upstream CONFIG SET goes to every master; set it on each node\r\n" +
					"-EXECABORT Transaction discarded because of previous errors.\r\n" + fmt.Sprintf(":%d\r\n", len(keys))
				if got[1] != want {
					t.Errorf("%s (%s): through rproxy %q, want %q", tc.name, mode, got[1], want)
				}
				continue
			}
			if got[1] != got[0] {
				t.Errorf("%s (%s):\nrproxy %q\nRedis  %q", tc.name, mode, got[1], got[0])
			}
		}
	}
}

// TestClusterStreamInteractiveMulti: in stream mode (RESP3 tracking), a
// transaction typed command by command whose first commands have no key
// runs where its first key is, as on one Redis, whichever master the
// session's own connection is on: before 2026-11-29 it stayed on that
// master, and a key of another master failed there and aborted EXEC. A
// queue-time error among the keyless commands still aborts it, DISCARD
// still discards it.
func TestClusterStreamInteractiveMulti(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	direct := redistest.Start(t)
	masters := map[*redistest.ClusterNode]bool{}
	var keys []string
	for n := 0; len(masters) < 3 || len(keys) < 6; n++ {
		k := fmt.Sprintf("sm%d", n)
		masters[cl.MasterForSlot(t, cl.Slot(k))] = true
		keys = append(keys, k)
	}
	for _, k := range keys {
		for _, seq := range [][][]string{
			{{"MULTI"}, {"PING"}, {"SET", k, "1"}, {"INCR", k}, {"EXEC"}},
			{{"MULTI"}, {"PING"}, {"ECHO", "e"}, {"DBSIZE"}, {"SET", k, "1"}, {"DBSIZE"}, {"EXEC"}, {"GET", k}},
			{{"MULTI"}, {"NOSUCH"}, {"PING"}, {"SET", k, "2"}, {"EXEC"}, {"GET", k}},
			{{"MULTI"}, {"PING"}, {"SET", k, "3"}, {"DISCARD"}, {"GET", k}},
			{{"MULTI"}, {"SET", k, "4"}, {"PING"}, {"EXEC"}, {"GET", k}},
		} {
			var got [2]string
			for i, addr := range []string{direct.Addr, p.Addr} {
				c := dialClient(t, addr)
				c.pipeline([]string{"FLUSHALL"}, []string{"HELLO", "3"}, []string{"CLIENT", "TRACKING", "ON"})
				got[i] = oneByOne(c, seq)
				c.nc.Close()
			}
			if got[1] != got[0] {
				t.Errorf("%q:\nrproxy %q\nRedis  %q", seq, got[1], got[0])
			}
		}
	}
}
