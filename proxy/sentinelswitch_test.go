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
// Sentinels (SENTINEL FAILOVER: the old master stays up; two replicas)
// while clients INCR counters, run one-write transactions, read, and run
// WATCH loops. Commands wait from the leader's promotion of a replica to
// the first +switch-master (upstream.sentinel.failover_hold; the other
// Sentinels publish theirs as soon as the leader announces the new
// master, before it has reconfigured the other replica) and then go to
// the new master: no client of the shared connections gets an error, and every
// acknowledged increment is on the new master, no more, no fewer. Before,
// the old master acknowledged about a second of writes after the
// promotion (about 3,600 increments a key, measured with one replica),
// all lost when it became a replica, and the shared connections' 50 ms
// reconnect backoff failed some 1,200 commands with "upstream
// unavailable: master changed". A
// WATCH session pinned across the change is closed, as on any connection
// loss; its transactions that did run are counted once too.
func TestSentinelPlannedFailoverLosesNothing(t *testing.T) {
	g := redistest.StartSentinelReplicas(t, "mymaster", 2) // a common deployment: the other replica is reconfigured too
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

	var workers []*loadWorker
	for i := range 3 {
		workers = append(workers, counterWorkers("sf"+strconv.Itoa(i))...)
	}
	stop := runLoadWorkers(p.Addr, workers)
	waitAcked(t, workers, 300, "before the failover")
	if r := g.Sentinels[0].Do(t, "SENTINEL", "FAILOVER", g.Name); string(r) != "+OK\r\n" {
		t.Fatalf("SENTINEL FAILOVER: %q", r)
	}
	for deadline := time.Now().Add(30 * time.Second); sen.Failovers() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rproxy did not follow the failover within 30s")
		}
	}
	waitAcked(t, workers, ackedSum(workers)+300, "after the failover")
	stop()
	var promoted *redistest.Server
	for _, r := range g.Replicas {
		if r.Addr == sen.Master() {
			promoted = r
		}
	}
	if promoted == nil {
		t.Fatalf("rproxy's master %s is none of the replicas", sen.Master())
	}
	checkCounters(t, workers, func(key string) []byte { return promoted.Do(t, "GET", key) }, true)
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

// loadWorker is one client of a failover test: it sends cmds in one
// write, again and again, on one connection (dialled again after a
// failure), counting the replies that count (an INCR's, a transaction's
// that ran) and the errors.
type loadWorker struct {
	kind  string // incr, tx, get or watch
	key   string
	cmds  [][]string
	acked atomic.Int64
	errs  atomic.Int64
	last  atomic.Pointer[string]
}

// counterWorkers are a counter's INCR, a one-write transaction's INCR, a
// GET of the counter, and a WATCH loop's INCR, on keys named after
// prefix (and hash-tagged with it).
func counterWorkers(prefix string) []*loadWorker {
	k := "{" + prefix + "}"
	return []*loadWorker{
		{kind: "incr", key: k + "i", cmds: [][]string{{"INCR", k + "i"}}},
		{kind: "tx", key: k + "t", cmds: [][]string{{"MULTI"}, {"INCR", k + "t"}, {"EXEC"}}},
		{kind: "get", key: k + "i", cmds: [][]string{{"GET", k + "i"}}},
		{kind: "watch", key: k + "w", cmds: [][]string{{"WATCH", k + "w"}, {"GET", k + "w"}, {"MULTI"}, {"INCR", k + "w"}, {"EXEC"}}},
	}
}

// runLoadWorkers starts workers against addr; the returned stop ends
// them and waits.
func runLoadWorkers(addr string, workers []*loadWorker) (stop func()) {
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
					if nc, err = net.DialTimeout("tcp", addr, time.Second); err != nil {
						fail(err.Error())
						continue
					}
					rd = bufio.NewReader(nc)
				}
				replies, err := roundTrip(nc, rd, req, len(w.cmds))
				for i, r := range replies {
					if r[0] == '-' {
						fail(r)
					} else if i == len(w.cmds)-1 && (w.kind == "incr" || (w.kind == "tx" || w.kind == "watch") && r[0] == '*' && r[1] != '-') {
						w.acked.Add(1)
					}
				}
				if err != nil {
					fail("read: " + err.Error())
					nc.Close()
					nc = nil
				}
			}
			if nc != nil {
				nc.Close()
			}
		}()
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// waitAcked waits until workers have n replies acknowledged in all.
func waitAcked(t *testing.T, workers []*loadWorker, n int64, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ackedSum(workers) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d acknowledged, want %d", what, ackedSum(workers), n)
		}
	}
}

func ackedSum(workers []*loadWorker) int64 {
	var n int64
	for _, w := range workers {
		n += w.acked.Load()
	}
	return n
}

// checkCounters requires no error but a WATCH worker's (when
// watchMayFail: its pinned session may be closed) and each counter, as
// get reads it where it now lives, to hold exactly what was acknowledged
// (a WATCH worker's, up to one more per error: a session closed may
// have run its last transaction without hearing so).
func checkCounters(t *testing.T, workers []*loadWorker, get func(key string) []byte, watchMayFail bool) {
	t.Helper()
	for _, w := range workers {
		if n := w.errs.Load(); n > 0 && w.kind == "watch" && watchMayFail {
			t.Logf("WATCH on %s: %d errors (a pinned session is closed at the change), the last %q", w.key, n, *w.last.Load())
		} else if n > 0 {
			t.Errorf("%s on %s: %d errors, the last %q", w.kind, w.key, n, *w.last.Load())
		}
		if w.kind == "get" {
			continue
		}
		v, err := resp.Parse(get(w.key))
		got, _ := strconv.ParseInt(string(v.Str), 10, 64)
		if low, high := w.acked.Load(), w.acked.Load()+w.errs.Load(); err != nil || got < low || got > high {
			t.Errorf("%s: %s is %d where it now lives, want the %d acknowledged (up to %d)", w.kind, w.key, got, low, high)
		}
	}
}
