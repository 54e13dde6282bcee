package proxy_test

import (
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// TestUpstreamCredentials: against a Redis that requires a password, rproxy
// authenticates its shared and pinned connections (as an ACL user), and a
// pinned connection reused after RESET is authenticated again.
func TestUpstreamCredentials(t *testing.T) {
	rs := redistest.Start(t)
	rs.Do(t, "CONFIG", "SET", "requirepass", "adminpw") // after start: redistest's readiness PING has no password
	if setup := rs.Do(t, "PING"); !strings.HasPrefix(string(setup), "-NOAUTH") {
		t.Fatalf("Redis does not require a password: %q", setup)
	}
	// ACL SETUSER needs an authenticated connection: use a raw client.
	admin := dialClient(t, rs.Addr)
	admin.do("AUTH", "adminpw")
	if got := admin.do("ACL", "SETUSER", "app", "on", ">apppw", "~*", "&*", "+@all"); got != "+OK\r\n" {
		t.Fatalf("ACL SETUSER = %q", got)
	}
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Upstream.Username = "app"
		c.Upstream.Password = "apppw"
	})
	for _, proto := range []string{"2", "3"} {
		c := dialClient(t, p.Addr)
		c.do("HELLO", proto)
		if got := c.do("ACL", "WHOAMI"); got != "$3\r\napp\r\n" && got != "+app\r\n" {
			t.Fatalf("RESP%s: shared connection user = %q", proto, got)
		}
		for round := 0; round < 2; round++ { // the second MULTI reuses the reset connection
			c.do("MULTI")
			c.do("ACL", "WHOAMI")
			got := c.do("EXEC")
			if !strings.Contains(got, "app") {
				t.Fatalf("RESP%s round %d: pinned connection user: EXEC = %q", proto, round, got)
			}
		}
	}
	assertNoPins(t, p)
}

// TestUpstreamWrongPassword: with a wrong upstream password the proxy never
// becomes ready and clients get the reason.
func TestUpstreamWrongPassword(t *testing.T) {
	rs := redistest.Start(t)
	rs.Do(t, "CONFIG", "SET", "requirepass", "right")
	p := proxytest.Start(t, rs.Addr, proxytest.NoWait, func(c *proxy.Config) { c.Upstream.Password = "wrong" })
	c := dialClient(t, p.Addr)
	got := c.do("PING")
	if !strings.HasPrefix(got, "-ERR upstream unavailable: AUTH: server replied \"-WRONGPASS") {
		t.Fatalf("PING with a wrong upstream password = %q", got)
	}
	if strings.Contains(got, "wrong\"") || strings.Contains(got, " wrong ") {
		t.Fatalf("the error shows the password: %q", got)
	}
	if p.Server.Ready() {
		t.Fatal("ready with a wrong upstream password")
	}
}
