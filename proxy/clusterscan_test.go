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
	// Redis reads a cursor with strtoul: a sign and no digits are
	// allowed; a space, a sign alone or an overflow are not.
	first := c.do("SCAN", "0")
	for _, cursor := range []string{"+0", "-0", "", "000"} {
		if got := c.do("SCAN", cursor); got != first {
			t.Errorf("SCAN %q: %q, want SCAN 0's %q", cursor, got, first)
		}
	}
	for _, cursor := range []string{"abc", "-", "+", " 1", "1 ", "0x1", "18446744073709551616", "-18446744073709551616"} {
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
		c.Policy = nil // KEYS
	})
	c := dialClient(t, p.Addr)
	c.do("SET", "hot:k", "v")
	c.do("SET", "plain", "v")
	for range 6 {
		c.do("GET", "hot:k")
	}
	copies := 0
	waitFor(t, "a salted copy of hot:k on a master", func() bool {
		copies = 0
		for _, m := range cl.Masters() {
			copies += strings.Count(string(m.Do(t, "KEYS", "*")), "hot:k#rproxy-copy-")
		}
		return copies > 0
	})
	if got := scanAll(t, c, "COUNT", "1"); !slices.Equal(got, []string{"hot:k", "plain"}) {
		t.Errorf("SCAN: %q, want the client's keys [hot:k plain] without the %d copies", got, copies)
	}
	if got := keysOf(t, c.do("KEYS", "*")); !slices.Equal(got, []string{"hot:k", "plain"}) {
		t.Errorf("KEYS *: %q, want the client's keys [hot:k plain] without the %d copies", got, copies)
	}
	for range 30 {
		if r := c.do("RANDOMKEY"); r != "$5\r\nhot:k\r\n" && r != "$5\r\nplain\r\n" {
			t.Fatalf("RANDOMKEY: %q, want one of the client's keys", r)
		}
	}
}

// keysOf is the sorted keys of a KEYS reply.
func keysOf(t *testing.T, r string) []string {
	t.Helper()
	v, err := resp.Parse([]byte(r))
	if err != nil || v.Kind != '*' {
		t.Fatalf("KEYS: %q (%v)", r, err)
	}
	var out []string
	for _, k := range v.Elems {
		out = append(out, string(k.Str))
	}
	slices.Sort(out)
	return out
}

// TestClusterKeysAndRandomKeyOfEveryMaster: with a policy that lets them
// through, KEYS lists every master's keys and RANDOMKEY gives one of
// them, or nil with no key anywhere, as one server; they were refused on a
// cluster (Redis's Tcl suite in cluster mode: unit/keyspace 9 tests,
// unit/other, unit/expire).
func TestClusterKeysAndRandomKeyOfEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Policy = nil })
	direct := redistest.Start(t)
	for _, proto := range []string{"2", "3"} {
		c, d := dialClient(t, p.Addr), dialClient(t, direct.Addr)
		c.do("HELLO", proto)
		d.do("HELLO", proto)
		if got, want := c.do("RANDOMKEY"), d.do("RANDOMKEY"); got != want {
			t.Errorf("RESP%s RANDOMKEY of no key: %q, want %q as from Redis", proto, got, want)
		}
		if got, want := c.do("KEYS", "*"), d.do("KEYS", "*"); got != want {
			t.Errorf("RESP%s KEYS * of no key: %q, want %q as from Redis", proto, got, want)
		}
	}
	keys, _ := keyPerMaster(t, cl, "kk")
	c := dialClient(t, p.Addr)
	for _, k := range keys {
		c.do("SET", k, "v")
	}
	c.do("SET", "other", "v")
	want := slices.Sorted(slices.Values(keys))
	if got := keysOf(t, c.do("KEYS", "kk*")); !slices.Equal(got, want) {
		t.Errorf("KEYS kk*: %q, want every master's %q", got, want)
	}
	seen := map[string]bool{}
	for range 200 {
		v, err := resp.Parse([]byte(c.do("RANDOMKEY")))
		if err != nil || v.Kind != '$' || v.Null {
			t.Fatalf("RANDOMKEY: %v %v", v, err)
		}
		seen[string(v.Str)] = true
	}
	for _, k := range keys {
		if !seen[k] {
			t.Errorf("RANDOMKEY never gave %s (a master's own) in 200 calls: %v", k, seen)
		}
	}
}
