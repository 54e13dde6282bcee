package proxy_test

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
)

// TestClusterServerCommandsInTransaction: a server-wide command (FLUSHALL,
// FLUSHDB, DBSIZE, SCRIPT LOAD, KEYS) inside a transaction, or while a
// WATCH pins the session, ran on the pinned master alone: MULTI, FLUSHALL,
// EXEC left two masters' keys, and DBSIZE counted one master's. Each
// sequence here gets, through rproxy in front of three masters, the bytes
// one standalone Redis answers; a transaction that does not run (a failed
// WATCH, EXECABORT) changes nothing on any master.
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
		var got [2]string
		for i, addr := range []string{direct.Addr, p.Addr} {
			c := dialClient(t, addr)
			c.pipeline([]string{"FLUSHALL"}, seed)
			pipe := tc.pipe
			if i == 0 && tc.name == "CONFIG SET of a node's own setting" {
				// One Redis would move to port 1; what rproxy refuses
				// there is the point, and Redis's EXECABORT its form.
				pipe = [][]string{{"MULTI"}, {"NOSUCH"}, {"EXEC"}, {"DBSIZE"}}
			}
			got[i] = c.pipeline(pipe...)
			c.nc.Close()
		}
		if tc.name == "CONFIG SET of a node's own setting" {
			want := "+OK\r\n-ERR rproxy: CONFIG SET port is each cluster node's own setting, and on a cluster upstream CONFIG SET goes to every master; set it on each node\r\n" +
				"-EXECABORT Transaction discarded because of previous errors.\r\n" + fmt.Sprintf(":%d\r\n", len(keys))
			if got[1] != want {
				t.Errorf("%s: through rproxy %q, want %q", tc.name, got[1], want)
			}
			continue
		}
		if got[1] != got[0] {
			t.Errorf("%s:\nrproxy %q\nRedis  %q", tc.name, got[1], got[0])
		}
	}
}
