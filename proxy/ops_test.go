package proxy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

func withOps(reloadErr error) func(*proxy.Config) {
	return withOpsNote("", reloadErr)
}

func withOpsNote(note string, reloadErr error) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.Ops = proxy.OpsHooks{
			Version:         "test-9.9",
			Reload:          func() (string, error) { return note, reloadErr },
			EffectiveConfig: func() string { return "listen: 127.0.0.1:6380\n" },
		}
	}
}

// INFO gets a "# Proxy" section when it asks for the default sections, all
// of them, or "proxy"; the reply stays a well-formed bulk (RESP2) or
// verbatim string (RESP3) with Redis's own sections intact.
func TestInfoProxySection(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withOps(nil))
	for _, proto := range []string{"2", "3"} {
		c := dialClient(t, p.Addr)
		if proto == "3" {
			c.do("HELLO", "3")
		}
		for _, tc := range []struct {
			args       []string
			proxy, srv bool
		}{
			{[]string{"INFO"}, true, true},
			{[]string{"info", "ALL"}, true, true},
			{[]string{"INFO", "proxy"}, true, false},
			{[]string{"INFO", "server", "proxy"}, true, true},
			{[]string{"INFO", "memory"}, false, false},
		} {
			raw := c.do(tc.args...)
			v, err := resp.Parse([]byte(raw))
			if err != nil {
				t.Fatalf("RESP%s %v: reply does not parse: %v\n%q", proto, tc.args, err, raw)
			}
			body := string(v.Str)
			if got := strings.Contains(body, "# Proxy\r\nrproxy_version:test-9.9\r\n"); got != tc.proxy {
				t.Errorf("RESP%s %v: proxy section present = %v\n%s", proto, tc.args, got, body)
			}
			if got := strings.Contains(body, "# Server\r\n"); got != tc.srv {
				t.Errorf("RESP%s %v: server section present = %v", proto, tc.args, got)
			}
			if proto == "3" && !strings.HasPrefix(body, "txt:") {
				t.Errorf("RESP3 INFO is not a verbatim txt string: %.20q", body)
			}
		}
	}
}

func TestProxyCommand(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withOps(errors.New("line 3: bad\nrule")), withPolicy(nil))
	c := dialClient(t, p.Addr)
	if r := c.do("PROXY", "INFO"); !strings.Contains(r, "upstream_ready:1") || !strings.HasPrefix(r, "$") {
		t.Errorf("PROXY INFO = %q", r)
	}
	if r := c.do("proxy", "config", "get"); r != "$23\r\nlisten: 127.0.0.1:6380\n\r\n" {
		t.Errorf("PROXY CONFIG GET = %q", r)
	}
	if r := c.do("PROXY", "RELOAD"); r != "-ERR rproxy: reload rejected, configuration unchanged: line 3: bad; rule\r\n" {
		t.Errorf("failed PROXY RELOAD = %q", r)
	}
	if r := c.do("PROXY", "HOTKEYS"); r != "*0\r\n" {
		t.Errorf("PROXY HOTKEYS with no hot key = %q", r)
	}
	if r := c.do("PROXY", "NOPE"); !strings.HasPrefix(r, "-ERR rproxy: unknown PROXY subcommand") {
		t.Errorf("PROXY NOPE = %q", r)
	}
	if r := c.do("proxy", "config", "get", "LIST*"); r != "*2\r\n$6\r\nlisten\r\n$14\r\n127.0.0.1:6380\r\n" {
		t.Errorf("PROXY CONFIG GET LIST* = %q", r)
	}
	if r := c.do("PROXY", "HELP"); !strings.HasPrefix(r, "*8\r\n+PROXY <subcommand>") {
		t.Errorf("PROXY HELP = %q", r)
	}
	ok := proxytest.Start(t, rs.Addr, withOps(nil), withPolicy(nil))
	if r := dialClient(t, ok.Addr).do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Errorf("PROXY RELOAD from loopback = %q", r)
	}
	pending := proxytest.Start(t, rs.Addr, withOpsNote("not applied until restart: listen, procs", nil), withPolicy(nil))
	if r := dialClient(t, pending.Addr).do("PROXY", "RELOAD"); r != "+OK, not applied until restart: listen, procs\r\n" {
		t.Errorf("PROXY RELOAD with keys needing a restart = %q", r)
	}
}

// PROXY SLOWLOG keeps slow client batches with command names only, newest
// first, and not blocking commands.
func TestProxySlowLog(t *testing.T) {
	rs := redistest.Start(t, "--enable-debug-command", "yes")
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.SlowLogThreshold, c.SlowLogLen = 20*time.Millisecond, 2
	})
	c := dialClient(t, p.Addr)
	c.do("CLIENT", "SETNAME", "slowpoke")
	c.do("SET", "secret-key", "secret-value")
	c.do("BLPOP", "nolist", "0.1") // blocks 100ms by request: not logged
	var pipe []byte
	pipe = resp.AppendCommandString(pipe, "GET", "secret-key")
	pipe = resp.AppendCommandString(pipe, "DEBUG", "SLEEP", "0.05")
	for i := 0; i < 8; i++ {
		pipe = resp.AppendCommandString(pipe, "PING")
	}
	c.send(pipe)
	for i := 0; i < 10; i++ {
		c.read()
	}
	if r := c.do("PROXY", "SLOWLOG", "LEN"); r != ":1\r\n" {
		t.Fatalf("PROXY SLOWLOG LEN = %q", r)
	}
	r := c.do("PROXY", "SLOWLOG", "GET")
	v, err := resp.Parse([]byte(r))
	if err != nil || len(v.Elems) != 1 || len(v.Elems[0].Elems) != 6 {
		t.Fatalf("PROXY SLOWLOG GET = %q (%v)", r, err)
	}
	e := v.Elems[0].Elems
	var names []string
	for _, n := range e[3].Elems {
		names = append(names, string(n.Str))
	}
	if got := strings.Join(names, " "); got != "get debug ping ping ping ping ping ping ... (10 commands)" {
		t.Errorf("logged commands = %q", got)
	}
	if e[2].Int < 20000 || string(e[5].Str) != "slowpoke" || !strings.HasPrefix(string(e[4].Str), "127.0.0.1:") {
		t.Errorf("entry = %+v", e)
	}
	if strings.Contains(r, "secret") {
		t.Errorf("the slow log shows arguments: %q", r)
	}
	c.do("PROXY", "SLOWLOG", "RESET")
	if r := c.do("PROXY", "SLOWLOG", "LEN"); r != ":0\r\n" {
		t.Fatalf("after RESET, LEN = %q", r)
	}
}

// infoField returns the first value of field in an INFO reply's text, or
// "" when there is none.
func infoField(info, field string) string {
	i := strings.Index(info, "\r\n"+field+":")
	if i < 0 {
		return ""
	}
	v := info[i+len(field)+3:]
	return v[:strings.Index(v, "\r\n")]
}

// TestInfoClientsAreSessions: INFO's connected_clients and tracking_clients
// count rproxy's sessions, as CLIENT LIST and CLIENT KILL see them (Redis's
// own test "CLIENT KILL SKIPME YES/NO will kill all clients" relates the
// two), also in stream mode and once a session is killed; Redis's own
// figures are in # Proxy as upstream_connected_clients and
// upstream_tracking_clients.
func TestInfoClientsAreSessions(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	a, b, c := dialClient(t, p.Addr), dialClient(t, p.Addr), dialClient(t, p.Addr)
	a.do("PING")
	bID := strings.Trim(b.do("CLIENT", "ID"), ":\r\n")
	c.do("HELLO", "3")
	if got := c.do("CLIENT", "TRACKING", "on"); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on = %q", got)
	}
	check := func(who *rawClient, args []string, connected, tracking string, proxySection bool) {
		t.Helper()
		raw := who.do(args...)
		v, err := resp.Parse([]byte(raw))
		if err != nil {
			t.Fatalf("%v: reply does not parse: %v\n%q", args, err, raw)
		}
		info := string(v.Str)
		if got := infoField(info, "connected_clients"); got != connected {
			t.Errorf("%v: connected_clients:%s, want %s (sessions)", args, got, connected)
		}
		if got := infoField(info, "tracking_clients"); got != tracking {
			t.Errorf("%v: tracking_clients:%s, want %s", args, got, tracking)
		}
		if got := infoField(info, "upstream_connected_clients") != ""; got != proxySection {
			t.Errorf("%v: upstream_connected_clients in # Proxy = %v, want %v\n%s", args, got, proxySection, info)
		}
		if proxySection && infoField(info, "upstream_tracking_clients") == "" {
			t.Errorf("%v: no upstream_tracking_clients in # Proxy\n%s", args, info)
		}
	}
	check(a, []string{"INFO", "clients"}, "3", "1", false)
	check(a, []string{"INFO"}, "3", "1", true)
	check(c, []string{"INFO"}, "3", "1", true) // stream mode, RESP3
	check(c, []string{"INFO", "clients"}, "3", "1", false)
	if got := a.do("CLIENT", "KILL", "ID", bID); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL ID %s = %q", bID, got)
	}
	check(a, []string{"INFO", "clients"}, "2", "1", false)
	check(c, []string{"INFO", "clients"}, "2", "1", false)
}
