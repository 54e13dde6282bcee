package proxy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
)

// scanAll runs SCAN through c from cursor 0 until it ends, with extra
// arguments (MATCH, COUNT, TYPE), and returns every key it gave, each once.
func scanAll(t *testing.T, c *rawClient, extra ...string) []string {
	t.Helper()
	seen := map[string]bool{}
	cursor := "0"
	for calls := 0; ; calls++ {
		if calls > 10000 {
			t.Fatalf("SCAN %v: no end after %d calls", extra, calls)
		}
		r := c.do(append([]string{"SCAN", cursor}, extra...)...)
		v, err := resp.Parse([]byte(r))
		if err != nil || v.Kind != '*' || len(v.Elems) != 2 {
			t.Fatalf("SCAN %s %v: %q (%v)", cursor, extra, r, err)
		}
		for _, k := range v.Elems[1].Elems {
			seen[string(k.Str)] = true
		}
		if cursor = string(v.Elems[0].Str); cursor == "0" {
			break
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	})
}

// TestClusterScanWalksEveryMaster: SCAN through rproxy on a cluster walks
// every master's keys, one master after the other, with a cursor that
// names the master; MATCH, COUNT and TYPE are each master's; a cursor
// that is not a number gets Redis's own error. Before, SCAN was refused
// on a cluster (Redis's Tcl suite in cluster mode: unit/scan).
func TestClusterScanWalksEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	c := dialClient(t, p.Addr)
	var want, wantK []string
	for i := range 300 {
		k := fmt.Sprintf("k:%d", i)
		if i%10 == 0 {
			k = fmt.Sprintf("other:%d", i)
		} else {
			wantK = append(wantK, k)
		}
		if r := c.do("SET", k, "v"); r != "+OK\r\n" {
			t.Fatalf("SET %s: %q", k, r)
		}
		want = append(want, k)
	}
	c.do("HSET", "h", "f", "v")
	want = append(want, "h")
	slices.Sort(want)
	slices.Sort(wantK)
	for _, m := range cl.Masters() {
		if n := strings.TrimSpace(string(m.Do(t, "DBSIZE"))); n == ":0" {
			t.Fatalf("master %s holds no key: the test would not walk it", m.Addr)
		}
	}
	if got := scanAll(t, c, "COUNT", "7"); !slices.Equal(got, want) {
		t.Errorf("SCAN COUNT 7: %d keys, want the %d written", len(got), len(want))
	}
	if got := scanAll(t, c); !slices.Equal(got, want) {
		t.Errorf("SCAN: %d keys, want the %d written", len(got), len(want))
	}
	if got := scanAll(t, c, "MATCH", "k:*", "COUNT", "1000"); !slices.Equal(got, wantK) {
		t.Errorf("SCAN MATCH k:*: %d keys, want %d", len(got), len(wantK))
	}
	if got := scanAll(t, c, "TYPE", "hash"); !slices.Equal(got, []string{"h"}) {
		t.Errorf("SCAN TYPE hash: %q, want [h]", got)
	}
	node := cl.Masters()[0]
	for _, cursor := range []string{"abc", "-"} {
		if got, direct := c.do("SCAN", cursor), string(node.Do(t, "SCAN", cursor)); got != direct {
			t.Errorf("SCAN %s: %q, want %q as from Redis", cursor, got, direct)
		}
	}
	if got, direct := c.do("SCAN"), string(node.Do(t, "SCAN")); got != direct {
		t.Errorf("SCAN without a cursor: %q, want %q as from Redis", got, direct)
	}
}

// TestClusterScanHidesSaltedCopies: the copies rproxy keeps of a salted
// hot key on other masters are not the client's keys: SCAN leaves them
// out.
func TestClusterScanHidesSaltedCopies(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: time.Minute, Prefixes: []string{"hot:"}, IntN: roundRobin()}
	})
	c := dialClient(t, p.Addr)
	c.do("SET", "hot:k", "v")
	c.do("SET", "plain", "v")
	for range 6 {
		c.do("GET", "hot:k")
	}
	copies := 0
	for _, m := range cl.Masters() {
		copies += strings.Count(string(m.Do(t, "KEYS", "*")), "hot:k#rproxy-copy-")
	}
	if copies == 0 {
		t.Fatal("no salted copy was made: the test would show nothing")
	}
	if got := scanAll(t, c, "COUNT", "1"); !slices.Equal(got, []string{"hot:k", "plain"}) {
		t.Errorf("SCAN: %q, want the client's keys [hot:k plain] without the %d copies", got, copies)
	}
}
