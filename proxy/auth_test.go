package proxy_test

import (
	"bytes"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// TestUpstreamCredentials: against a Redis that requires a password, rproxy
// authenticates its shared and pinned connections (as an ACL user), and a
// pinned connection reused after RESET is authenticated again.
func TestUpstreamCredentials(t *testing.T) {
	rs := redisWithAppUser(t)
	p := proxytest.Start(t, rs.Addr, asAppUser)
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

// redisWithAppUser starts a Redis that requires a password, with an ACL
// user app (password apppw) that rproxy can use upstream (asAppUser): every
// key, channel and command, then rules (ACL SETUSER's) on top.
func redisWithAppUser(t *testing.T, rules ...string) *redistest.Server {
	t.Helper()
	rs := redistest.Start(t)
	rs.Do(t, "CONFIG", "SET", "requirepass", "adminpw") // after start: redistest's readiness PING has no password
	if setup := rs.Do(t, "PING"); !strings.HasPrefix(string(setup), "-NOAUTH") {
		t.Fatalf("Redis does not require a password: %q", setup)
	}
	// ACL SETUSER needs an authenticated connection: use a raw client.
	admin := dialClient(t, rs.Addr)
	admin.do("AUTH", "adminpw")
	setuser := append([]string{"ACL", "SETUSER", "app", "on", ">apppw", "~*", "&*", "+@all"}, rules...)
	if got := admin.do(setuser...); got != "+OK\r\n" {
		t.Fatalf("%v = %q", setuser, got)
	}
	return rs
}

// asAppUser has rproxy log in upstream as redisWithAppUser's user.
func asAppUser(c *proxy.Config) {
	c.Upstream.Username = "app"
	c.Upstream.Password = "apppw"
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

// TestAuthPassthrough: Redis checks each client's AUTH; the session then runs
// on connections authenticated as that user, so ACL rules apply exactly as on
// Redis (compared byte for byte with a direct connection).
func TestAuthPassthrough(t *testing.T) {
	rs := redistest.Start(t)
	admin := dialClient(t, rs.Addr)
	for _, u := range [][]string{
		{"ACL", "SETUSER", "alice", "on", ">alicepw", "~a:*", "+@all"},
		{"ACL", "SETUSER", "bob", "on", ">bobpw", "~*", "+@read", "+acl", "+hello", "+ping", "+multi", "+exec"},
	} {
		if got := admin.do(u...); got != "+OK\r\n" {
			t.Fatalf("%q = %q", u, got)
		}
	}
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.AuthPassthrough = true })

	// Each step runs on a direct connection and through rproxy; replies must match.
	direct, proxied := dialClient(t, rs.Addr), dialClient(t, p.Addr)
	steps := [][]string{
		{"ACL", "WHOAMI"},
		{"AUTH", "alice", "wrong"},
		{"AUTH", "nobody", "x"},
		{"AUTH", "alice", "alicepw"},
		{"ACL", "WHOAMI"},
		{"SET", "a:1", "x"},
		{"SET", "b:1", "x"}, // NOPERM: alice may only touch a:*
		{"GET", "a:1"},
		{"MULTI"}, {"ACL", "WHOAMI"}, {"SET", "a:2", "y"}, {"EXEC"}, // pinned, still alice
		{"AUTH", "bob", "bobpw"},
		{"ACL", "WHOAMI"},
		{"GET", "a:1"},
		{"SET", "a:3", "z"}, // NOPERM: bob cannot write
		{"RESET"},
		{"ACL", "WHOAMI"},
	}
	for i, st := range steps {
		d, pr := direct.do(st...), proxied.do(st...)
		if d != pr {
			t.Fatalf("step %d %q differs\n  direct: %q\n  rproxy: %q", i, st, d, pr)
		}
	}
	// HELLO 3 AUTH switches protocol and user in one command.
	c := dialClient(t, p.Addr)
	if got := c.do("HELLO", "3", "AUTH", "alice", "wrong"); got != "-WRONGPASS invalid username-password pair or user is disabled.\r\n" {
		t.Fatalf("HELLO 3 AUTH wrong = %q", got)
	}
	if got := c.do("HELLO", "3", "AUTH", "alice", "alicepw"); got[0] != '%' {
		t.Fatalf("HELLO 3 AUTH = %q", got)
	}
	if got := c.do("ACL", "WHOAMI"); got != "$5\r\nalice\r\n" && got != "+alice\r\n" {
		t.Fatalf("WHOAMI after HELLO AUTH = %q", got)
	}
	if got := c.do("GET", "a:nothing"); got != "_\r\n" {
		t.Fatalf("GET after HELLO 3 AUTH = %q (want RESP3 null)", got)
	}
	assertNoPins(t, p)
}

// A brute-force run is counted in full and logged at warn, at most one line
// a second (each with the count it stands for), not one line per guess;
// passthrough failures, which Redis decides, are counted too.
func TestAuthFailuresCountedAndRateLimited(t *testing.T) {
	rs := redistest.Start(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := proxytest.StartLogged(t, zap.New(core), rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"alice": sha("alicepw")}
	})
	c := dialClient(t, p.Addr)
	start := time.Now()
	const guesses = 200
	var batch []byte
	for i := 0; i < guesses; i++ {
		batch = resp.AppendCommandString(batch, "AUTH", "alice", "guess"+strings.Repeat("x", i%7))
	}
	c.send(batch)
	for i := 0; i < guesses; i++ {
		if got := string(c.read()); !strings.HasPrefix(got, "-WRONGPASS") {
			t.Fatalf("guess %d = %q", i, got)
		}
	}
	if got := c.do("HELLO", "3", "AUTH", "alice", "bad"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("HELLO AUTH = %q", got)
	}
	elapsed := time.Since(start)
	if n := counterValue(t, p.Registry, "rproxy_proxy_auth_failures_total", nil); n != guesses+1 {
		t.Errorf("rproxy_proxy_auth_failures_total = %v, want %d", n, guesses+1)
	}
	lines := logs.FilterMessage("client authentication failed").All()
	if max := 1 + int(elapsed/time.Second); len(lines) == 0 || len(lines) > max {
		t.Fatalf("%d failed-AUTH lines in %v, want 1..%d", len(lines), elapsed, max)
	}
	for _, l := range lines {
		if l.Level != zapcore.WarnLevel {
			t.Errorf("failed AUTH logged at %s, want warn", l.Level)
		}
		if _, ok := l.ContextMap()["not_logged_since_last"]; !ok {
			t.Errorf("the line does not say how many were not logged: %v", l.ContextMap())
		}
	}

	pt := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.AuthPassthrough = true })
	if got := dialClient(t, pt.Addr).do("AUTH", "nobody", "x"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("passthrough AUTH = %q", got)
	}
	if n := counterValue(t, pt.Registry, "rproxy_proxy_auth_failures_total", nil); n != 1 {
		t.Errorf("passthrough: rproxy_proxy_auth_failures_total = %v, want 1", n)
	}
}

// Passthrough AUTH as Redis: the one-argument form is judged as sent, more
// than two arguments are a syntax error (rproxy said wrong number), AUTH
// works on a session in another database, a deleted user's sessions are
// closed (Redis closes its own), and the user re-created logs in again.
func TestAuthPassthroughAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.AuthPassthrough = true })
	direct, proxied := dialClient(t, rs.Addr), dialClient(t, p.Addr)
	for _, st := range [][]string{{"AUTH", "pw"}, {"AUTH", "default", "pw"}, {"AUTH", "a", "b", "c"}} {
		if d, pr := direct.do(st...), proxied.do(st...); d != pr {
			t.Errorf("%q: direct %q, rproxy %q", st, d, pr)
		}
	}
	admin := dialClient(t, rs.Addr)
	if r := admin.do("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	c := dialClient(t, p.Addr)
	for _, st := range [][]string{{"SELECT", "9"}, {"AUTH", "alice", "alicepw"}, {"SET", "in9", "x"}} {
		if r := c.do(st...); r != "+OK\r\n" {
			t.Fatalf("%q = %q", st, r)
		}
	}
	if r := c.do("ACL", "WHOAMI"); r != "$5\r\nalice\r\n" {
		t.Errorf("WHOAMI after AUTH in db 9 = %q", r)
	}
	c.do("SELECT", "0")
	shared := dialClient(t, p.Addr)
	if r := shared.do("AUTH", "alice", "alicepw"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	if r := admin.do("ACL", "DELUSER", "alice"); r != ":1\r\n" {
		t.Fatal(r)
	}
	shared.expectClosed()
	c.expectClosed()
	if r := admin.do("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	fresh := dialClient(t, p.Addr)
	if r := fresh.do("AUTH", "alice", "alicepw"); r != "+OK\r\n" {
		t.Fatalf("AUTH of the re-created user = %q", r)
	}
	if r := fresh.do("SET", "after", "1"); r != "+OK\r\n" {
		t.Errorf("SET as the re-created user = %q", r)
	}

	// A nopass user AUTHed with an empty password runs as that user, not
	// as default: its ACL applies exactly as directly.
	if r := admin.do("ACL", "SETUSER", "tu", "reset", "nopass", "on", "~*", "+SET"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	direct, proxied = dialClient(t, rs.Addr), dialClient(t, p.Addr)
	for _, st := range [][]string{{"AUTH", "tu", ""}, {"SET", "k", "v"}, {"GET", "k"}, {"ACL", "WHOAMI"}} {
		if d, pr := direct.do(st...), proxied.do(st...); d != pr {
			t.Errorf("nopass user, %q: direct %q, rproxy %q", st, d, pr)
		}
	}
}

// With auth.mode none rproxy answers AUTH as a Redis without passwords,
// byte for byte as that Redis does, and AUTH never reaches a shared
// connection (it would change that connection's user for everyone).
func TestAuthNoneAsRedisWithoutPasswords(t *testing.T) {
	direct := redistest.Start(t)
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	d, proxied := dialClient(t, direct.Addr), dialClient(t, p.Addr)
	for _, st := range [][]string{{"AUTH", "pw"}, {"AUTH", "default", "x"}, {"AUTH", "bob", "x"}, {"AUTH"}, {"AUTH", "a", "b", "c"}, {"ACL", "WHOAMI"}} {
		if dr, pr := d.do(st...), proxied.do(st...); dr != pr {
			t.Errorf("%q: direct %q, rproxy %q", st, dr, pr)
		}
	}
	if strings.Contains(string(rs.Do(t, "INFO", "commandstats")), "cmdstat_auth:") {
		t.Error("an AUTH reached Redis")
	}
}

// In passthrough mode Redis checks HELLO's AUTH option as the client sent
// it, HELLO with AUTH alone, so MONITOR shows the client's command,
// redacted, as without rproxy (Redis's unit/introspection "MONITOR supports
// redacting command arguments"); a right password still switches protocol
// and user.
func TestAuthPassthroughHelloAsSent(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.AuthPassthrough = true })
	if r := dialClient(t, rs.Addr).do("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	mon := monitorOn(t, rs.Addr)
	c := dialClient(t, p.Addr)
	direct := dialClient(t, rs.Addr)
	bad := []string{"hello", "2", "AUTH", "not-real", "not-a-password"}
	if d, pr := direct.do(bad...), c.do(bad...); d != pr {
		t.Errorf("HELLO 2 AUTH with a wrong password: direct %q, rproxy %q", d, pr)
	}
	// MONITOR shows the direct client's HELLO, then rproxy's check.
	for i := 0; i < 2; i++ {
		line := string(mon.read())
		if !strings.Contains(line, `"hello" "2" "AUTH" "(redacted)" "(redacted)"`) {
			t.Fatalf("MONITOR line %d: %q, want the HELLO with AUTH redacted", i, line)
		}
	}
	if r := c.do("HELLO", "3", "AUTH", "alice", "alicepw"); r[0] != '%' {
		t.Fatalf("HELLO 3 AUTH alice = %q, want a map", r)
	}
	if r := c.do("ACL", "WHOAMI"); r != "$5\r\nalice\r\n" {
		t.Errorf("ACL WHOAMI after HELLO 3 AUTH = %q", r)
	}
}

// TestAuthInStreamMode: AUTH in stream mode (here RESP3 pub/sub) is
// answered as outside it, in order with the stream, and never reaches
// Redis (before, it was forwarded: rproxy's users' passwords went to Redis,
// which refused them). Inside MULTI it is refused and the transaction
// aborted, as outside stream mode; CLIENT ID is queued as Redis queues it.
func TestAuthInStreamMode(t *testing.T) {
	rs := redistest.Start(t)
	modes := []struct {
		name string
		cfg  func(*proxy.Config)
		auth []string // AUTH, reply
	}{
		{"none", func(*proxy.Config) {}, []string{"AUTH default any", "+OK\r\n", "AUTH pw", "-ERR AUTH <password> called without any password configured"}},
		{"proxy", func(c *proxy.Config) { c.Users = proxy.Users{"alice": sha("alicepw"), "bob": sha("bobpw")} },
			[]string{"AUTH bob bobpw", "+OK\r\n", "AUTH bob wrong", "-WRONGPASS"}},
		{"passthrough", func(c *proxy.Config) { c.AuthPassthrough = true },
			[]string{"AUTH default any", "-ERR rproxy: AUTH inside a transaction or in pub/sub mode is not supported", "AUTH pw", "-ERR rproxy: AUTH"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := proxytest.Start(t, rs.Addr, m.cfg)
			c := dialClient(t, p.Addr)
			if m.name == "proxy" {
				c.do("AUTH", "alice", "alicepw")
			}
			c.do("HELLO", "3")
			c.do("SUBSCRIBE", "ch")
			rs.Do(t, "CONFIG", "RESETSTAT")
			for i := 0; i < len(m.auth); i += 2 {
				if got := c.do(strings.Fields(m.auth[i])...); !strings.HasPrefix(got, m.auth[i+1]) {
					t.Fatalf("%s = %q, want %q...", m.auth[i], got, m.auth[i+1])
				}
			}
			var batch []byte
			for _, cmd := range [][]string{{"MULTI"}, {"CLIENT", "ID"}, {"AUTH", "default", "x"}, {"EXEC"}, {"MULTI"}, {"CLIENT", "ID"}, {"EXEC"}} {
				batch = resp.AppendCommandString(batch, cmd...)
			}
			c.send(batch)
			c.readPrefixes("+OK", "+QUEUED", "-ERR rproxy: AUTH inside MULTI is not supported", "-EXECABORT", "+OK", "+QUEUED", "*1\r\n:")
			if stats := string(rs.Do(t, "INFO", "commandstats")); strings.Contains(stats, "cmdstat_auth") {
				t.Fatalf("AUTH reached Redis: %s", stats)
			}
		})
	}
}

// TestHelloInStreamMode: HELLO in stream mode (here after CLIENT TRACKING)
// is answered as outside it: its AUTH option is checked by rproxy and
// never reaches Redis, and the reply's id is the session's. The pinned
// connection switches protocol with it.
func TestHelloInStreamMode(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"alice": sha("alicepw"), "bob": sha("bobpw")}
	})
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3", "AUTH", "alice", "alicepw")
	id := strings.TrimSpace(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"))
	if got := c.do("CLIENT", "TRACKING", "ON"); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON = %q", got)
	}
	rs.Do(t, "ACL", "LOG", "RESET")
	if got := c.do("HELLO", "3", "AUTH", "bob", "bobpw", "SETNAME", "worker"); !strings.Contains(got, "$2\r\nid\r\n:"+id+"\r\n") {
		t.Fatalf("HELLO 3 AUTH bob: %q, want id %s", got, id)
	}
	if got := c.do("HELLO", "3", "AUTH", "bob", "wrong"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("HELLO with a wrong password = %q", got)
	}
	for _, step := range [][2]string{
		{"CLIENT GETNAME", "$6\r\nworker\r\n"},
		{"ACL WHOAMI", "$7\r\ndefault\r\n"}, // Redis's: the pinned connection's user is rproxy's own
	} {
		if got := c.do(strings.Fields(step[0])...); got != step[1] {
			t.Fatalf("%s = %q, want %q", step[0], got, step[1])
		}
	}
	if got := c.do("HELLO", "2"); !strings.HasPrefix(got, "*14\r\n") || !strings.Contains(got, "$2\r\nid\r\n:"+id+"\r\n") {
		t.Fatalf("HELLO 2 = %q, want RESP2's array with id %s", got, id)
	}
	if got := c.do("GET", "nokey"); got != "$-1\r\n" {
		t.Fatalf("GET after HELLO 2 = %q: the pinned connection did not switch", got)
	}
	if log := string(rs.Do(t, "ACL", "LOG")); log != "*0\r\n" {
		t.Fatalf("Redis saw an AUTH: ACL LOG = %q", log)
	}
	if stats := string(rs.Do(t, "INFO", "commandstats")); strings.Contains(stats, "cmdstat_auth") {
		t.Fatalf("AUTH reached Redis: %s", stats)
	}
}

// Inside a stream-mode MULTI, what rproxy acts on when it sees it (HELLO,
// CLIENT SETNAME, CLIENT REPLY) is refused and the transaction aborted, as
// outside stream mode; CLIENT TRACKINGINFO, whose reply rproxy rewrites
// outside a transaction, is queued as on Redis and answered in EXEC's
// array (before, the relay's helper command aborted the transaction).
func TestStreamModeMultiRefusesWhatActsWhenQueued(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c, _, _ := redirectedTracking(t, p)
	c.do("CLIENT", "SETNAME", "before")
	for _, cmd := range [][]string{{"HELLO", "2"}, {"CLIENT", "SETNAME", "inside"}, {"CLIENT", "REPLY", "OFF"}} {
		var batch []byte
		for _, step := range [][]string{{"MULTI"}, {"SET", "k", "1"}, cmd, {"EXEC"}, {"EXISTS", "k"}} {
			batch = resp.AppendCommandString(batch, step...)
		}
		c.send(batch)
		c.readPrefixes("+OK", "+QUEUED", "-ERR rproxy: "+strings.ToUpper(cmd[0]), "-EXECABORT", ":0")
	}
	if got := c.do("CLIENT", "GETNAME"); got != "$6\r\nbefore\r\n" {
		t.Fatalf("CLIENT GETNAME = %q: the refused SETNAME applied", got)
	}
	var batch []byte
	for _, step := range [][]string{{"MULTI"}, {"CLIENT", "TRACKINGINFO"}, {"EXEC"}} {
		batch = resp.AppendCommandString(batch, step...)
	}
	c.send(batch)
	c.readPrefixes("+OK", "+QUEUED", "*1\r\n%3\r\n")
}

// TestAuthPassthroughChecksOnKeptConnections: passthrough mode checks
// credentials on connections it keeps, so that a pipeline of wrong
// passwords costs Redis no connection per guess (each one closed here
// would sit in TIME_WAIT, and enough of them use up the ephemeral ports
// to Redis). A right password in between, and a kept connection Redis
// closed (its user deleted), change no answer.
func TestAuthPassthroughChecksOnKeptConnections(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.AuthPassthrough = true })
	admin := dialClient(t, rs.Addr)
	for _, u := range []string{"alice", "bob"} {
		if r := admin.do("ACL", "SETUSER", u, "on", ">"+u+"pw", "~*", "+@all"); r != "+OK\r\n" {
			t.Fatal(r)
		}
	}
	connections := func() int { return connectionsReceived(t, admin) }
	const guesses = 1000
	wrong := resp.AppendCommandString(nil, "AUTH", "alice", "wrong")
	c := dialClient(t, p.Addr)
	before := connections()
	c.send(bytes.Repeat(wrong, guesses))
	for i := 0; i < guesses; i++ {
		if r := string(c.read()); r != string(replyWrongPassText) {
			t.Fatalf("guess %d = %q", i, r)
		}
	}
	if n := connections() - before; n > 4 {
		t.Errorf("%d wrong passwords opened %d connections to Redis, want at most 4", guesses, n)
	}

	batch := append(bytes.Repeat(wrong, 10), resp.AppendCommandString(nil, "AUTH", "alice", "alicepw")...)
	batch = append(batch, bytes.Repeat(wrong, 10)...)
	c.send(append(batch, resp.AppendCommandString(nil, "ACL", "WHOAMI")...))
	for i := 0; i < 21; i++ {
		want := string(replyWrongPassText)
		if i == 10 {
			want = "+OK\r\n"
		}
		if r := string(c.read()); r != want {
			t.Fatalf("reply %d of the mixed batch = %q, want %q", i, r, want)
		}
	}
	if r := string(c.read()); r != "$5\r\nalice\r\n" {
		t.Errorf("WHOAMI after a right password among wrong ones = %q", r)
	}
	// Redis closes alice's connections, the kept ones logged in as alice too.
	if r := admin.do("ACL", "DELUSER", "alice"); r != ":1\r\n" {
		t.Fatal(r)
	}
	c.expectClosed()
	if r := dialClient(t, p.Addr).do("AUTH", "bob", "bobpw"); r != "+OK\r\n" {
		t.Errorf("AUTH bob after alice's connections were closed = %q", r)
	}
}

const replyWrongPassText = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"

// connectionsReceived is Redis's count of the connections it has accepted,
// asked on admin, a client of Redis itself.
func connectionsReceived(t *testing.T, admin *rawClient) int {
	t.Helper()
	n, err := strconv.Atoi(infoField(admin.do("INFO", "stats"), "total_connections_received"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
