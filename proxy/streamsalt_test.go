package proxy_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/salt"
)

// TestClusterSaltedReadYourWritesFromStreamMode: a write of a salted key
// made by a client in stream mode (RESP3 with client tracking on, which is
// rueidis's default) deletes the key's copies before that client sees its
// reply, as a write outside stream mode does, so no read that follows the
// reply finds the old value in a copy: written alone, pipelined, in a
// transaction and by a script, on the writer's own connection's master and on the others
// (its branches). Before 2026-12-01 such writes left the copies to client
// tracking (off here: the tier is off), and copies served the old value
// for up to hotkeys.salt.ttl.
func TestClusterSaltedReadYourWritesFromStreamMode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second, Prefixes: []string{"hot:"}}
	})
	keys, _ := keyPerMaster(t, cl, "hot:")
	w := dialClient(t, p.Addr)
	w.do("HELLO", "3")
	if r := w.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON = %q", r)
	}
	acked := make([]atomic.Int64, len(keys))
	for _, k := range keys {
		if r := w.do("SET", k, "0"); r != "+OK\r\n" {
			t.Fatalf("SET %s: %q", k, r)
		}
	}
	var bad atomic.Value
	var readers []func() bool
	for i := range 4 {
		r := dialClient(t, p.Addr)
		j := i % len(keys)
		readers = append(readers, func() bool {
			j = (j + 1) % len(keys)
			floor := acked[j].Load()
			rep := r.doErr("GET", keys[j])
			v, ok := bulkInt(rep)
			if !ok {
				bad.CompareAndSwap(nil, "GET: "+rep)
				return false
			}
			if v < floor {
				bad.CompareAndSwap(nil, fmt.Sprintf("read %s = %d after %d was acknowledged", keys[j], v, floor))
			}
			return true
		})
	}
	stop := loopUntilStopped(readers...)
	for i := int64(1); i <= 400; i++ {
		j := int(i) % len(keys)
		k, v := keys[j], strconv.FormatInt(i, 10)
		switch (i / 3) % 4 {
		case 0:
			if r := w.do("SET", k, v); r != "+OK\r\n" {
				stop()
				t.Fatalf("SET: %q", r)
			}
		case 1:
			if r := w.pipeline([]string{"SET", k, v}, []string{"ECHO", "e"}); r != "+OK\r\n$1\r\ne\r\n" {
				stop()
				t.Fatalf("SET, ECHO: %q", r)
			}
		case 2:
			r := w.pipeline([]string{"MULTI"}, []string{"SET", k, v}, []string{"EXEC"})
			if r != "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n" {
				stop()
				t.Fatalf("MULTI, SET, EXEC: %q", r)
			}
		case 3:
			if r := w.do("EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", k, v); r != "+OK\r\n" {
				stop()
				t.Fatalf("EVAL: %q", r)
			}
		}
		acked[j].Store(i)
		if b := bad.Load(); b != nil {
			break
		}
	}
	stop()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	hits, _ := metricSum(t, p.Registry, "rproxy_hotkey_salt_reads_total", map[string]string{"outcome": "copy_hit"})
	if hits == 0 {
		t.Fatal("no read was served by a copy: the test proves nothing")
	}
	if got := string(dialClient(t, p.Addr).do("CLIENT", "LIST")); !strings.Contains(got, "flags=t") {
		t.Fatalf("the writer is not in stream mode (tracking) as CLIENT LIST shows it:\n%s", got)
	}
	t.Logf("400 writes from stream mode, %v reads from copies; no stale read", hits)
}
