package proxy_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/proxy/resp"
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
	var got string
	waitFor(t, "the AUTH failure to be the reason", func() bool {
		got = c.do("PING") // "connecting" until the first dial has failed
		return got != "-ERR upstream unavailable: connecting\r\n"
	})
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

func sha(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// TestProxyAuth: with rproxy's own users, a session must AUTH (or HELLO
// AUTH) first and gets Redis's own NOAUTH and WRONGPASS replies; RESET
// deauthenticates.
func TestProxyAuth(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"default": sha("defpw"), "alice": sha("alicepw")}
	})
	c := dialClient(t, p.Addr)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"CLIENT", "SETNAME", "x"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"MULTI"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"SUBSCRIBE", "c"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"HELLO", "3"}, "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{[]string{"AUTH", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "alice", "defpw"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "nobody", "x"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH"}, "-ERR wrong number of arguments for 'auth' command\r\n"},
		{[]string{"PING"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"AUTH", "defpw"}, "+OK\r\n"},
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"AUTH", "alice", "alicepw"}, "+OK\r\n"},
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "k"}, "-NOAUTH Authentication required.\r\n"},
	}
	for i, st := range steps {
		if got := c.do(st.args...); got != st.want {
			t.Fatalf("step %d %q = %q, want %q", i, st.args, got, st.want)
		}
	}
	// HELLO AUTH authenticates and switches protocol in one command.
	if got := c.do("HELLO", "3", "AUTH", "alice", "bad"); got != "-WRONGPASS invalid username-password pair or user is disabled.\r\n" {
		t.Fatalf("HELLO AUTH with a wrong password = %q", got)
	}
	if got := c.do("HELLO", "3", "AUTH", "alice", "alicepw", "SETNAME", "me"); got[0] != '%' {
		t.Fatalf("HELLO 3 AUTH = %q", got)
	}
	if got := c.do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("GET after HELLO AUTH = %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != "$2\r\nme\r\n" {
		t.Fatalf("CLIENT GETNAME after HELLO AUTH SETNAME = %q", got)
	}
	// QUIT works before authenticating.
	q := dialClient(t, p.Addr)
	q.send(resp.AppendCommandString(nil, "QUIT"))
	if got := q.expectClosed(); got != "+OK\r\n" {
		t.Fatalf("QUIT before AUTH = %q", got)
	}
}

// TestAuthRefusedWithoutUsers: with auth mode none, AUTH never reaches a
// shared connection (it would change that connection's user for everyone).
func TestAuthRefusedWithoutUsers(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	for _, args := range [][]string{{"AUTH", "x"}, {"AUTH", "u", "p"}, {"HELLO", "3", "AUTH", "u", "p"}} {
		if got := c.do(args...); !strings.HasPrefix(got, "-ERR rproxy: ") || !strings.Contains(got, "auth.mode is none") {
			t.Fatalf("%q = %q", args, got)
		}
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING = %q", got)
	}
}
