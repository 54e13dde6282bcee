package proxy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// PROXY CLIENTS lists every client session with its id, address, name,
// age, idle time, db, last command, user and whether it rides the shared
// connections or a pinned one.
func TestProxyClients(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	a := dialClient(t, p.Addr)
	a.do("CLIENT", "SETNAME", "alice")
	a.do("GET", "k")
	b := dialClient(t, p.Addr)
	b.do("SELECT", "2") // pinned, in db 2
	idle := dialClient(t, p.Addr)
	idle.send(nil) // connected, nothing sent
	me := dialClient(t, p.Addr)
	waitFor(t, "4 sessions", func() bool {
		return strings.Count(listClients(t, me), "\n") == 4
	})
	r := listClients(t, me)
	lines := strings.Split(strings.TrimSuffix(r, "\n"), "\n")
	fields := func(line string) map[string]string {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		return f
	}
	want := []map[string]string{
		{"name": "alice", "db": "0", "cmd": "get", "upstream": "shared", "addr": a.nc.LocalAddr().String()},
		{"name": "", "db": "2", "cmd": "select", "upstream": "pinned", "addr": b.nc.LocalAddr().String()},
		{"name": "", "db": "0", "cmd": "NULL", "upstream": "shared", "addr": idle.nc.LocalAddr().String()},
		{"name": "", "db": "0", "cmd": "proxy|clients", "upstream": "shared", "addr": me.nc.LocalAddr().String()},
	}
	prevID := 0
	for i, line := range lines {
		f := fields(line)
		for k, v := range want[i] {
			if f[k] != v {
				t.Errorf("client %d: %s=%q, want %q\n%s", i, k, f[k], v, r)
			}
		}
		id, err1 := strconv.Atoi(f["id"])
		age, err2 := strconv.Atoi(f["age"])
		idleS, err3 := strconv.Atoi(f["idle"])
		if err1 != nil || err2 != nil || err3 != nil || id <= prevID || idleS > age {
			t.Errorf("client %d: id %q (after %d), age %q, idle %q\n%s", i, f["id"], prevID, f["age"], f["idle"], r)
		}
		prevID = id
	}
}

func listClients(t *testing.T, c *rawClient) string {
	t.Helper()
	v, err := resp.Parse([]byte(c.do("PROXY", "CLIENTS")))
	if err != nil {
		t.Fatal(err)
	}
	return string(v.Str)
}
