package proxy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// TestClusterRemoveMasterUnderLoad: a master is drained and taken out of
// the cluster (its slots moved back to the others, after which Redis may
// make it a replica of the master that took its last slot, then CLUSTER
// FORGET everywhere and shut down, as redis-cli --cluster del-node does) while
// clients increment counters of its slots, run one-write transactions,
// read and run WATCH loops through rproxy, with the local tier on: no
// client error, every acknowledged increment where the key now lives,
// and afterwards the commands that run on every master (SCRIPT LOAD,
// DBSIZE, SCAN) and the tier work with the masters that are left.
func TestClusterRemoveMasterUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.HotKey.Tier = true })
	added := cl.AddMaster(t)
	var workers []*loadWorker
	home := map[int]*redistest.ClusterNode{} // each moved slot's master before and after
	for i := range 3 {
		prefix := "rm" + strconv.Itoa(i)
		slot := cl.Slot("{" + prefix + "}")
		home[slot] = cl.MasterForSlot(t, slot)
		cl.MigrateSlot(t, slot, added)
		workers = append(workers, counterWorkers(prefix)...)
	}
	stop := runLoadWorkers(p.Addr, workers)
	defer stop()
	waitAcked(t, workers, 300, "on the added master")
	for slot, n := range home {
		cl.MigrateSlot(t, slot, n)
	}
	waitAcked(t, workers, ackedSum(workers)+300, "after the drain")
	cl.RemoveNode(t, added)
	waitAcked(t, workers, ackedSum(workers)+300, "after the removal")
	stop()
	checkCounters(t, workers, func(key string) []byte { return cl.MasterForSlot(t, cl.Slot(key)).Do(t, "GET", key) }, false)

	c := dialClient(t, p.Addr)
	if r := c.do("SCRIPT", "LOAD", "return 1"); !strings.HasPrefix(r, "$40\r\n") {
		t.Errorf("SCRIPT LOAD after the removal: %q", r)
	}
	var keys int64
	for _, m := range cl.Masters() {
		v, err := resp.Parse(m.Do(t, "DBSIZE"))
		if err != nil {
			t.Fatal(err)
		}
		keys += v.Int
	}
	if r := c.do("DBSIZE"); r != ":"+strconv.FormatInt(keys, 10)+"\r\n" {
		t.Errorf("DBSIZE after the removal = %q, the masters hold %d keys", r, keys)
	}
	seen := map[string]bool{}
	for cursor := "0"; ; {
		v, err := resp.Parse([]byte(c.do("SCAN", cursor, "COUNT", "100")))
		if err != nil || len(v.Elems) != 2 {
			t.Fatalf("SCAN %s after the removal: %v %v", cursor, v, err)
		}
		for _, k := range v.Elems[1].Elems {
			seen[string(k.Str)] = true
		}
		if cursor = string(v.Elems[0].Str); cursor == "0" {
			break
		}
	}
	if int64(len(seen)) != keys {
		t.Errorf("SCAN after the removal found %d keys, the masters hold %d", len(seen), keys)
	}
	if r := c.do("INFO", "proxy"); strings.Contains(r, added.Addr) || !strings.Contains(r, "cluster_masters:3\r\n") {
		t.Errorf("INFO proxy after the removal still counts %s:\n%s", added.Addr, r)
	}
	waitFor(t, "the tier to serve with the masters left", func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_serving", nil) == 1
	})
}
