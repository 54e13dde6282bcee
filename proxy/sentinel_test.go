package proxy_test

import (
	"bufio"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"net"
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

// TestSentinelFailoverUnderLoad: rproxy with upstream.mode sentinel in
// front of a master, a replica and three Sentinels. The master is
// SIGKILLed while clients write; once the Sentinels promote the replica,
// writes through rproxy succeed again within 5 s, with no restart. A
// session pinned (WATCH) across the failover is closed, the local tier is
// emptied, INFO names the new master, and no acknowledged write is lost.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	g := redistest.StartSentinel(t, "mymaster")
	sen, err := upstream.NewSentinel(upstream.SentinelConfig{MasterName: g.Name, Addresses: g.Addrs(),
		Check: 500 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	p := proxytest.Start(t, "sentinel/mymaster", func(c *proxy.Config) {
		c.Upstream.Sentinel = sen
		c.HotKey.Prefixes = []string{"cached:"}
	})
	c := dialClient(t, p.Addr)
	if info := c.do("INFO", "proxy"); !strings.Contains(info, "upstream_mode:sentinel\r\n") ||
		!strings.Contains(info, "sentinel_master:"+g.Master.Addr+"\r\n") || !strings.Contains(info, "sentinel_failovers:0\r\n") {
		t.Fatalf("INFO proxy before the failover:\n%s", info)
	}
	if r := c.do("SET", "cached:x", "1"); r != "+OK\r\n" {
		t.Fatalf("SET: %q", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.do("GET", "cached:x")
		if st, _ := p.Server.TierStats(); st.Entries > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cached:x never reached the local tier")
		}
	}
	pinned := dialClient(t, p.Addr)
	if r := pinned.do("WATCH", "w"); r != "+OK\r\n" {
		t.Fatalf("WATCH: %q", r)
	}

	// Writers: INCR a counter each; acknowledged increments are counted.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		lastErr time.Time // the last failed write
		errs    int
		acked   [4]atomic.Int64
	)
	for i := range acked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var nc net.Conn
			var rd *bufio.Reader
			key := "counter:" + string(rune('a'+i))
			for !stop.Load() {
				if nc == nil {
					var err error
					if nc, err = net.DialTimeout("tcp", p.Addr, time.Second); err != nil {
						continue
					}
					rd = bufio.NewReader(nc)
				}
				nc.SetDeadline(time.Now().Add(5 * time.Second))
				nc.Write(resp.AppendCommandString(nil, "INCR", key))
				r, err := resp.ReadReply(rd, nil)
				if err != nil {
					nc.Close()
					nc = nil
				}
				if err == nil && r[0] == ':' {
					acked[i].Add(1)
					continue
				}
				mu.Lock()
				errs++
				lastErr = time.Now()
				mu.Unlock()
			}
			if nc != nil {
				nc.Close()
			}
		}()
	}
	// Let them write a while before the kill (observable: acknowledgements).
	for deadline := time.Now().Add(5 * time.Second); ; {
		mu.Lock()
		n := acked[0].Load() + acked[1].Load() + acked[2].Load() + acked[3].Load()
		mu.Unlock()
		if n > 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writers made no progress before the kill")
		}
		time.Sleep(time.Millisecond)
	}

	killed := time.Now()
	g.Master.Kill()
	for !redistest.IsMaster(g.Replica) {
		if time.Since(killed) > 30*time.Second {
			t.Fatal("the replica was not promoted within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	promoted := time.Now()
	// Writes succeed again: wait for a run of successes after the promotion.
	var recovered time.Time
	for {
		mu.Lock()
		le := lastErr
		mu.Unlock()
		if time.Since(le) > 500*time.Millisecond && time.Since(promoted) > 500*time.Millisecond {
			recovered = le // the last error: writes have succeeded since
			break
		}
		if time.Since(promoted) > 15*time.Second {
			t.Fatalf("writes through rproxy still failing %v after the promotion (%d errors)", time.Since(promoted), errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	since, _ := sen.SinceChange()
	learnt := time.Now().Add(-since)
	stop.Store(true)
	wg.Wait()
	if recovered.Before(promoted) {
		recovered = promoted // no error after the promotion at all
	}
	t.Logf("kill -> promotion %v; promotion -> rproxy told of the new master %v; promotion -> writes succeed again %v; %d failed writes",
		promoted.Sub(killed).Round(time.Millisecond), learnt.Sub(promoted).Round(time.Millisecond), recovered.Sub(promoted).Round(time.Millisecond), errs)
	if d := recovered.Sub(promoted); d > 5*time.Second {
		t.Errorf("writes succeeded again %v after the promotion, want within 5s", d)
	}

	// Every acknowledged increment is on the new master (replication was
	// synchronous enough here: the replica had every write the master
	// acknowledged before it died, or the count is short).
	var lost int64
	for i := range acked {
		r := string(g.Replica.Do(t, "GET", "counter:"+string(rune('a'+i))))
		var n int64
		if v, err := resp.Parse([]byte(r)); err == nil {
			for _, ch := range v.Str {
				n = n*10 + int64(ch-'0')
			}
		}
		if n < acked[i].Load() {
			lost += acked[i].Load() - n
		}
	}
	t.Logf("acknowledged increments lost in the failover: %d of %d", lost, acked[0].Load()+acked[1].Load()+acked[2].Load()+acked[3].Load())

	if st, _ := p.Server.TierStats(); st.Entries != 0 {
		t.Errorf("local tier holds %d entries after the failover, want it emptied", st.Entries)
	}
	if v, _ := metricSum(t, p.Registry, "rproxy_upstream_sentinel_master_changes_total", nil); v != 1 {
		t.Errorf("rproxy_upstream_sentinel_master_changes_total = %v, want 1", v)
	}
	if v, _ := metricSum(t, p.Registry, "rproxy_upstream_sentinel_master_known", nil); v != 1 {
		t.Errorf("rproxy_upstream_sentinel_master_known = %v, want 1", v)
	}
	info := c.do("INFO", "proxy")
	if !strings.Contains(info, "sentinel_master:"+g.Replica.Addr+"\r\n") || !strings.Contains(info, "sentinel_failovers:1\r\n") {
		t.Errorf("INFO proxy after the failover:\n%s", info)
	}
	// The pinned session lost its connection with its WATCH: closed.
	pinned.nc.SetDeadline(time.Now().Add(5 * time.Second))
	pinned.nc.Write(resp.AppendCommandString(nil, "GET", "w"))
	r, err := resp.ReadReply(pinned.rd, nil)
	if err == nil {
		// Its command after the loss gets the error; then it is closed.
		if !strings.HasPrefix(string(r), "-ERR upstream unavailable") {
			t.Errorf("the WATCHing session's command after the failover: %q", r)
		}
		_, err = resp.ReadReply(pinned.rd, nil)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("the WATCHing session was not closed after the failover: %v", err)
	}
	if r := c.do("SET", "after", "1"); r != "+OK\r\n" {
		t.Errorf("SET after the failover: %q", r)
	}
}

// serverGetCalls is Redis's count of GET calls (INFO commandstats).
func serverGetCalls(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info := string(s.Do(t, "INFO", "commandstats"))
	i := strings.Index(info, "cmdstat_get:calls=")
	if i < 0 {
		return 0
	}
	rest := info[i+len("cmdstat_get:calls="):]
	n := 0
	for _, ch := range rest {
		if ch < '0' || ch > '9' {
			break
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

// TestSentinelReplicaReads: with replica read prefixes in sentinel mode,
// GETs of keys under them are served by the replica the Sentinels report,
// other GETs and every write by the master.
func TestSentinelReplicaReads(t *testing.T) {
	g := redistest.StartSentinel(t, "mymaster")
	sen, err := upstream.NewSentinel(upstream.SentinelConfig{MasterName: g.Name, Addresses: g.Addrs(),
		Check: 100 * time.Millisecond, Replicas: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Close)
	for deadline := time.Now().Add(10 * time.Second); len(sen.Replicas()) != 1 || sen.Replicas()[0] != g.Replica.Addr; {
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel reports replicas %v, want %s", sen.Replicas(), g.Replica.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	p := proxytest.Start(t, "sentinel/mymaster", func(c *proxy.Config) {
		c.Upstream.Sentinel = sen
		c.ReplicaReadPrefixes = []string{"ro:"}
		c.HotKey = nil
		c.Coalesce = nil
	})
	c := dialClient(t, p.Addr)
	if r := c.do("SET", "ro:k", "v"); r != "+OK\r\n" {
		t.Fatalf("SET ro:k: %q", r)
	}
	c.do("SET", "rw:k", "w")
	for deadline := time.Now().Add(10 * time.Second); string(g.Replica.Do(t, "GET", "ro:k")) != "$1\r\nv\r\n"; {
		if time.Now().After(deadline) {
			t.Fatal("ro:k never reached the replica")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The replica's pool connects on first use: read until it serves.
	for deadline, before := time.Now().Add(10*time.Second), serverGetCalls(t, g.Replica); serverGetCalls(t, g.Replica) <= before+1; {
		if time.Now().After(deadline) {
			t.Fatal("no GET reached the replica")
		}
		c.do("GET", "ro:k")
	}
	master, replica := serverGetCalls(t, g.Master), serverGetCalls(t, g.Replica)
	for range 10 {
		if r := c.do("GET", "ro:k"); r != "$1\r\nv\r\n" {
			t.Fatalf("GET ro:k: %q", r)
		}
	}
	if r := c.do("GET", "rw:k"); r != "$1\r\nw\r\n" {
		t.Fatalf("GET rw:k: %q", r)
	}
	// Each getCalls above runs INFO, not GET: the counts are the proxy's.
	if d := serverGetCalls(t, g.Replica) - replica; d != 10 {
		t.Errorf("the replica served %d GETs, want the 10 of ro:k", d)
	}
	if d := serverGetCalls(t, g.Master) - master; d != 1 {
		t.Errorf("the master served %d GETs, want the 1 of rw:k", d)
	}
	// In a transaction, reads stay on the master.
	c.send(resp.AppendCommandString(resp.AppendCommandString(resp.AppendCommandString(nil, "MULTI"), "GET", "ro:k"), "EXEC"))
	c.read()
	c.read()
	if r := string(c.read()); r != "*1\r\n$1\r\nv\r\n" {
		t.Errorf("EXEC: %q", r)
	}
	if d := serverGetCalls(t, g.Master) - master; d != 2 {
		t.Errorf("the master served %d GETs after the transaction, want 2", d)
	}
	expectScriptsCachedAsOnOneServer(t, c, "ro:k", "$1\r\nv\r\n")
}

// expectScriptsCachedAsOnOneServer: with reads of key going to replicas,
// a script is found cached as on one Redis (which a replica's cache, not
// replicated, would not do): EVALSHA_RO after SCRIPT LOAD, and EVALSHA
// after EVAL_RO. want is GET key's reply.
func expectScriptsCachedAsOnOneServer(t *testing.T, c *rawClient, key, want string) {
	t.Helper()
	const loaded, evaluated = "return redis.call('GET', KEYS[1])", "return redis.call('GET', KEYS[1]) or 'none'"
	sha := func(script string) string { return fmt.Sprintf("%x", sha1.Sum([]byte(script))) }
	if r, w := c.do("SCRIPT", "LOAD", loaded), "$40\r\n"+sha(loaded)+"\r\n"; r != w {
		t.Fatalf("SCRIPT LOAD = %q, want %q", r, w)
	}
	if r := c.do("EVALSHA_RO", sha(loaded), "1", key); r != want {
		t.Errorf("EVALSHA_RO after SCRIPT LOAD = %q, want %q", r, want)
	}
	if r := c.do("EVAL_RO", evaluated, "1", key); r != want {
		t.Errorf("EVAL_RO = %q, want %q", r, want)
	}
	if r := c.do("EVALSHA", sha(evaluated), "1", key); r != want {
		t.Errorf("EVALSHA after EVAL_RO = %q, want %q", r, want)
	}
	if r := c.do("EVALSHA_RO", sha(evaluated), "1", key); r != want {
		t.Errorf("EVALSHA_RO after EVAL_RO = %q, want %q", r, want)
	}
}
