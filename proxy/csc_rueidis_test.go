package proxy_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/rproxy/rproxy/internal/redistest"
)

// TestClusterRueidisClientSideCaching: rueidis with its default options,
// which turn client-side caching on (RESP3 tracking, OPTIN, and a cached
// read sent as CLIENT CACHING YES, MULTI, PTTL, GET, EXEC), given only
// rproxy's address in front of three masters: cached reads of every
// master's key hit its cache the second time, and another client's writes
// to every master's keys reach it (the next read misses and gets the new
// value). Before, the facade's answers came from one master in stream
// mode, and rueidis connected to the masters themselves; with that fixed
// and no tracking across masters, its reads of two masters' keys in three
// failed.
func TestClusterRueidisClientSideCaching(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "rue")
	var mu sync.Mutex
	var dialled []string
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{p.Addr},
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			mu.Lock()
			dialled = append(dialled, addr)
			mu.Unlock()
			return d.DialContext(ctx, "tcp", addr)
		},
	})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	defer c.Close()
	ctx := context.Background()
	for i, k := range keys {
		if err := c.Do(ctx, c.B().Set().Key(k).Value("v"+strconv.Itoa(i)).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for i, k := range keys {
		for n := range 2 {
			r := c.DoCache(ctx, c.B().Get().Key(k).Cache(), time.Minute)
			if v, err := r.ToString(); err != nil || v != "v"+strconv.Itoa(i) {
				t.Fatalf("cached GET %s: %q, %v", k, v, err)
			}
			if hit := r.IsCacheHit(); hit != (n == 1) {
				t.Fatalf("cached GET %s, read %d: cache hit %v", k, n+1, hit)
			}
		}
	}
	w := dialClient(t, p.Addr)
	for _, k := range keys {
		w.do("SET", k, "new")
	}
	for _, k := range keys {
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := c.DoCache(ctx, c.B().Get().Key(k).Cache(), time.Minute)
			v, err := r.ToString()
			if err != nil {
				t.Fatalf("cached GET %s after another client's write: %v", k, err)
			}
			if v == "new" && !r.IsCacheHit() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cached GET %s: still %q (hit %v) 5 s after another client's write", k, v, r.IsCacheHit())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Every connection rueidis made is to rproxy.
	mu.Lock()
	defer mu.Unlock()
	if len(dialled) == 0 {
		t.Fatal("rueidis dialled nothing through DialCtxFn")
	}
	for _, addr := range dialled {
		if addr != p.Addr {
			t.Fatalf("rueidis dialled %s, not rproxy (%s): %v", addr, p.Addr, dialled)
		}
	}
}
