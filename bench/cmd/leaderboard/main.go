// Command leaderboard measures a hot leaderboard: clients reading the top
// ten with scores (ZREVRANGE board 0 9 WITHSCORES, the guides' pattern)
// while a writer adds points (ZINCRBY) every -write-every, directly on
// Redis and through rproxy. It reports client reads per second, latency,
// and how many ZREVRANGEs reached Redis (INFO commandstats) per client
// read: through rproxy the hot key's reply is served from the local tier
// until a write invalidates it.
//
//	go run ./bench/cmd/leaderboard -redis 127.0.0.1:6379 -target direct=127.0.0.1:6379 -target rproxy=127.0.0.1:6380
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

type target struct{ name, addr string }

type targets []target

func (t *targets) String() string { return fmt.Sprint(*t) }

func (t *targets) Set(s string) error {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" || addr == "" {
		return fmt.Errorf("want name=host:port, got %q", s)
	}
	*t = append(*t, target{name, addr})
	return nil
}

type result struct {
	reads, writes, upstream int64
	elapsed                 time.Duration
	p50, p99                time.Duration
}

var zrevrangeCalls = regexp.MustCompile(`cmdstat_zrevrange:calls=(\d+),`)

func main() {
	var tgts targets
	flag.Var(&tgts, "target", "name=host:port, repeated")
	redisAddr := flag.String("redis", "", "Redis itself, for INFO commandstats and setup (required)")
	clients := flag.Int("clients", 50, "reading clients")
	players := flag.Int("players", 1000, "members of the board")
	writeEvery := flag.Duration("write-every", 10*time.Millisecond, "the writer's ZINCRBY period (0: no writes)")
	dur := flag.Duration("duration", 5*time.Second, "length of each run")
	rounds := flag.Int("rounds", 3, "runs per target, order alternating")
	flag.Parse()
	if len(tgts) == 0 || *redisAddr == "" || *clients < 1 || *rounds < 1 || *players < 10 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(tgts, *redisAddr, *clients, *players, *writeEvery, *dur, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "leaderboard:", err)
		os.Exit(1)
	}
}

const board = "game:scores"

func run(tgts targets, redisAddr string, clients, players int, writeEvery, dur time.Duration, rounds int) error {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr, Protocol: 2})
	defer admin.Close()
	res := map[string][]result{}
	for round := range rounds {
		order := slices.Clone(tgts)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if err := fillBoard(ctx, admin, players); err != nil {
				return err
			}
			r, err := runOne(ctx, admin, t.addr, clients, players, writeEvery, dur)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			res[t.name] = append(res[t.name], r)
			fmt.Fprintf(os.Stderr, "round %d %-8s reads/s %8.0f  p50 %v p99 %v  writes %d  ZREVRANGE on Redis per read %.4f\n",
				round+1, t.name, float64(r.reads)/r.elapsed.Seconds(), r.p50, r.p99, r.writes, float64(r.upstream)/float64(r.reads))
		}
	}
	fmt.Printf("%d clients reading ZREVRANGE %s 0 9 WITHSCORES (%d players), a ZINCRBY every %v, %v per run; medians of %d rounds\n\n",
		clients, board, players, writeEvery, dur, rounds)
	fmt.Println("| target | reads/s | p50 | p99 | ZREVRANGE reaching Redis per read |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, t := range tgts {
		rs := res[t.name]
		med := func(f func(result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			sort.Float64s(v)
			return v[len(v)/2]
		}
		fmt.Printf("| %s | %.0f | %v | %v | %.4f |\n", t.name,
			med(func(r result) float64 { return float64(r.reads) / r.elapsed.Seconds() }),
			time.Duration(med(func(r result) float64 { return float64(r.p50) })).Round(time.Microsecond),
			time.Duration(med(func(r result) float64 { return float64(r.p99) })).Round(time.Microsecond),
			med(func(r result) float64 { return float64(r.upstream) / float64(r.reads) }))
	}
	return nil
}

func fillBoard(ctx context.Context, c *redis.Client, players int) error {
	if err := c.Del(ctx, board).Err(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	zs := make([]redis.Z, players)
	for i := range zs {
		zs[i] = redis.Z{Score: float64(i * 7 % 1000), Member: "player:" + strconv.Itoa(i)}
	}
	if err := c.ZAdd(ctx, board, zs...).Err(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}

func upstreamCalls(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	m := zrevrangeCalls.FindStringSubmatch(info)
	if m == nil {
		return 0, nil
	}
	return strconv.ParseInt(m[1], 10, 64)
}

func runOne(ctx context.Context, admin *redis.Client, addr string, clients, players int, writeEvery, dur time.Duration) (result, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: clients + 1, MinIdleConns: clients + 1})
	defer c.Close()
	// Warm up: the key becomes hot and cached before the measurement.
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	for wctx.Err() == nil {
		c.ZRevRangeWithScores(wctx, board, 0, 9)
	}
	wcancel()
	before, err := upstreamCalls(ctx, admin)
	if err != nil {
		return result{}, err
	}
	var reads, writes, errs atomic.Int64
	lat := make([][]time.Duration, clients)
	rctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	if writeEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(writeEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-rctx.Done():
					return
				case <-tick.C:
				}
				if c.ZIncrBy(rctx, board, 5, "player:"+strconv.Itoa(i%players)).Err() == nil {
					writes.Add(1)
				}
			}
		}()
	}
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				t0 := time.Now()
				if err := c.ZRevRangeWithScores(rctx, board, 0, 9).Err(); err != nil {
					if rctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				lat[i] = append(lat[i], time.Since(t0))
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := upstreamCalls(ctx, admin)
	if err != nil {
		return result{}, err
	}
	if n := errs.Load(); n > 0 {
		return result{}, fmt.Errorf("%d read errors", n)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{reads: reads.Load(), writes: writes.Load(), upstream: after - before, elapsed: elapsed}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r, nil
}
