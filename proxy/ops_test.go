package proxy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/proxy/resp"
)

func withOps(reloadErr error) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.Ops = proxy.OpsHooks{
			Version:         "test-9.9",
			Reload:          func() error { return reloadErr },
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
	if r := c.do("PROXY", "HELP"); !strings.HasPrefix(r, "*5\r\n+PROXY <subcommand>") {
		t.Errorf("PROXY HELP = %q", r)
	}
	ok := proxytest.Start(t, rs.Addr, withOps(nil), withPolicy(nil))
	if r := dialClient(t, ok.Addr).do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Errorf("PROXY RELOAD from loopback = %q", r)
	}
}
