package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// Real clients against rproxy: go-redis, redis-cli and redis-benchmark, each
// compared with the same client against Redis directly where the output is
// deterministic.

// directAndProxied starts two identical servers, A (direct) and B behind
// rproxy, and returns A's address and the proxy's.
func directAndProxied(t *testing.T) (direct, proxied string) {
	t.Helper()
	a := redistest.Start(t)
	b := redistest.Start(t)
	p := proxytest.Start(t, b.Addr)
	return a.Addr, p.Addr
}

func newGoRedis(t *testing.T, addr string, protocol int) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: addr, DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	if protocol != 0 {
		opt.Protocol = protocol
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// goRedisStep is one result of the go-redis scenario: what was done and what
// came back, rendered with %#v so values and their Go types are compared.
type goRedisStep struct {
	what   string
	result string
}

// goRedisScenario runs the same operations on any client and records the
// results. It also checks the results it can predict, so a scenario that
// fails the same way on both sides does not pass unnoticed.
func goRedisScenario(t *testing.T, side string, rdb *redis.Client, prefix string) []goRedisStep {
	t.Helper()
	ctx := context.Background()
	var steps []goRedisStep
	rec := func(what string, val any, err error) {
		steps = append(steps, goRedisStep{what, fmt.Sprintf("%#v err=%v", val, err)})
	}
	must := func(what string, got, want any, err error) {
		t.Helper()
		rec(what, got, err)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s = %#v, %v; want %#v", side, what, got, err, want)
		}
	}
	k := func(s string) string { return prefix + s }

	s, err := rdb.Set(ctx, k("str"), "value", 0).Result()
	must("SET", s, "OK", err)
	s, err = rdb.Get(ctx, k("str")).Result()
	must("GET", s, "value", err)
	_, err = rdb.Get(ctx, k("missing")).Result()
	rec("GET missing", nil, err)
	if !errors.Is(err, redis.Nil) {
		t.Errorf("%s: GET of a missing key: err = %v, want redis.Nil", side, err)
	}
	for i := int64(1); i <= 3; i++ {
		n, err := rdb.Incr(ctx, k("ctr")).Result()
		must("INCR", n, i, err)
	}
	f, err := rdb.IncrByFloat(ctx, k("flt"), 1.5).Result()
	must("INCRBYFLOAT", f, 1.5, err)

	n, err := rdb.HSet(ctx, k("hash"), "a", "1", "b", "2", "c", "3").Result()
	must("HSET", n, int64(3), err)
	m, err := rdb.HGetAll(ctx, k("hash")).Result()
	must("HGETALL", m, map[string]string{"a": "1", "b": "2", "c": "3"}, err)

	// A pipeline of 100 commands.
	pipe := rdb.Pipeline()
	for i := 0; i < 100; i++ {
		key := k("pipe:" + strconv.Itoa(i/4))
		switch i % 4 {
		case 0:
			pipe.Set(ctx, key, "v"+strconv.Itoa(i), 0)
		case 1:
			pipe.Get(ctx, key)
		case 2:
			pipe.Append(ctx, key, "+")
		case 3:
			pipe.StrLen(ctx, key)
		}
	}
	cmds, err := pipe.Exec(ctx)
	rec("pipeline exec", len(cmds), err)
	if err != nil || len(cmds) != 100 {
		t.Errorf("%s: pipeline of 100: %d results, err %v", side, len(cmds), err)
	}
	for i, c := range cmds {
		steps = append(steps, goRedisStep{"pipeline " + strconv.Itoa(i), c.String()})
		if i%4 == 1 {
			want := "v" + strconv.Itoa(i-1)
			if got := c.(*redis.StringCmd).Val(); got != want {
				t.Errorf("%s: pipeline command %d (GET) = %q, want %q", side, i, got, want)
			}
		}
	}

	n, err = rdb.ZAdd(ctx, k("zset"), redis.Z{Score: 1.5, Member: "one"}, redis.Z{Score: 2.25, Member: "two"}, redis.Z{Score: -3, Member: "neg"}).Result()
	must("ZADD", n, int64(3), err)
	zs, err := rdb.ZRangeWithScores(ctx, k("zset"), 0, -1).Result()
	must("ZRANGE WITHSCORES", zs, []redis.Z{{Score: -3, Member: "neg"}, {Score: 1.5, Member: "one"}, {Score: 2.25, Member: "two"}}, err)

	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k("stream"), ID: "5-1", Values: []any{"field", "val"}}).Result()
	must("XADD", id, "5-1", err)
	xs, err := rdb.XRange(ctx, k("stream"), "-", "+").Result()
	must("XRANGE", xs, []redis.XMessage{{ID: "5-1", Values: map[string]any{"field": "val"}}}, err)

	v, err := rdb.Eval(ctx, "return {KEYS[1], ARGV[1], 3, {4, 'five'}}", []string{k("ek")}, "arg").Result()
	must("EVAL", v, []any{k("ek"), "arg", int64(3), []any{int64(4), "five"}}, err)
	v, err = rdb.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{k("str")}).Result()
	must("EVAL GET", v, "value", err)

	// CLIENT SETNAME / GETNAME on one connection of the pool.
	conn := rdb.Conn()
	defer conn.Close()
	v, err = conn.Do(ctx, "CLIENT", "SETNAME", "scenario-"+side[:1]).Result()
	rec("CLIENT SETNAME", v, err)
	if err != nil || v != "OK" {
		t.Errorf("%s: CLIENT SETNAME = %#v, %v; want OK", side, v, err)
	}
	name, err := conn.ClientGetName(ctx).Result()
	rec("CLIENT GETNAME", name != "", err)
	if err != nil || name != "scenario-"+side[:1] {
		t.Errorf("%s: CLIENT GETNAME = %q, %v; want %q", side, name, err, "scenario-"+side[:1])
	}
	return steps
}

func compareSteps(t *testing.T, direct, proxied []goRedisStep) {
	t.Helper()
	if len(direct) != len(proxied) {
		t.Fatalf("go-redis scenario: %d results direct, %d through rproxy", len(direct), len(proxied))
	}
	for i := range direct {
		if direct[i] != proxied[i] {
			t.Errorf("go-redis %s:\n  direct redis: %s\n  via rproxy:   %s", direct[i].what, direct[i].result, proxied[i].result)
		}
	}
}

// TestGoRedisClient runs a go-redis scenario with default options (RESP3,
// HELLO 3 and CLIENT SETINFO on connect) and with Protocol 2, directly and
// through rproxy, and requires the same results.
func TestGoRedisClient(t *testing.T) {
	directAddr, proxyAddr := directAndProxied(t)
	for _, proto := range []int{0, 2} {
		t.Run(fmt.Sprintf("protocol=%d", proto), func(t *testing.T) {
			prefix := fmt.Sprintf("p%d:", proto)
			d := goRedisScenario(t, "direct redis", newGoRedis(t, directAddr, proto), prefix)
			p := goRedisScenario(t, "rproxy", newGoRedis(t, proxyAddr, proto), prefix)
			compareSteps(t, d, p)
		})
	}
}

// TestGoRedisConcurrent: 50 goroutines × 200 operations on one go-redis
// client through rproxy; each goroutine uses its own keys and checks every
// reply, so a reply delivered to the wrong caller is caught.
func TestGoRedisConcurrent(t *testing.T) {
	_, proxyAddr := directAndProxied(t)
	rdb := newGoRedis(t, proxyAddr, 0)
	ctx := context.Background()
	const goroutines, ops = 50, 200
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []string
		nWrong int
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		nWrong++
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctr := fmt.Sprintf("conc:%d:ctr", g)
			list := fmt.Sprintf("conc:%d:list", g)
			var counter, listLen int64
			for i := 0; i < ops; i++ {
				key := fmt.Sprintf("conc:%d:%d", g, i/2)
				val := fmt.Sprintf("value-%d-%d-%s", g, i/2, strings.Repeat("x", i%50))
				switch i % 8 {
				case 0, 4: // SET then (next op) GET of the same key
					if s, err := rdb.Set(ctx, key, val, 0).Result(); err != nil || s != "OK" {
						fail("g%d op%d SET %s = %q, %v", g, i, key, s, err)
					}
				case 1, 5:
					want := fmt.Sprintf("value-%d-%d-%s", g, i/2, strings.Repeat("x", (i-1)%50))
					if s, err := rdb.Get(ctx, key).Result(); err != nil || s != want {
						fail("g%d op%d GET %s = %q, %v; want %q", g, i, key, s, err, want)
					}
				case 2, 6:
					counter++
					if n, err := rdb.Incr(ctx, ctr).Result(); err != nil || n != counter {
						fail("g%d op%d INCR %s = %d, %v; want %d", g, i, ctr, n, err, counter)
					}
				case 3:
					listLen++
					if n, err := rdb.RPush(ctx, list, i).Result(); err != nil || n != listLen {
						fail("g%d op%d RPUSH %s = %d, %v; want %d", g, i, list, n, err, listLen)
					}
				case 7:
					want := strconv.Itoa(i - 4)
					if s, err := rdb.LIndex(ctx, list, -1).Result(); err != nil || s != want {
						fail("g%d op%d LINDEX %s -1 = %q, %v; want %q", g, i, list, s, err, want)
					}
				}
			}
		}()
	}
	wg.Wait()
	if nWrong > 0 {
		t.Fatalf("%d of %d operations through rproxy got a wrong reply; first ones:\n%s", nWrong, goroutines*ops, strings.Join(errs, "\n"))
	}
	// Every goroutine's writes landed.
	n, err := rdb.DBSize(ctx).Result()
	if want := int64(goroutines * (ops/4 + 2)); err != nil || n != want {
		t.Fatalf("DBSIZE after the concurrent run = %d, %v; want %d", n, err, want)
	}
}

// runCLI runs redis-cli against addr and returns its standard output.
func runCLI(t *testing.T, addr string, stdin []byte, args ...string) string {
	t.Helper()
	bin := redistest.RequireBinary(t, "redis-cli")
	host, port := splitAddr(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("redis-cli %v against %s: %v\nstdout: %s\nstderr: %s", args, addr, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func splitAddr(t *testing.T, addr string) (host, port string) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("bad address %q", addr)
	}
	return addr[:i], addr[i+1:]
}

// helloID matches the id field of a HELLO reply in redis-cli output, raw
// ("id 5") or formatted ("4# \"id\" => (integer) 5"): the id differs
// through rproxy (its HELLO reply comes from a shared connection).
var helloID = regexp.MustCompile(`(?m)(^id[ \n]\d+$|"id" => \(integer\) \d+$)`)

// TestRedisCLI runs the same redis-cli invocations against Redis and through
// rproxy and requires the same output.
func TestRedisCLI(t *testing.T) {
	directAddr, proxyAddr := directAndProxied(t)
	cases := []struct {
		args  []string
		hello bool   // a HELLO reply: the id field is masked
		want  string // the direct output must be this, when set
	}{
		{args: []string{"ping"}, want: "PONG\n"},
		{args: []string{"set", "k", "v"}, want: "OK\n"},
		{args: []string{"get", "k"}, want: "v\n"},
		{args: []string{"get", "missing"}, want: "\n"},
		{args: []string{"--no-raw", "get", "missing"}, want: "(nil)\n"},
		{args: []string{"rpush", "l", "a", "b c", "d"}, want: "3\n"},
		{args: []string{"--no-raw", "lrange", "l", "0", "-1"}, want: "1) \"a\"\n2) \"b c\"\n3) \"d\"\n"},
		{args: []string{"lrange", "l", "0", "-1"}, want: "a\nb c\nd\n"},
		{args: []string{"hset", "h", "f1", "1", "f2", "2"}, want: "2\n"},
		{args: []string{"zadd", "z", "1.5", "m"}, want: "1\n"},
		{args: []string{"--no-raw", "incr", "k"}},
		{args: []string{"-3", "hello", "3"}, hello: true},
		{args: []string{"-3", "--no-raw", "hello", "3"}, hello: true},
		{args: []string{"-3", "--no-raw", "hgetall", "h"}, want: "1# \"f1\" => \"1\"\n2# \"f2\" => \"2\"\n"},
		{args: []string{"-3", "--no-raw", "zscore", "z", "m"}, want: "(double) 1.5\n"},
		{args: []string{"-3", "--no-raw", "get", "missing"}, want: "(nil)\n"},
		{args: []string{"--no-raw", "client", "getname"}, want: "(nil)\n"},
		{args: []string{"--no-raw", "nosuchcommand", "x"}},
	}
	for _, c := range cases {
		d := runCLI(t, directAddr, nil, c.args...)
		p := runCLI(t, proxyAddr, nil, c.args...)
		if c.want != "" && d != c.want {
			t.Errorf("redis-cli %q against Redis printed %q, want %q (test expectation wrong?)", c.args, d, c.want)
		}
		if c.hello {
			if !helloID.MatchString(d) || !helloID.MatchString(p) {
				t.Errorf("redis-cli %q: no id field in the HELLO output\n  direct redis: %q\n  via rproxy:   %q", c.args, d, p)
			}
			d = helloID.ReplaceAllString(d, "id <masked>")
			p = helloID.ReplaceAllString(p, "id <masked>")
			if !strings.Contains(d, "proto") || !strings.Contains(d, "3") {
				t.Errorf("redis-cli %q against Redis printed %q: not a RESP3 HELLO reply", c.args, d)
			}
		}
		if d != p {
			t.Errorf("redis-cli %q output differs\n  direct redis: %q\n  via rproxy:   %q", c.args, d, p)
		}
	}
}

// TestRedisCLIPipe: redis-cli --pipe mass insertion of 10,000 SETs through
// rproxy.
func TestRedisCLIPipe(t *testing.T) {
	_, proxyAddr := directAndProxied(t)
	const n = 10000
	var in []byte
	for i := 0; i < n; i++ {
		in = resp.AppendCommandString(in, "SET", "pipe:"+strconv.Itoa(i), "value:"+strconv.Itoa(i))
	}
	out := runCLI(t, proxyAddr, in, "--pipe")
	if !strings.Contains(out, "errors: 0, replies: 10000") {
		t.Fatalf("redis-cli --pipe through rproxy: want \"errors: 0, replies: 10000\" in the output, got:\n%s", out)
	}
	if got := runCLI(t, proxyAddr, nil, "dbsize"); got != "10000\n" {
		t.Errorf("DBSIZE after --pipe = %q, want 10000", got)
	}
	if got := runCLI(t, proxyAddr, nil, "get", "pipe:9999"); got != "value:9999\n" {
		t.Errorf("GET pipe:9999 after --pipe = %q, want value:9999", got)
	}
}

// benchmarkTests are the tests redis-benchmark 7.0 runs by default, as it
// names them in -q output.
var benchmarkTests = []string{
	"PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPUSH",
	"LPOP", "RPOP", "SADD", "HSET", "SPOP", "ZADD", "ZPOPMIN",
	"LPUSH (needed to benchmark LRANGE)", "LRANGE_100 (first 100 elements)",
	"LRANGE_300 (first 300 elements)", "LRANGE_500 (first 500 elements)",
	"LRANGE_600 (first 600 elements)", "MSET (10 keys)",
}

// TestRedisBenchmark runs redis-benchmark's full default test list through
// rproxy and requires every test to complete without errors.
func TestRedisBenchmark(t *testing.T) {
	_, proxyAddr := directAndProxied(t)
	bin := redistest.RequireBinary(t, "redis-benchmark")
	host, port := splitAddr(t, proxyAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-c", "50", "-n", "2000", "-q")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("redis-benchmark through rproxy: %v\n%s", err, text)
	}
	// -q output: progress lines end in \r, results in \n.
	results := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(text, "\r", "\n")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, rest, ok := strings.Cut(line, ": "); ok && strings.Contains(rest, "requests per second") {
			results[name] = rest
		}
	}
	for _, name := range benchmarkTests {
		if _, ok := results[name]; !ok {
			t.Errorf("redis-benchmark through rproxy: no result line for %q", name)
		}
	}
	if len(results) != len(benchmarkTests) {
		t.Errorf("redis-benchmark printed %d results, want %d: %v", len(results), len(benchmarkTests), results)
	}
	for _, bad := range []string{"Could not fetch server CONFIG", "ERR", "Error", "error"} {
		if strings.Contains(text, bad) {
			t.Errorf("redis-benchmark output contains %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("redis-benchmark output:\n%s", strings.ReplaceAll(text, "\r", "\n"))
	}
}

// proxyConn is a raw connection to rproxy.
func proxyConn(t *testing.T, addr string) *rawConn {
	t.Helper()
	return dialRaw(t, "rproxy", addr)
}

func TestClientNamePerSession(t *testing.T) {
	directAddr, proxyAddr := directAndProxied(t)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c1 := proxyConn(t, proxyAddr)
			c2 := proxyConn(t, proxyAddr)
			null := "$-1\r\n"
			if proto == 3 {
				null = "_\r\n"
				for _, c := range []*rawConn{c1, c2} {
					if r := c.do(t, "HELLO", "3"); r[0] != '%' {
						t.Fatalf("HELLO 3: got %q", r)
					}
				}
			}
			for i, c := range []*rawConn{c1, c2} {
				if r := c.do(t, "CLIENT", "GETNAME"); string(r) != null {
					t.Errorf("conn %d: CLIENT GETNAME before SETNAME = %q, want %q", i+1, r, null)
				}
			}
			if r := c1.do(t, "CLIENT", "SETNAME", "alpha"); string(r) != "+OK\r\n" {
				t.Fatalf("conn 1: CLIENT SETNAME alpha = %q", r)
			}
			if r := c2.do(t, "CLIENT", "GETNAME"); string(r) != null {
				t.Errorf("conn 2: CLIENT GETNAME after conn 1 set its name = %q, want %q", r, null)
			}
			if r := c2.do(t, "CLIENT", "SETNAME", "beta"); string(r) != "+OK\r\n" {
				t.Fatalf("conn 2: CLIENT SETNAME beta = %q", r)
			}
			// Interleave with forwarded commands, which use shared connections.
			for round := 0; round < 3; round++ {
				c1.do(t, "SET", "x", "1")
				c2.do(t, "GET", "x")
				if r := c1.do(t, "CLIENT", "GETNAME"); string(r) != "$5\r\nalpha\r\n" {
					t.Errorf("conn 1: CLIENT GETNAME = %q, want alpha", r)
				}
				if r := c2.do(t, "CLIENT", "GETNAME"); string(r) != "$4\r\nbeta\r\n" {
					t.Errorf("conn 2: CLIENT GETNAME = %q, want beta", r)
				}
			}
			if r := c1.do(t, "CLIENT", "SETNAME", "has space"); !strings.HasPrefix(string(r), "-ERR") {
				t.Errorf("CLIENT SETNAME with a space = %q, want an error", r)
			}
			if r := c1.do(t, "CLIENT", "GETNAME"); string(r) != "$5\r\nalpha\r\n" {
				t.Errorf("conn 1: CLIENT GETNAME after a rejected SETNAME = %q, want alpha", r)
			}
			id1a, id1b, id2 := c1.do(t, "CLIENT", "ID"), c1.do(t, "CLIENT", "ID"), c2.do(t, "CLIENT", "ID")
			for _, r := range [][]byte{id1a, id2} {
				if len(r) < 4 || r[0] != ':' {
					t.Fatalf("CLIENT ID = %q, want an integer", r)
				}
			}
			if !bytes.Equal(id1a, id1b) {
				t.Errorf("CLIENT ID of one connection changed: %q then %q", id1a, id1b)
			}
			if bytes.Equal(id1a, id2) {
				t.Errorf("two connections got the same CLIENT ID %q", id1a)
			}
			// CLIENT SETINFO: answered per session by a server that has it
			// (7.2+), else that server's own error; either way what Redis
			// itself answers.
			direct := dialRaw(t, "direct redis", directAddr)
			if proto == 3 {
				direct.do(t, "HELLO", "3")
			}
			for _, args := range [][]string{{"CLIENT", "SETINFO", "LIB-NAME", "mylib"}, {"CLIENT", "SETINFO", "LIB-VER", "1.0"}} {
				if d, p := direct.do(t, args...), c1.do(t, args...); !bytes.Equal(d, p) {
					t.Errorf("%q:\n  direct redis: %q\n  via rproxy:   %q", args, d, p)
				}
			}
			// An empty name clears it.
			if r := c1.do(t, "CLIENT", "SETNAME", ""); string(r) != "+OK\r\n" {
				t.Errorf("CLIENT SETNAME \"\" = %q, want +OK", r)
			}
			if r := c1.do(t, "CLIENT", "GETNAME"); string(r) != null {
				t.Errorf("CLIENT GETNAME after clearing = %q, want %q", r, null)
			}
		})
	}
}

// id returns the client's CLIENT ID.
func (c *rawClient) id() string {
	return strings.TrimSuffix(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"), "\r\n")
}

// Sessions are typed as Redis types its clients (CLIENT LIST TYPE, CLIENT
// KILL TYPE, the S and O flags): a replica after SYNC, pubsub while
// subscribed, normal otherwise, MONITOR and tracking included although
// rproxy gives them a stream of their own. CLIENT KILL TYPE slave ends a
// redis-cli --replica (Redis's integration/redis-cli "Connecting as a
// replica").
func TestClientTypes(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	admin := dialClient(t, p.Addr)
	adminID := admin.id()
	repl := dialClient(t, p.Addr)
	replID := repl.id()
	// As redis-cli --replica: REPLCONF first (which gives the session its
	// stream), then SYNC.
	if r := repl.do("REPLCONF", "capa", "eof"); r != "+OK\r\n" {
		t.Fatalf("REPLCONF capa eof = %q", r)
	}
	repl.send(resp.AppendCommandString(nil, "SYNC"))
	mon := dialClient(t, p.Addr)
	monID := mon.id()
	if r := mon.do("MONITOR"); r != "+OK\r\n" {
		t.Fatalf("MONITOR = %q", r)
	}
	sub := dialClient(t, p.Addr)
	subID := sub.id()
	sub.do("SUBSCRIBE", "ch")
	left := dialClient(t, p.Addr)
	leftID := left.id()
	left.do("SUBSCRIBE", "ch2")
	left.do("UNSUBSCRIBE")
	trk := dialClient(t, p.Addr)
	trkID := trk.id()
	if r := trk.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON = %q", r)
	}
	ids := func(typ string) []string {
		var out []string
		for _, line := range strings.Split(admin.do("CLIENT", "LIST", "TYPE", typ), "\n") {
			if i := strings.Index(line, "id="); i >= 0 {
				out = append(out, strings.Fields(line[i+3:])[0])
			}
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	for typ, want := range map[string][]string{
		"replica": {replID},
		"slave":   {replID},
		"pubsub":  {subID},
		"normal":  sorted(adminID, monID, leftID, trkID),
	} {
		waitFor(t, "CLIENT LIST TYPE "+typ, func() bool { return slices.Equal(ids(typ), want) })
	}
	bcast := dialClient(t, p.Addr)
	bcastID := bcast.id()
	if r := bcast.do("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "cache:"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on BCAST = %q", r)
	}
	// Tracking shows in flags (t, and B for BCAST, as Redis's) and redir (0:
	// on, without REDIRECT; -1: off).
	for id, want := range map[string]string{replID: "flags=S ", monID: "flags=O ", subID: "flags=P ",
		trkID: "flags=t ", bcastID: "flags=tB ", leftID: "flags=N "} {
		line := admin.do("CLIENT", "LIST", "ID", id)
		redir := " redir=-1 "
		if id == trkID || id == bcastID {
			redir = " redir=0 "
		}
		if !strings.Contains(line, " "+want) || !strings.Contains(line, redir) {
			t.Errorf("CLIENT LIST ID %s: %q, want %s and%s", id, line, want, redir)
		}
	}
	if r := admin.do("CLIENT", "KILL", "TYPE", "slave"); r != ":1\r\n" {
		t.Fatalf("CLIENT KILL TYPE slave = %q, want :1", r)
	}
	repl.expectClosed()
	if r := admin.do("CLIENT", "KILL", "TYPE", "pubsub"); r != ":1\r\n" {
		t.Fatalf("CLIENT KILL TYPE pubsub = %q, want :1", r)
	}
	sub.expectClosed()
}

// HELLO's id field is the session's id, the one CLIENT ID answers and
// CLIENT KILL ID takes, in both protocols and on a pinned session: go-redis
// keeps the id HELLO gives and kills by it (its client-side cache spec
// "evicts cached entries when the tracked connection dies").
func TestHelloGivesSessionID(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	admin := dialClient(t, p.Addr)
	helloID := func(reply string) string {
		v, err := resp.Parse([]byte(reply))
		if err != nil {
			t.Fatalf("HELLO reply %q: %v", reply, err)
		}
		for i := 0; i+1 < len(v.Elems); i += 2 {
			if string(v.Elems[i].Str) == "id" {
				return strconv.FormatInt(v.Elems[i+1].Int, 10)
			}
		}
		t.Fatalf("HELLO reply %q has no id", reply)
		return ""
	}
	for _, tc := range []struct {
		name  string
		setup []string
		proto string
	}{{"RESP2", nil, "2"}, {"RESP3", nil, "3"}, {"RESP3 in db 9 (pinned)", []string{"SELECT", "9"}, "3"}} {
		c := dialClient(t, p.Addr)
		if tc.setup != nil {
			c.do(tc.setup...)
		}
		got := helloID(c.do("HELLO", tc.proto))
		if want := strings.TrimSuffix(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"), "\r\n"); got != want {
			t.Errorf("%s: HELLO id %s, CLIENT ID %s", tc.name, got, want)
		}
		if r := admin.do("CLIENT", "KILL", "ID", got); r != ":1\r\n" {
			t.Errorf("%s: CLIENT KILL ID <HELLO's id> = %q, want :1", tc.name, r)
		}
		c.expectClosed()
	}
}

// CLIENT KILL and CLIENT UNBLOCK from a session in stream mode (tracking
// on, here) speak in rproxy's ids, as from any session: they were sent to
// Redis as they were, where the ids mean other connections (go-redis's
// client-side-cache spec "evicts cached entries when the tracked
// connection dies" kills from a client that had tried CLIENT TRACKING).
// A session that kills itself gets its reply and is closed.
func TestClientKillAndUnblockInStreamMode(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	streaming := func() *rawClient {
		c := dialClient(t, p.Addr)
		if r := c.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
			t.Fatalf("CLIENT TRACKING ON = %q", r)
		}
		return c
	}
	s := streaming()
	victim := dialClient(t, p.Addr)
	victimID := victim.id()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"CLIENT", "KILL", "ID", "999999"}, ":0\r\n"},
		{[]string{"CLIENT", "KILL", "ID", s.id()}, ":0\r\n"}, // SKIPME yes
		{[]string{"CLIENT", "KILL", "ID", "0"}, "-ERR client-id should be greater than 0\r\n"},
		{[]string{"CLIENT", "KILL", "ID", victimID}, ":1\r\n"},
	} {
		if r := s.do(tc.args...); r != tc.want {
			t.Errorf("%q in stream mode = %q, want %q", tc.args, r, tc.want)
		}
	}
	victim.expectClosed()

	blocked := dialClient(t, p.Addr)
	blockedID := blocked.id()
	blocked.send(resp.AppendCommandString(nil, "BLPOP", "nothing", "0"))
	waitFor(t, "the BLPOP blocked", func() bool {
		return strings.Contains(dialClient(t, p.Addr).do("CLIENT", "LIST", "ID", blockedID), "flags=b")
	})
	if r := s.do("CLIENT", "UNBLOCK", blockedID); r != ":1\r\n" {
		t.Errorf("CLIENT UNBLOCK in stream mode = %q, want :1", r)
	}
	if r := string(blocked.read()); r != "*-1\r\n" {
		t.Errorf("unblocked BLPOP = %q, want a null array", r)
	}

	self := streaming()
	self.send(resp.AppendCommandString(nil, "CLIENT", "KILL", "ID", self.id(), "SKIPME", "no"))
	if got := self.expectClosed(); got != ":1\r\n" {
		t.Errorf("CLIENT KILL ID <own> SKIPME no in stream mode: %q before the close, want :1", got)
	}
	old := streaming()
	old.send(resp.AppendCommandString(nil, "CLIENT", "KILL", old.nc.LocalAddr().String()))
	if got := old.expectClosed(); got != "+OK\r\n" {
		t.Errorf("CLIENT KILL <own addr> in stream mode: %q before the close, want +OK", got)
	}
	if r := s.do("PING"); r != "+PONG\r\n" {
		t.Errorf("the killing session afterwards: PING = %q", r)
	}
}

// TestClientKillOfABlockedClient: a client blocked in BLPOP is served from
// inside its socket's read (rawRead's step), where closing the socket must
// not wait for that read: CLIENT KILL from another client answers at once,
// the blocked client sees its connection closed, and Redis no longer holds
// the BLPOP (three times). QUIT after a blocking command that returned
// closes as it should.
func TestClientKillOfABlockedClient(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	killer := dialClient(t, p.Addr)
	for round := range 3 {
		blocked := dialClient(t, p.Addr)
		blockedID := blocked.id()
		blocked.send(resp.AppendCommandString(nil, "BLPOP", "nothing", "0"))
		waitFor(t, "the BLPOP blocked", func() bool {
			return strings.Contains(killer.do("CLIENT", "LIST", "ID", blockedID), "flags=b")
		})
		start := time.Now()
		if r := killer.do("CLIENT", "KILL", "ID", blockedID); r != ":1\r\n" {
			t.Fatalf("round %d: CLIENT KILL ID <blocked> = %q, want :1", round, r)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("round %d: CLIENT KILL of a blocked client took %v", round, took)
		}
		if got := blocked.expectClosed(); got != "" {
			t.Errorf("round %d: the killed client read %q before the close", round, got)
		}
		waitFor(t, "Redis to let go of the BLPOP", func() bool {
			return !strings.Contains(string(rs.Do(t, "CLIENT", "LIST")), "cmd=blpop")
		})
	}
	c := dialClient(t, p.Addr)
	if r := c.do("RPUSH", "list", "a"); r != ":1\r\n" {
		t.Fatalf("RPUSH = %q", r)
	}
	if r := c.do("BLPOP", "list", "0"); r != "*2\r\n$4\r\nlist\r\n$1\r\na\r\n" {
		t.Fatalf("BLPOP = %q", r)
	}
	c.send(resp.AppendCommandString(nil, "QUIT"))
	if got := c.expectClosed(); got != "+OK\r\n" {
		t.Errorf("QUIT after a BLPOP: %q before the close, want +OK", got)
	}
}

// TestClientListShowsABlockedClientAsRedisDoes: CLIENT LIST shows a client
// waiting in a blocking command as Redis does (the b flag, and the
// blocking command as cmd= even with more commands behind it in the
// pipeline), and after its reply the flags and the last command, also
// for a client in stream mode (RESP3 with CLIENT TRACKING ON, as rueidis
// connects by default) and for two blocking commands pipelined there.
// Each step is run against Redis first and rproxy must come to show the
// same flags and cmd. Before 2026-12-01 rproxy never showed b in stream
// mode (rueidis's TestUnblockOnCancelReusesBlockingConn waits for it), nor
// any stream-mode command as cmd=, and showed the command before the
// BLPOP while it waited.
func TestClientListShowsABlockedClientAsRedisDoes(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	field := regexp.MustCompile(` (flags=\S+) .* (cmd=\S+) `)
	shown := func(lister *rawClient, id string) string {
		m := field.FindStringSubmatch(lister.do("CLIENT", "LIST", "ID", id))
		if m == nil {
			return "(no line)"
		}
		return m[1] + " " + m[2]
	}
	blpop := resp.AppendCommandString(nil, "BLPOP", "blocked:list", "0")
	get := resp.AppendCommandString(nil, "GET", "blocked:other")
	push := func(c, other *rawClient, v string, replies ...string) {
		other.do("LPUSH", "blocked:list", v)
		c.readPrefixes(replies...)
	}
	// A step acts, then CLIENT LIST is read; blocks: Redis is waited for
	// to show the client blocked first.
	type step struct {
		name   string
		blocks bool
		act    func(c, other *rawClient)
	}
	for _, tc := range []struct {
		name  string
		setup [][]string
		steps []step
	}{{
		name: "pipelined after the BLPOP",
		steps: []step{
			{"blocked", true, func(c, _ *rawClient) { c.send(append(slices.Clip(blpop), get...)) }},
			{"answered", false, func(c, other *rawClient) { push(c, other, "a", "*2", "$-1") }},
		},
	}, {
		name:  "stream mode",
		setup: [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}},
		steps: []step{
			{"blocked", true, func(c, _ *rawClient) { c.send(blpop) }},
			{"answered", false, func(c, other *rawClient) { push(c, other, "a", "*2") }},
			{"then a GET", false, func(c, _ *rawClient) { c.send(get); c.readPrefixes("_") }},
		},
	}, {
		name:  "stream mode, two pipelined",
		setup: [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}},
		steps: []step{
			{"blocked", true, func(c, _ *rawClient) { c.send(append(slices.Clip(blpop), blpop...)) }},
			{"one answered", true, func(c, other *rawClient) { push(c, other, "a", "*2") }},
			{"both answered", false, func(c, other *rawClient) { push(c, other, "b", "*2") }},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string // Redis's
			for _, addr := range []string{rs.Addr, p.Addr} {
				c, other, lister := dialClient(t, addr), dialClient(t, addr), dialClient(t, addr)
				for _, args := range tc.setup {
					c.do(args...)
				}
				id := c.id()
				for i, st := range tc.steps {
					st.act(c, other)
					if addr == rs.Addr {
						if st.blocks {
							waitFor(t, st.name+": Redis to show the client blocked", func() bool {
								return strings.Contains(shown(lister, id), "flags=b")
							})
						}
						want = append(want, shown(lister, id))
						continue
					}
					var got string
					waitFor(t, fmt.Sprintf("%s: rproxy's CLIENT LIST to show Redis's %q", st.name, want[i]), func() bool {
						got = shown(lister, id)
						return got == want[i]
					})
				}
			}
			t.Logf("Redis and rproxy: %q", want)
		})
	}
}

// TestStreamModeCommandsCounted: a stream-mode session's commands count in
// rproxy_proxy_command_calls_total, as the others' do (before 2026-12-01
// a RESP3 client with tracking on, rueidis's default, counted in none).
func TestStreamModeCommandsCounted(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	calls := func() float64 {
		v, _ := metricSum(t, p.Registry, "rproxy_proxy_command_calls_total", map[string]string{"command": "get"})
		return v
	}
	c.do("HELLO", "3")
	c.do("CLIENT", "TRACKING", "ON")
	before := calls()
	c.pipeline([]string{"GET", "counted:a"}, []string{"GET", "counted:b"}, []string{"GET", "counted:c"})
	if got := calls() - before; got != 3 {
		t.Errorf("3 GETs in stream mode counted %v times in rproxy_proxy_command_calls_total{command=\"get\"}", got)
	}
}
