package proxy_test

import (
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
)

// Issue 17's credentials case, end to end: with auth.mode proxy, an
// upstream password and the default policy, a logged-in client cannot read
// the password (CONFIG GET requirepass, CONFIG GET *), list the users or
// create one; what redis-benchmark and client libraries send at start
// still works.
func TestCredentialsOutOfReach(t *testing.T) {
	rs := redistest.Start(t)
	rs.Do(t, "CONFIG", "SET", "requirepass", "upstream-secret") // after start: redistest's readiness PING has no password
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Upstream.Password = "upstream-secret"
		c.Users = proxy.Users{"alice": sha("alicepw")}
		pc := policy.DefaultConfig()
		c.Policy = &pc
	})
	c := dialClient(t, p.Addr)
	if got := c.do("AUTH", "alice", "alicepw"); got != "+OK\r\n" {
		t.Fatalf("AUTH = %q", got)
	}
	for _, args := range [][]string{
		{"CONFIG", "GET", "requirepass"}, {"CONFIG", "GET", "*"}, {"config", "get", "*PASS*"},
		{"CONFIG", "GET", "maxmemory", "masterauth"},
		{"ACL", "LIST"}, {"ACL", "USERS"}, {"ACL", "GETUSER", "default"},
		{"ACL", "SETUSER", "evil", "on", ">e", "~*", "+@all"},
		{"ACL", "SETUSER", "default", "resetpass", ">x"},
		{"ACL", "LOG"}, {"ACL", "DRYRUN", "default", "FLUSHALL"},
	} {
		got := c.do(args...)
		if !strings.HasPrefix(got, "-DENIED ") || strings.Contains(got, "upstream-secret") {
			t.Errorf("%q = %q, want -DENIED", args, got)
		}
	}
	// Nothing reached Redis: no user was made, the password still works.
	admin := dialClient(t, rs.Addr)
	admin.do("AUTH", "upstream-secret")
	if got := admin.do("ACL", "USERS"); strings.Contains(got, "evil") {
		t.Errorf("ACL SETUSER through rproxy created a user: %q", got)
	}
	// A script cannot read it either: CONFIG and ACL are noscript in Redis.
	if got := c.do("EVAL", "return redis.call('config', 'get', 'requirepass')", "0"); strings.Contains(got, "upstream-secret") {
		t.Errorf("CONFIG GET inside EVAL = %q", got)
	}
	for _, tc := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"CONFIG", "GET", "save"}, "*2\r\n"},       // redis-benchmark, at start
		{[]string{"CONFIG", "GET", "appendonly"}, "*2\r\n"}, // redis-benchmark, at start
		{[]string{"ACL", "WHOAMI"}, "$7\r\ndefault"},        // the upstream user's name only
		{[]string{"CLIENT", "SETNAME", "app"}, "+OK"},
		{[]string{"HELLO", "2"}, "*"},
	} {
		if got := c.do(tc.args...); !strings.HasPrefix(got, tc.prefix) {
			t.Errorf("%q = %q, want %q...", tc.args, got, tc.prefix)
		}
	}
}
