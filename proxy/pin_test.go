package proxy_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// statefulCorpus exercises connection state: transactions (queued-command
// errors, EXECABORT, nesting, WATCH inside MULTI), SELECT (including inside
// a transaction) and blocking commands that time out or find data. It runs
// on one connection per side, so state carries from command to command.
func statefulCorpus() []compatCase {
	return []compatCase{
		cmd("EXEC"), cmd("DISCARD"), cmd("UNWATCH"),
		cmd("MULTI"), cmd("SET", "t", "1"), cmd("INCR", "t"), cmd("GET", "t"), cmd("EXEC"),
		cmd("MULTI"), cmd("MULTI"), cmd("DISCARD"),
		cmd("MULTI"), cmd("SET", "t", "2"), cmd("GET"), cmd("EXEC"), cmd("GET", "t"),
		cmd("SET", "s", "abc"), cmd("MULTI"), cmd("INCR", "s"), cmd("SET", "u", "1"), cmd("EXEC"),
		cmd("WATCH", "w"), cmd("MULTI"), cmd("WATCH", "x"), cmd("SET", "w", "1"), cmd("EXEC"),
		cmd("WATCH", "w"), cmd("UNWATCH"), cmd("MULTI"), cmd("SET", "w", "2"), cmd("EXEC"),
		cmd("SELECT", "1"), cmd("SET", "d1", "x"), cmd("GET", "d1"), cmd("DBSIZE"), cmd("SELECT", "0"),
		cmd("GET", "d1"), cmd("SELECT", "1"), cmd("GET", "d1"), cmd("SELECT", "0"),
		cmd("SELECT", "99999"), cmd("SELECT", "abc"), cmd("SELECT", "-1"),
		cmd("MULTI"), cmd("SELECT", "2"), cmd("SET", "d2", "y"), cmd("EXEC"), cmd("GET", "d2"),
		cmd("SELECT", "0"), cmd("GET", "d2"),
		cmd("SWAPDB", "0", "3"), cmd("SELECT", "3"), cmd("GET", "t"), cmd("SELECT", "0"), cmd("SWAPDB", "0", "3"),
		cmd("SET", "mv", "1"), cmd("MOVE", "mv", "4"), cmd("EXISTS", "mv"),
		cmd("BLPOP", "empty", "0.1"), cmd("LPUSH", "bl", "a", "b"), cmd("BLPOP", "bl", "1"),
		cmd("BRPOP", "nothing", "bl", "1"), cmd("BLMOVE", "empty", "dst", "LEFT", "RIGHT", "0.1"),
		cmd("BLMPOP", "0.1", "1", "empty"), cmd("BZPOPMIN", "emptyz", "0.1"), cmd("ZADD", "z", "1", "m"),
		cmd("BZPOPMAX", "z", "1"), cmd("BZMPOP", "0.1", "1", "emptyz", "MIN"),
		cmd("XADD", "st", "1-1", "f", "v"), cmd("XREAD", "BLOCK", "100", "STREAMS", "st", "$"),
		cmd("XREAD", "BLOCK", "100", "STREAMS", "st", "0"), cmd("WAIT", "0", "0"),
		cmd("MULTI"), cmd("BLPOP", "empty", "0"), cmd("EXEC"),
		// Scripts run blocking commands without blocking, and a SELECT inside
		// a script does not change the caller's database (Redis 7).
		cmd("EVAL", "return redis.call('BLPOP', KEYS[1], 0)", "1", "empty"),
		cmd("EVAL", "return redis.pcall('BRPOPLPUSH', KEYS[1], KEYS[2], 0)", "2", "empty", "dst"),
		cmd("EVAL", "redis.call('SELECT', 5); redis.call('SET', 'in5', 'x'); return redis.call('DBSIZE')", "0"),
		cmd("EXISTS", "in5"), cmd("SELECT", "5"), cmd("GET", "in5"), cmd("SELECT", "0"),
		// The CLIENT commands rproxy answers, queued in a transaction:
		// answered inside EXEC's array, taking effect only if it runs.
		cmd("MULTI"), cmd("CLIENT", "SETNAME", "in-tx"), cmd("CLIENT", "GETNAME"), cmd("GET", "t"),
		cmd("CLIENT", "SETNAME", "bad name"), cmd("CLIENT", "LIST", "TYPE", "nosuch"), cmd("EXEC"), cmd("CLIENT", "GETNAME"),
		cmd("MULTI"), cmd("CLIENT", "SETNAME", "dropped"), cmd("DISCARD"), cmd("CLIENT", "GETNAME"),
		cmd("MULTI"), cmd("CLIENT", "SETNAME", "aborted"), cmd("NOSUCHCOMMAND"), cmd("EXEC"), cmd("CLIENT", "GETNAME"),
		cmd("MULTI"), cmd("CLIENT", "SETNAME"), cmd("CLIENT", "GETNAME", "x"), cmd("EXEC"),
		cmd("MULTI"), cmd("CLIENT", "SETINFO", "LIB-NAME", "lib"), cmd("EXEC"),
		cmd("WATCH", "w"), cmd("MULTI"), cmd("CLIENT", "SETNAME", "watched"), cmd("CLIENT", "GETNAME"), cmd("EXEC"),
		cmd("CLIENT", "GETNAME"), cmd("CLIENT", "SETNAME", ""),
		// AUTH queued too (rproxy's auth.mode none answers as a Redis
		// without passwords).
		cmd("MULTI"), cmd("AUTH", "default", "x"), cmd("AUTH", "x"), cmd("AUTH", "a", "b", "c"), cmd("AUTH", "other", "pw"), cmd("EXEC"),
		cmd("PING"),
	}
}

func TestStatefulCompat(t *testing.T) {
	e := startCompatEnv(t)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			runCompatSequential(t, e, proto, statefulCorpus())
		})
		t.Run(fmt.Sprintf("PipelinedRESP%d", proto), func(t *testing.T) {
			runCompatPipelined(t, e, proto, statefulCorpus())
		})
	}
	assertNoPins(t, e.proxy)
}

func assertNoPins(t *testing.T, p *proxytest.Proxy) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := counterValue(t, p.Registry, "rproxy_upstream_pinned_connections", nil)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v upstream connections still pinned", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchFailsOnOtherClientsWrite: a WATCH through rproxy fails when
// another client (through rproxy, or straight to Redis) writes the key.
func TestWatchFailsOnOtherClientsWrite(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	for _, other := range []string{"proxy", "direct"} {
		for _, proto := range []string{"2", "3"} {
			t.Run(other+"/RESP"+proto, func(t *testing.T) {
				a := dialClient(t, p.Addr)
				a.do("HELLO", proto)
				if got := a.do("WATCH", "wk"); got != "+OK\r\n" {
					t.Fatalf("WATCH = %q", got)
				}
				if other == "proxy" {
					dialClient(t, p.Addr).do("SET", "wk", "other")
				} else {
					rs.Do(t, "SET", "wk", "other")
				}
				a.do("MULTI")
				if got := a.do("SET", "wk", "mine"); got != "+QUEUED\r\n" {
					t.Fatalf("SET in MULTI = %q", got)
				}
				want := "*-1\r\n"
				if proto == "3" {
					want = "_\r\n"
				}
				if got := a.do("EXEC"); got != want {
					t.Fatalf("EXEC after another client's write = %q, want %q (the transaction must fail)", got, want)
				}
				if got := a.do("GET", "wk"); got != "$5\r\nother\r\n" {
					t.Fatalf("GET = %q", got)
				}
			})
		}
	}
	assertNoPins(t, p)
}

// TestBlockingDoesNotBlockOthers: a client in BLPOP holds its own pinned
// connection; others are served at once, and a push from another client
// wakes it.
func TestBlockingDoesNotBlockOthers(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	a := dialClient(t, p.Addr)
	a.send(resp.AppendCommandString(nil, "BLPOP", "q", "0"))
	b := dialClient(t, p.Addr)
	start := time.Now()
	for i := 0; i < 100; i++ {
		if got := b.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING = %q", got)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100 PINGs took %v while another client blocks", d)
	}
	waitFor(t, "one pinned connection during BLPOP", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_pinned_connections", nil) == 1
	})
	b.do("LPUSH", "q", "v")
	if got := string(a.read()); got != "*2\r\n$1\r\nq\r\n$1\r\nv\r\n" {
		t.Fatalf("BLPOP woke with %q", got)
	}
	// Redis times blocking commands out itself.
	start = time.Now()
	if got := a.do("BLPOP", "q", "0.2"); got != "*-1\r\n" {
		t.Fatalf("BLPOP timeout = %q", got)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("BLPOP 0.2 returned after %v", d)
	}
	assertNoPins(t, p)
}

var connectedClients = regexp.MustCompile(`connected_clients:(\d+)`)

func redisClients(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	m := connectedClients.FindSubmatch(rs.Do(t, "INFO", "clients"))
	if m == nil {
		t.Fatal("no connected_clients in INFO")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n - 1 // the INFO connection itself
}

// TestDisconnectReleasesPins: a client that leaves mid-BLPOP, mid-MULTI or
// while watching gives its pinned connection back; Redis's connection count
// returns to the baseline plus the few reset connections kept for reuse, and
// repeated episodes do not grow it.
func TestDisconnectReleasesPins(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	baseline := redisClients(t, rs)

	for round := 0; round < 3; round++ {
		c := dialClient(t, p.Addr)
		c.send(resp.AppendCommandString(nil, "BLPOP", "never", "0"))
		waitFor(t, "BLPOP to block on Redis", func() bool {
			return strings.Contains(string(rs.Do(t, "INFO", "clients")), "blocked_clients:1")
		})
		c.nc.Close()
		waitFor(t, "the blocked upstream connection to close", func() bool {
			return strings.Contains(string(rs.Do(t, "INFO", "clients")), "blocked_clients:0")
		})

		m := dialClient(t, p.Addr)
		m.do("MULTI")
		m.do("SET", "never", "x")
		m.nc.Close()
		w := dialClient(t, p.Addr)
		w.do("WATCH", "k")
		w.nc.Close()
	}
	assertNoPins(t, p)
	// Transactions discarded by RESET: "never" was never set.
	if got := string(rs.Do(t, "EXISTS", "never")); got != ":0\r\n" {
		t.Fatalf("a disconnected client's MULTI was executed: EXISTS = %q", got)
	}
	// Kept for reuse: the reset connections (at most two were pinned at
	// once) and the two spares dialled ahead; the BLPOP's was closed.
	waitFor(t, "Redis connections to settle", func() bool { return redisClients(t, rs) <= baseline+4 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGoRedisTransactionsAndBlocking: go-redis v9's TxPipelined with WATCH
// (Watch + optimistic retry) and BLPop work through rproxy.
func TestGoRedisTransactionsAndBlocking(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto})
		defer rdb.Close()
		key := fmt.Sprintf("counter%d", proto)
		// Optimistic increment with WATCH, from 10 goroutines.
		incr := func() error {
			return rdb.Watch(ctx, func(tx *redis.Tx) error {
				n, err := tx.Get(ctx, key).Int()
				if err != nil && err != redis.Nil {
					return err
				}
				_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					pipe.Set(ctx, key, n+1, 0)
					return nil
				})
				return err
			}, key)
		}
		errs := make(chan error, 10)
		for g := 0; g < 10; g++ {
			go func() {
				for i := 0; i < 20; i++ {
					for {
						err := incr()
						if err == redis.TxFailedErr {
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						break
					}
				}
				errs <- nil
			}()
		}
		for g := 0; g < 10; g++ {
			if err := <-errs; err != nil {
				t.Fatalf("RESP%d: optimistic increment: %v", proto, err)
			}
		}
		if n, err := rdb.Get(ctx, key).Int(); err != nil || n != 200 {
			t.Fatalf("RESP%d: counter = %d, %v; want 200 (lost updates mean WATCH did not work)", proto, n, err)
		}
		// BLPop wakes on a push from another client.
		got := make(chan []string, 1)
		go func() {
			v, _ := rdb.BLPop(ctx, 5*time.Second, "jobs").Result()
			got <- v
		}()
		time.Sleep(50 * time.Millisecond)
		rdb.RPush(ctx, "jobs", "j1")
		if v := <-got; len(v) != 2 || v[1] != "j1" {
			t.Fatalf("RESP%d: BLPop = %v", proto, v)
		}
		if _, err := rdb.BLPop(ctx, 100*time.Millisecond, "jobs").Result(); err != redis.Nil {
			t.Fatalf("RESP%d: BLPop timeout = %v, want redis.Nil", proto, err)
		}
		// SELECT through go-redis's DB option.
		db1 := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto, DB: 1})
		defer db1.Close()
		if err := db1.Set(ctx, "only-in-1", "x", 0).Err(); err != nil {
			t.Fatalf("RESP%d: SET on db 1: %v", proto, err)
		}
		if n := rdb.Exists(ctx, "only-in-1").Val(); n != 0 {
			t.Fatalf("RESP%d: a db 1 key is visible in db 0", proto)
		}
		if v := db1.Get(ctx, "only-in-1").Val(); v != "x" {
			t.Fatalf("RESP%d: GET on db 1 = %q", proto, v)
		}
	}
}

// TestConnectionEconomy: 1,000 idle clients and 1,000 clients doing GET/SET
// use only the shared connections (one per protocol by default) plus the
// dedicated connections of pinned sessions.
func TestConnectionEconomy(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	shared := redisClients(t, rs) // the proxy's shared connections, after start
	if shared != 3 {
		t.Fatalf("Redis sees %d connections from an idle proxy, want 3 (RESP2 and RESP3 shared, tier tracking)", shared)
	}
	for i := 0; i < 1000; i++ {
		dialClient(t, p.Addr) // idle
	}
	errs := make(chan string, 1000)
	done := make(chan struct{})
	for i := 0; i < 1000; i++ {
		c := dialClient(t, p.Addr)
		go func() {
			k := fmt.Sprintf("econ:%d", i)
			if got := c.doErr("SET", k, "v"); got != "+OK\r\n" {
				errs <- "SET " + got
			} else if got := c.doErr("GET", k); got != "$1\r\nv\r\n" {
				errs <- "GET " + got
			}
			done <- struct{}{}
		}()
	}
	for i := 0; i < 1000; i++ {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	// Accepted connections are counted once the accept loop gets them.
	waitFor(t, "the proxy to count 2000 clients", func() bool {
		return counterValue(t, p.Registry, "rproxy_proxy_client_connections", nil) == 2000
	})
	// A stall under the load (a slow machine) may have dialled a spare
	// shared connection (upstream.stall_divert): it closes after a second
	// without stalls.
	waitFor(t, "Redis to see the shared connections only", func() bool { return redisClients(t, rs) == shared })
	// One pinned session adds exactly one, and its pool keeps two spares
	// ready for the next sessions that pin (a SUBSCRIBE, say).
	m := dialClient(t, p.Addr)
	m.do("MULTI")
	waitFor(t, "the spare dedicated connections", func() bool { return redisClients(t, rs) >= shared+3 })
	if got := redisClients(t, rs); got != shared+3 {
		t.Fatalf("with one client in MULTI Redis sees %d connections, want %d (the pin and two spares)", got, shared+3)
	}
	m.do("DISCARD")
}
