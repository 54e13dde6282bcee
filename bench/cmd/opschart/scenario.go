package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rproxy/rproxy/bench/load"
	"github.com/rproxy/rproxy/resp"
)

// The scenario's timeline, from its start.
const (
	scenarioLen = 60 * time.Second
	hotFrom     = 15 * time.Second
	hotTo       = 35 * time.Second
	killAt      = 25 * time.Second
	keysFrom    = 35 * time.Second
	keysTo      = 50 * time.Second
	keysEvery   = 100 * time.Millisecond
	scrapeEvery = 500 * time.Millisecond

	keyCount       = 100_000
	uniformClients = 20
	hotClients     = 30
)

// record is what a scenario run observed.
type record struct {
	start      time.Time
	samples    []sample
	outages    []outage // from rproxy's log, filled in by run
	killedAt   float64  // seconds from the start
	killedLine string   // the tracking connection's CLIENT LIST line
	keysSent   int
	keysDenied int    // error replies starting with DENIED
	keysOther  string // first reply to KEYS that was not DENIED
	uniform    load.Result
	hot        load.Result
}

// runScenario drives the timeline against rproxy at proxyAddr (admin
// endpoint adminAddr) in front of Redis at redisAddr, scraping every
// scrapeEvery, and returns what it saw. The keys must be populated.
func runScenario(ctx context.Context, proxyAddr, adminAddr, redisAddr string) (*record, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := &record{start: time.Now()}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		cancel()
	}
	start := rec.start
	cfg := load.DefaultConfig()
	cfg.Addr, cfg.Keys = proxyAddr, keyCount

	wg.Go(func() {
		c := cfg
		c.Clients, c.Dist, c.Duration = uniformClients, load.DistUniform, scenarioLen
		var err error
		if rec.uniform, err = load.Run(ctx, c); err != nil {
			fail(fmt.Errorf("uniform load: %w", err))
		}
	})
	wg.Go(func() {
		if !sleepUntil(ctx, start.Add(hotFrom)) {
			return
		}
		c := cfg
		c.Clients, c.Dist, c.Duration = hotClients, load.DistHot, hotTo-hotFrom
		var err error
		if rec.hot, err = load.Run(ctx, c); err != nil {
			fail(fmt.Errorf("hot-key load: %w", err))
		}
	})
	wg.Go(func() {
		if !sleepUntil(ctx, start.Add(killAt)) {
			return
		}
		rec.killedAt = time.Since(start).Seconds()
		var err error
		if rec.killedLine, err = killTracking(redisAddr); err != nil {
			fail(err)
		}
	})
	wg.Go(func() {
		if err := sendKeys(ctx, proxyAddr, start.Add(keysFrom), start.Add(keysTo), rec); err != nil {
			fail(err)
		}
	})

	err := scrape(ctx, start, adminAddr, redisAddr, rec)
	if err != nil {
		cancel()
	}
	wg.Wait()
	// A scrape cut short because another part failed adds nothing.
	if err != nil && (len(errs) == 0 || !errors.Is(err, context.Canceled)) {
		errs = append(errs, err)
	}
	return rec, errors.Join(errs...)
}

// scrape samples rproxy's metrics and Redis's GET count every scrapeEvery
// from start to the end of the scenario.
func scrape(ctx context.Context, start time.Time, adminAddr, redisAddr string, rec *record) error {
	redis, err := dialRedis(redisAddr)
	if err != nil {
		return err
	}
	defer redis.Close()
	client := &http.Client{Timeout: 2 * time.Second}
	for i := 0; time.Duration(i)*scrapeEvery <= scenarioLen; i++ {
		if !sleepUntil(ctx, start.Add(time.Duration(i)*scrapeEvery)) {
			return ctx.Err()
		}
		text, err := get(ctx, client, "http://"+adminAddr+"/metrics")
		if err != nil {
			return err
		}
		// rproxy reads its counters just before it answers: on a busy
		// machine the answer can come long after the request left.
		at := time.Since(start).Seconds()
		ss, err := parseMetrics(text)
		if err != nil {
			return err
		}
		info, err := redis.do("INFO", "commandstats")
		if err != nil {
			return err
		}
		gets, err := parseCommandStats(info, "get")
		if err != nil {
			return err
		}
		s, err := newSample(at, ss, gets)
		if err != nil {
			return err
		}
		rec.samples = append(rec.samples, s)
	}
	return nil
}

func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	res, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("scraping rproxy: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", fmt.Errorf("scraping rproxy: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scraping rproxy: GET %s: %s", url, res.Status)
	}
	return string(b), nil
}

// killTracking kills, from Redis's side, the client connection that has
// client tracking on (flags containing t): rproxy's tier connection. It
// returns that connection's CLIENT LIST line.
func killTracking(redisAddr string) (string, error) {
	c, err := dialRedis(redisAddr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	list, err := c.do("CLIENT", "LIST")
	if err != nil {
		return "", err
	}
	line, id, err := trackingClient(list)
	if err != nil {
		return "", err
	}
	if _, err := c.do("CLIENT", "KILL", "ID", id); err != nil {
		return "", err
	}
	return line, nil
}

// trackingClient finds the one line of CLIENT LIST whose flags contain t
// and returns it with its id.
func trackingClient(list string) (line, id string, err error) {
	for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
		fields := map[string]string{}
		for _, kv := range strings.Fields(l) {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		if strings.Contains(fields["flags"], "t") {
			if id != "" {
				return "", "", fmt.Errorf("more than one tracking client in CLIENT LIST:\n%s", list)
			}
			line, id = strings.TrimSpace(l), fields["id"]
		}
	}
	if id == "" {
		return "", "", fmt.Errorf("no client with tracking on (flags=t) in CLIENT LIST:\n%s", list)
	}
	return line, id, nil
}

// sendKeys sends KEYS * to rproxy every keysEvery from from until to, and
// counts the replies.
func sendKeys(ctx context.Context, proxyAddr string, from, to time.Time, rec *record) error {
	if !sleepUntil(ctx, from) {
		return nil
	}
	c, err := dialRedis(proxyAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	for next := from; next.Before(to); next = next.Add(keysEvery) {
		if !sleepUntil(ctx, next) {
			return nil
		}
		rec.keysSent++
		_, err := c.do("KEYS", "*")
		var re replyError
		switch {
		case errors.As(err, &re) && strings.HasPrefix(string(re), "DENIED"):
			rec.keysDenied++
		case errors.As(err, &re):
			rec.keysOther = cmp.Or(rec.keysOther, "error "+string(re))
		case err != nil:
			return fmt.Errorf("KEYS client: %w", err)
		default:
			rec.keysOther = cmp.Or(rec.keysOther, "a reply, not an error")
		}
	}
	return nil
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// redisConn is a plain RESP connection, one command at a time.
type redisConn struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
}

// replyError is an error reply, such as "DENIED ...".
type replyError string

func (e replyError) Error() string { return string(e) }

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &redisConn{addr: addr, conn: c, r: bufio.NewReader(c)}, nil
}

func (c *redisConn) Close() error { return c.conn.Close() }

// do sends one command and returns the text of its reply (a bulk or
// simple string; other kinds give ""). An error reply is a replyError.
func (c *redisConn) do(args ...string) (string, error) {
	if err := c.conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := c.conn.Write(resp.AppendCommandString(nil, args...)); err != nil {
		return "", fmt.Errorf("%s %s: %w", c.addr, args[0], err)
	}
	raw, err := resp.ReadReply(c.r, nil)
	if err != nil {
		return "", fmt.Errorf("%s %s: reading reply: %w", c.addr, args[0], err)
	}
	v, err := resp.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", c.addr, args[0], err)
	}
	if v.Kind == '-' {
		return "", replyError(v.Str)
	}
	return string(v.Str), nil
}
