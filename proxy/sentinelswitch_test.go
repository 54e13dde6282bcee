package proxy_test

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// TestSentinelPlannedFailoverLosesNothing: a failover asked of the
// Sentinels (SENTINEL FAILOVER: the old master stays up) while clients
// INCR counters, run one-write transactions, read, and run WATCH loops.
// Commands wait from the leader's promotion of the replica to the
// +switch-master (upstream.sentinel.failover_hold) and then go to the new
// master: no client of the shared connections gets an error, and every
// acknowledged increment is on the new master, no more, no fewer. Before,
// the old master acknowledged about a second of writes after the
// promotion (about 3,600 increments a key here), all lost when it became
// a replica, and the shared connections' 50 ms reconnect backoff failed
// some 1,200 commands with "upstream unavailable: master changed". A
// WATCH session pinned across the change is closed, as on any connection
// loss; its transactions that did run are counted once too.
func TestSentinelPlannedFailoverLosesNothing(t *testing.T) {
	g := redistest.StartSentinel(t, "mymaster")
	sen, err := upstream.NewSentinel(upstream.SentinelConfig{MasterName: g.Name, Addresses: g.Addrs(),
		FailoverHold: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	p := proxytest.Start(t, "sentinel/mymaster", func(c *proxy.Config) { c.Upstream.Sentinel = sen })
	// rproxy hears each Sentinel's events: only the failover's leader
	// tells of the promotion.
	for _, s := range g.Sentinels {
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(string(s.Do(t, "CLIENT", "LIST")), " sub=3 ") { // rproxy's three event channels
			if time.Now().After(deadline) {
				t.Fatalf("rproxy never subscribed to Sentinel %s's events", s.Addr)
			}
			time.Sleep(time.Millisecond)
		}
	}

	type worker struct {
		kind  string
		key   string
		cmds  [][]string
		acked atomic.Int64 // replies that count (an INCR's, a transaction's that ran)
		errs  atomic.Int64
		last  atomic.Pointer[string]
	}
	var workers []*worker
	for i := range 3 {
		k := "sf" + strconv.Itoa(i)
		workers = append(workers,
			&worker{kind: "incr", key: k + "i", cmds: [][]string{{"INCR", k + "i"}}},
			&worker{kind: "tx", key: k + "t", cmds: [][]string{{"MULTI"}, {"INCR", k + "t"}, {"EXEC"}}},
			&worker{kind: "get", key: k + "i", cmds: [][]string{{"GET", k + "i"}}},
			&worker{kind: "watch", key: k + "w", cmds: [][]string{{"WATCH", k + "w"}, {"GET", k + "w"}, {"MULTI"}, {"INCR", k + "w"}, {"EXEC"}}})
	}
	var (
		done atomic.Bool
		wg   sync.WaitGroup
	)
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var nc net.Conn
			var rd *bufio.Reader
			var req []byte
			for _, c := range w.cmds {
				req = resp.AppendCommandString(req, c...)
			}
			fail := func(why string) {
				w.errs.Add(1)
				w.last.Store(&why)
			}
			for !done.Load() {
				if nc == nil {
					var err error
					if nc, err = net.DialTimeout("tcp", p.Addr, time.Second); err != nil {
						fail(err.Error())
						continue
					}
					rd = bufio.NewReader(nc)
				}
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				nc.Write(req)
				for i := range w.cmds {
					r, err := resp.ReadReply(rd, nil)
					if err != nil {
						fail("read: " + err.Error())
						nc.Close()
						nc = nil
						break
					}
					if r[0] == '-' {
						fail(string(r))
						continue
					}
					if i == len(w.cmds)-1 && (w.kind == "incr" || (w.kind == "tx" || w.kind == "watch") && r[0] == '*' && r[1] != '-') {
						w.acked.Add(1)
					}
				}
			}
			if nc != nil {
				nc.Close()
			}
		}()
	}
	acked := func() int64 {
		var n int64
		for _, w := range workers {
			n += w.acked.Load()
		}
		return n
	}
	waitAcked := func(n int64, what string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); acked() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d acknowledged, want %d", what, acked(), n)
			}
		}
	}
	waitAcked(300, "before the failover")
	if r := g.Sentinels[0].Do(t, "SENTINEL", "FAILOVER", g.Name); string(r) != "+OK\r\n" {
		t.Fatalf("SENTINEL FAILOVER: %q", r)
	}
	for deadline := time.Now().Add(30 * time.Second); sen.Failovers() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rproxy did not follow the failover within 30s")
		}
	}
	waitAcked(acked()+300, "after the failover")
	done.Store(true)
	wg.Wait()

	for _, w := range workers {
		if w.kind == "watch" {
			if n := w.errs.Load(); n > 0 {
				t.Logf("WATCH on %s: %d errors (a pinned session is closed at the change), the last %q", w.key, n, *w.last.Load())
			}
		} else if n := w.errs.Load(); n > 0 {
			t.Errorf("%s on %s: %d errors, the last %q", w.kind, w.key, n, *w.last.Load())
		}
		if w.kind == "get" {
			continue
		}
		v, err := resp.Parse(g.Replica.Do(t, "GET", w.key))
		got, _ := strconv.ParseInt(string(v.Str), 10, 64)
		// A WATCH session closed at the change may have run its last
		// transaction without hearing so.
		if low, high := w.acked.Load(), w.acked.Load()+w.errs.Load(); err != nil || got < low || got > high {
			t.Errorf("%s: %s on the new master is %d, want the %d acknowledged (up to %d)", w.kind, w.key, got, low, high)
		}
	}
	for name, want := range map[string]float64{
		"rproxy_upstream_sentinel_master_changes_total":         1,
		"rproxy_upstream_sentinel_failover_holds_total":         1,
		"rproxy_upstream_sentinel_failover_holds_expired_total": 0,
		"rproxy_upstream_sentinel_held_commands":                0,
	} {
		if v, _ := metricSum(t, p.Registry, name, nil); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}
