package proxy_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// TestClusterAddMasterUnderLoad: a master is added to the cluster while
// clients increment counters through rproxy, and slots move to it (their
// first commands reach it by ASK and MOVED, before rproxy has a
// connection to it): 0 client errors, and every acknowledged increment is
// counted.
func TestClusterAddMasterUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	const clients, keys = 8, 64
	var acked [keys]atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		c := dialClient(t, p.Addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(keys)
				c.nc.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.nc.Write(resp.AppendCommandString(nil, "INCR", "ctr:"+strconv.Itoa(k))); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				r, err := resp.ReadReply(c.rd, nil)
				if err != nil || r[0] != ':' {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("INCR ctr:%d: %q %v", k, r, err))
					if err != nil {
						return
					}
					continue
				}
				acked[k].Add(1)
			}
		}()
	}
	waitAcked := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var sum int64
			for k := range keys {
				sum += acked[k].Load()
			}
			if sum >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d increments acknowledged, want %d", sum, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitAcked(500)
	added := cl.AddMaster(t)
	moved := map[int]bool{}
	for k := range 16 {
		slot := upstream.Slot([]byte("ctr:" + strconv.Itoa(k)))
		if !moved[slot] {
			moved[slot] = true
			cl.MigrateSlot(t, slot, added)
		}
	}
	var before int64
	for k := range keys {
		before += acked[k].Load()
	}
	waitAcked(before + 500) // traffic to the moved slots after the move
	close(stop)
	wg.Wait()
	if n := errs.Load(); n != 0 {
		t.Errorf("%d client errors while a master was added; first: %v", n, firstErr.Load())
	}
	for k := range keys {
		key := "ctr:" + strconv.Itoa(k)
		m := cl.MasterForSlot(t, upstream.Slot([]byte(key)))
		r := strings.TrimSpace(string(m.Do(t, "GET", key)))
		parts := strings.Split(r, "\r\n")
		got, _ := strconv.ParseInt(parts[len(parts)-1], 10, 64)
		if got != acked[k].Load() {
			t.Errorf("%s = %d on its master, but %d increments were acknowledged", key, got, acked[k].Load())
		}
	}
	if r := dialClient(t, p.Addr).do("INFO", "proxy"); !strings.Contains(r, "addr="+added.Addr+",state=up") {
		t.Errorf("INFO proxy does not list the added master %s as up:\n%s", added.Addr, r)
	}
}
