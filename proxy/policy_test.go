package proxy_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// withPolicy runs the proxy with the shipped policy defaults plus rules.
func withPolicy(edit func(*policy.Config)) func(*proxy.Config) {
	return func(c *proxy.Config) {
		pc := policy.DefaultConfig()
		if edit != nil {
			edit(&pc)
		}
		c.Policy = &pc
	}
}

func TestPolicyDefaultsRefuseWithAdvice(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	cases := map[string][]string{
		"SCAN":     {"KEYS", "*"},
		"FLUSHALL": {"FLUSHALL"},
		"FLUSHDB":  {"flushdb", "async"},
		"admin":    {"CONFIG", "SET", "maxmemory", "1"},
		"operator": {"DEBUG", "SLEEP", "0"},
		"directly": {"SCRIPT", "DEBUG", "YES"},
	}
	for advice, cmd := range cases {
		r := c.do(cmd...)
		if !strings.HasPrefix(r, "-DENIED ") || !strings.Contains(r, advice) {
			t.Errorf("%v = %q, want -DENIED mentioning %s", cmd, r, advice)
		}
	}
	// Allowed commands in the same pipeline keep their order and replies.
	if r := c.do("CONFIG", "GET", "maxmemory"); !strings.HasPrefix(r, "*2\r\n") {
		t.Errorf("CONFIG GET = %q", r)
	}
	if got := counterValue(t, p.Registry, "rproxy_policy_decisions_total", map[string]string{"rule": "deny-keys", "action": "deny"}); got != 1 {
		t.Errorf("deny-keys counted %v times", got)
	}
	if n := regexp.MustCompile(`cmdstat_keys:calls=(\d+)`).FindSubmatch(rs.Do(t, "INFO", "commandstats")); n != nil {
		t.Errorf("KEYS reached Redis: %s", n[0])
	}
}

// An operator rule placed first lets one address run what a default denies;
// a dry-run rule counts and changes nothing; rewrite sends another command.
func TestPolicyOperatorRules(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(func(pc *policy.Config) {
		pc.Rules = []policy.Rule{
			{Name: "local-flush", Commands: []string{"flushall"}, Args: []string{"async"}, Addrs: []string{"127.0.0.0/8"}, Action: policy.Allow},
			{Name: "dry-secret", Commands: []string{"get"}, Keys: []string{"secret:*"}, Action: policy.Log, LogAction: policy.Deny},
			{Name: "del-to-unlink", Commands: []string{"del"}, Keys: []string{"tmp:*"}, Action: policy.Rewrite, RewriteTo: "UNLINK"},
		}
	}))
	c := dialClient(t, p.Addr)
	if r := c.do("FLUSHALL"); !strings.HasPrefix(r, "-DENIED") {
		t.Errorf("FLUSHALL without ASYNC = %q", r)
	}
	if r := c.do("FLUSHALL", "ASYNC"); r != "+OK\r\n" {
		t.Errorf("FLUSHALL ASYNC from loopback = %q", r)
	}
	rs.Do(t, "SET", "secret:1", "s")
	if r := c.do("GET", "secret:1"); r != "$1\r\ns\r\n" {
		t.Errorf("GET under a dry-run rule = %q", r)
	}
	if got := counterValue(t, p.Registry, "rproxy_policy_decisions_total", map[string]string{"rule": "dry-secret", "action": "log_deny"}); got != 1 {
		t.Errorf("dry run counted %v", got)
	}
	rs.Do(t, "SET", "tmp:1", "x")
	rs.Do(t, "CONFIG", "RESETSTAT")
	if r := c.do("DEL", "tmp:1"); r != ":1\r\n" {
		t.Errorf("rewritten DEL = %q", r)
	}
	stats := string(rs.Do(t, "INFO", "commandstats"))
	if !strings.Contains(stats, "cmdstat_unlink:calls=1") || strings.Contains(stats, "cmdstat_del:") {
		t.Errorf("DEL tmp:1 was not sent as UNLINK:\n%s", stats)
	}
}

// fillList makes key a list of n elements, directly on Redis.
func fillList(t *testing.T, rs *redistest.Server, key string, n int) {
	t.Helper()
	for done := 0; done < n; done += 100000 {
		rs.Do(t, "EVAL", "for i=1,tonumber(ARGV[1]) do redis.call('RPUSH', KEYS[1], i) end", "1", key, strconv.Itoa(min(100000, n-done)))
	}
}

// DEL of a 1M-element list is refused (default) or sent as UNLINK, and other
// clients are served meanwhile; small DELs pass.
func TestPolicyBigKeyDel(t *testing.T) {
	rs := redistest.Start(t)
	deny := proxytest.Start(t, rs.Addr, withPolicy(nil))
	rewrite := proxytest.Start(t, rs.Addr, withPolicy(func(pc *policy.Config) { pc.BigKeys.Action = policy.Rewrite }))
	fillList(t, rs, "big", 1_000_000)
	fillList(t, rs, "small", 100)
	rs.Do(t, "SET", "s", strings.Repeat("x", 2<<20))
	c := dialClient(t, deny.Addr)
	r := c.do("DEL", "small", "big")
	if !strings.HasPrefix(r, "-DENIED") || !strings.Contains(r, "1000000") || !strings.Contains(r, "UNLINK") {
		t.Fatalf("DEL of a 1M-element list = %q", r)
	}
	if r := string(rs.Do(t, "LLEN", "big")); r != ":1000000\r\n" {
		t.Fatalf("big list after a refused DEL: LLEN = %q", r)
	}
	if r := c.do("DEL", "s"); !strings.HasPrefix(r, "-DENIED") || !strings.Contains(r, "string") {
		t.Fatalf("DEL of a 2 MB string = %q", r)
	}
	if r := c.do("DEL", "small", "nosuchkey"); r != ":1\r\n" {
		t.Fatalf("DEL of a 100-element list = %q", r)
	}
	// Pipelined after a write: the probe sees the write (the list grows past
	// the limit inside the same client batch).
	c.send([]byte("*3\r\n$5\r\nRPUSH\r\n$4\r\ngrow\r\n$1\r\n1\r\n*2\r\n$3\r\nDEL\r\n$4\r\ngrow\r\n"))
	if r1, r2 := string(c.read()), string(c.read()); r1 != ":1\r\n" || r2 != ":1\r\n" {
		t.Fatalf("RPUSH then DEL in one batch = %q %q", r1, r2)
	}

	// Rewrite: the DEL runs as UNLINK while another client keeps getting
	// answers.
	other := dialClient(t, rewrite.Addr)
	var slowest atomic.Int64
	stop := loopUntilStopped(func() bool {
		start := time.Now()
		if r := other.do("PING"); r != "+PONG\r\n" {
			t.Errorf("PING = %q", r)
			return false
		}
		if d := time.Since(start).Nanoseconds(); d > slowest.Load() {
			slowest.Store(d)
		}
		return true
	})
	rs.Do(t, "CONFIG", "RESETSTAT")
	if r := dialClient(t, rewrite.Addr).do("DEL", "big"); r != ":1\r\n" {
		t.Fatalf("rewritten DEL = %q", r)
	}
	time.Sleep(50 * time.Millisecond)
	stop()
	stats := string(rs.Do(t, "INFO", "commandstats"))
	if !strings.Contains(stats, "cmdstat_unlink:calls=1") || strings.Contains(stats, "cmdstat_del:") {
		t.Fatalf("big DEL not sent as UNLINK:\n%s", stats)
	}
	t.Logf("slowest PING of another client during the big UNLINK: %v", time.Duration(slowest.Load()))
	if d := time.Duration(slowest.Load()); d > time.Second {
		t.Fatalf("another client waited %v during the big delete", d)
	}
	// Redis itself was not blocked: UNLINK hands the free to a background
	// thread (a DEL of this list takes tens of milliseconds).
	m := regexp.MustCompile(`cmdstat_unlink:calls=1,usec=(\d+),`).FindStringSubmatch(stats)
	if m == nil {
		t.Fatalf("no UNLINK timing in:\n%s", stats)
	}
	if usec, _ := strconv.Atoi(m[1]); usec > 5000 {
		t.Fatalf("UNLINK of the big list took %dus in Redis", usec)
	}
}

var ttlReply = regexp.MustCompile(`^:(\d+)\r\n$`)

func ttlOf(t *testing.T, rs *redistest.Server, key string) int {
	t.Helper()
	m := ttlReply.FindStringSubmatch(string(rs.Do(t, "TTL", key)))
	if m == nil {
		t.Fatalf("TTL %s: no integer reply", key)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// 1,000 SET EX 100 end with TTLs spread over [90, 100]; locks (NX) and
// absolute expiries keep exactly what was asked.
func TestPolicyJitter(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	var pipe []byte
	for i := 0; i < 1000; i++ {
		pipe = fmt.Appendf(pipe, "*5\r\n$3\r\nSET\r\n$%d\r\nj:%d\r\n$1\r\nv\r\n$2\r\nEX\r\n$3\r\n100\r\n", len(strconv.Itoa(i))+2, i)
	}
	c.send(pipe)
	for i := 0; i < 1000; i++ {
		if r := string(c.read()); r != "+OK\r\n" {
			t.Fatalf("SET %d = %q", i, r)
		}
	}
	seen := map[int]int{}
	for i := 0; i < 1000; i++ {
		ttl := ttlOf(t, rs, "j:"+strconv.Itoa(i))
		if ttl < 89 || ttl > 100 { // 89: a second may tick between SET and TTL
			t.Fatalf("TTL of j:%d = %d, want within [90, 100]", i, ttl)
		}
		seen[ttl]++
	}
	if len(seen) < 8 {
		t.Fatalf("TTLs not spread: %v", seen)
	}
	t.Logf("TTL histogram of 1000 SET EX 100: %v", seen)
	if r := c.do("SET", "lock", "me", "NX", "EX", "100"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	if ttl := ttlOf(t, rs, "lock"); ttl != 100 && ttl != 99 {
		t.Fatalf("SET NX EX 100 got TTL %d", ttl)
	}
	at := time.Now().Unix() + 100
	c.do("SET", "abs", "v", "EXAT", strconv.FormatInt(at, 10))
	if ttl := ttlOf(t, rs, "abs"); ttl > 100 {
		t.Fatalf("SET EXAT got TTL %d", ttl)
	}
	if got := counterValue(t, p.Registry, "rproxy_policy_jitter_applied_total", nil); got < 900 {
		t.Fatalf("jitter applied %v times", got)
	}
}

// In stream mode (after SUBSCRIBE) replies come from Redis; a refusal is
// still delivered in order. In RESP2's subscribed mode Redis runs only the
// subscribe commands, PING, QUIT and RESET, so a refusal cannot be made by
// a script there (Redis answered "Can't execute 'eval'").
func TestPolicyInStreamMode(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	for proto, pong := range map[string]string{"2": "*2\r\n$4\r\npong\r\n$0\r\n\r\n", "3": "+PONG\r\n"} {
		c := dialClient(t, p.Addr)
		c.do("HELLO", proto)
		c.do("SUBSCRIBE", "ch")
		c.send(resp.AppendCommandString(resp.AppendCommandString(nil, "KEYS", "*"), "PING"))
		c.readPrefixes("-DENIED KEYS", pong)
	}
}

// A refusal inside a stream-mode session's transaction aborts it, as
// outside stream mode (docs/commands.md, Transactions): the client sees the
// refusal in place of QUEUED and EXEC gets Redis's EXECABORT, with nothing
// of the transaction applied. Stream mode here is RESP3 client tracking,
// as client-side caches (redis-py's, Lettuce's) turn it on.
func TestStreamModeRefusalInsideMultiAborts(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	if r := c.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON = %q", r)
	}
	c.do("SET", "k", "before")
	var batch []byte
	for _, cmd := range [][]string{{"MULTI"}, {"SET", "k", "inside"}, {"KEYS", "*"}, {"INCR", "n"}, {"EXEC"}, {"GET", "k"}, {"EXISTS", "n"}} {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	c.send(batch)
	c.readPrefixes("+OK", "+QUEUED", "-DENIED KEYS", "+QUEUED", "-EXECABORT", "$6\r\nbefore", ":0")
	if got := counterValue(t, p.Registry, "rproxy_proxy_commands_total", map[string]string{"outcome": "refused"}); got != 1 {
		t.Fatalf("refusals counted %v, want 1", got)
	}
}

// Swapping the policy under load drops no connection and takes effect.
func TestPolicyReloadUnderLoad(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	var ops, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialClient(t, p.Addr)
			k := "load:" + strconv.Itoa(i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c.doErr("SET", k, "v") != "+OK\r\n" || c.doErr("GET", k) != "$1\r\nv\r\n" {
					failures.Add(1)
				}
				ops.Add(1)
			}
		}()
	}
	keys := dialClient(t, p.Addr)
	for i := 0; i < 20; i++ {
		pc := policy.DefaultConfig()
		allowed := i%2 == 0
		if allowed {
			pc.Rules = []policy.Rule{{Name: "allow-keys", Commands: []string{"keys"}, Action: policy.Allow}}
		}
		if err := p.Server.SetPolicy(pc); err != nil {
			t.Fatal(err)
		}
		r := keys.do("KEYS", "nomatch*")
		if allowed != (r == "*0\r\n") {
			t.Fatalf("reload %d (KEYS allowed %v): KEYS = %q", i, allowed, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	bad := policy.DefaultConfig()
	bad.Rules = []policy.Rule{{Name: "x", Commands: []string{"get"}, Action: "explode"}}
	if err := p.Server.SetPolicy(bad); err == nil {
		t.Fatal("a bad policy was accepted")
	}
	close(stop)
	wg.Wait()
	if failures.Load() > 0 || ops.Load() == 0 {
		t.Fatalf("%d failures in %d operations during reloads", failures.Load(), ops.Load())
	}
	if got := counterValue(t, p.Registry, "rproxy_proxy_client_connections_total", nil); got != 21 {
		t.Fatalf("%v connections accepted for 21 clients: some reconnected", got)
	}
	if got := counterValue(t, p.Registry, "rproxy_proxy_client_connections", nil); got != 21 {
		t.Fatalf("%v of 21 clients still connected after the reloads", got)
	}
}

// Under CLIENT REPLY OFF or after SKIP, Redis answers nothing, so rproxy's
// replies in stream mode (a refusal, HELLO's rewritten reply) must not wait
// for one: before, a later refusal took the place of a silenced HELLO's and
// its reply was lost.
func TestStreamModeClientReplyOffAndSkip(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	c.do("CLIENT", "TRACKING", "ON")
	var batch []byte
	for _, cmd := range [][]string{
		{"CLIENT", "REPLY", "OFF"}, {"HELLO", "3"}, {"KEYS", "*"}, {"CLIENT", "REPLY", "ON"}, // +OK
		{"KEYS", "*"}, {"PING"}, // -DENIED, +PONG
		{"CLIENT", "REPLY", "SKIP"}, {"HELLO", "3"}, {"PING"}, // +PONG
		{"CLIENT", "REPLY", "SKIP"}, {"KEYS", "*"}, {"KEYS", "*"}, {"ECHO", "end"}, // -DENIED, end
	} {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	c.send(batch)
	c.readPrefixes("+OK\r\n", "-DENIED KEYS", "+PONG\r\n", "+PONG\r\n", "-DENIED KEYS", "$3\r\nend\r\n")
}

// In RESP2's subscribed mode Redis refuses CLIENT REPLY (as everything but
// the subscribe commands, PING, QUIT and RESET): rproxy must not take the
// replies as silenced then, or the next refusal reaches the client as
// Redis's "unknown command 'rproxy-error'".
func TestResp2SubscribedClientReplyRefusedByRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	c.do("SUBSCRIBE", "ch")
	c.send(resp.AppendCommandString(resp.AppendCommandString(nil, "CLIENT", "REPLY", "OFF"), "KEYS", "*"))
	c.readPrefixes("-ERR Can't execute 'client|reply'", "-DENIED KEYS")
}
