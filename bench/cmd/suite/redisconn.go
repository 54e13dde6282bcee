package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// redisConn is a control connection straight to redis-server, for the
// commands around a run (CONFIG RESETSTAT, INFO commandstats, CONFIG GET)
// and for the stampede writer. Plain RESP, one command at a time.
type redisConn struct {
	mu   sync.Mutex
	addr string
	conn net.Conn
	r    *bufio.Reader
}

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial redis %s: %w", addr, err)
	}
	return &redisConn{addr: addr, conn: c, r: bufio.NewReader(c)}, nil
}

func (c *redisConn) Close() error { return c.conn.Close() }

// do sends one command and returns its decoded reply. An error reply is
// returned as an error.
func (c *redisConn) do(args ...string) (resp.Value, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return resp.Value{}, err
	}
	if _, err := c.conn.Write(resp.AppendCommandString(nil, args...)); err != nil {
		return resp.Value{}, fmt.Errorf("redis %s: %s: %w", c.addr, args[0], err)
	}
	raw, err := resp.ReadReply(c.r, nil)
	if err != nil {
		return resp.Value{}, fmt.Errorf("redis %s: reading reply to %s: %w", c.addr, args[0], err)
	}
	v, err := resp.Parse(raw)
	if err != nil {
		return resp.Value{}, fmt.Errorf("redis %s: reply to %s: %w", c.addr, args[0], err)
	}
	if v.Kind == '-' {
		return v, fmt.Errorf("redis %s: %s: %s", c.addr, strings.Join(args, " "), v.Str)
	}
	return v, nil
}

// resetStats zeroes INFO commandstats (CONFIG RESETSTAT).
func (c *redisConn) resetStats() error {
	_, err := c.do("CONFIG", "RESETSTAT")
	return err
}

// commandCalls returns the calls= count of each command in INFO commandstats.
func (c *redisConn) commandCalls() (map[string]int64, error) {
	v, err := c.do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	return parseCommandStats(string(v.Str))
}

// parseCommandStats reads lines such as
//
//	cmdstat_get:calls=1234,usec=567,usec_per_call=0.46,rejected_calls=0,failed_calls=0
//
// into {"get": 1234}.
func parseCommandStats(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats line %q: %w", l, err)
				}
				calls[name] = n
			}
		}
	}
	return calls, nil
}

// configInt returns an integer setting (CONFIG GET name).
func (c *redisConn) configInt(name string) (int64, error) {
	v, err := c.do("CONFIG", "GET", name)
	if err != nil {
		return 0, err
	}
	if len(v.Elems) != 2 {
		return 0, fmt.Errorf("redis %s: CONFIG GET %s: unexpected reply", c.addr, name)
	}
	n, err := strconv.ParseInt(string(v.Elems[1].Str), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis %s: CONFIG GET %s: %w", c.addr, name, err)
	}
	return n, nil
}

// rewriteEvery SETs key to value with a TTL of ttl right away and then
// every period until ctx ends, and returns how many SETs it made. It is the
// stampede scenario's writer: the key's value keeps expiring and coming
// back, and every SET makes each proxy's cached copy stale.
func (c *redisConn) rewriteEvery(ctx context.Context, key, value string, ttl, period time.Duration) (int, error) {
	t := time.NewTicker(period)
	defer t.Stop()
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	for n := 0; ; n++ {
		if _, err := c.do("SET", key, value, "PX", ms); err != nil {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n + 1, nil
		case <-t.C:
		}
	}
}
