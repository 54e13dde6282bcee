// Command stampede measures a cache-aside stampede: workers that each run
// the guides' naive pattern on one key (GET; on a miss, call the
// "database" and SET the value with a TTL), directly on Redis and through
// rproxy, and counts the database calls. With a 2 s TTL every expiry sends
// every worker that misses to the database; rproxy's miss collapsing holds
// all but one of them for that one's fill.
//
//	go run ./bench/cmd/stampede -target direct=127.0.0.1:6379 -target rproxy=127.0.0.1:6380
//
// Each target runs in turn (rounds alternate their order) for -duration;
// before each run the key is set on Redis with the TTL (a warm cache, so
// a 6.5 s run sees three expiries). The database is simulated: a call
// takes -db-latency and is counted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
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
	dbCalls, gets, misses, errs int64
	elapsed                     time.Duration
}

func main() {
	var tgts targets
	flag.Var(&tgts, "target", "name=host:port, repeated (the first is also where the key is set before each run unless -redis is set)")
	redisAddr := flag.String("redis", "", "Redis itself, for setting the key before each run (default: the first target)")
	workers := flag.Int("workers", 200, "cache-aside workers")
	ttl := flag.Duration("ttl", 2*time.Second, "the TTL the workers SET (whole seconds)")
	dur := flag.Duration("duration", 6500*time.Millisecond, "length of each run")
	dbLatency := flag.Duration("db-latency", 20*time.Millisecond, "time one simulated database call takes")
	rounds := flag.Int("rounds", 3, "runs per target, order alternating")
	key := flag.String("key", "stampede:product:1", "the cached key")
	flag.Parse()
	if len(tgts) == 0 || *workers < 1 || *ttl < time.Second || *rounds < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if *redisAddr == "" {
		*redisAddr = tgts[0].addr
	}
	if err := run(tgts, *redisAddr, *key, *workers, *ttl, *dur, *dbLatency, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "stampede:", err)
		os.Exit(1)
	}
}

func run(tgts targets, redisAddr, key string, workers int, ttl, dur, dbLatency time.Duration, rounds int) error {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer admin.Close()
	res := map[string][]result{}
	for round := range rounds {
		order := append(targets(nil), tgts...)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			// A warm cache: the key is there, and expires ttl from now.
			if err := admin.Set(ctx, key, strings.Repeat("v", 100), ttl).Err(); err != nil {
				return fmt.Errorf("setting %s on %s: %w", key, redisAddr, err)
			}
			r, err := runOne(ctx, t.addr, key, workers, ttl, dur, dbLatency)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			res[t.name] = append(res[t.name], r)
			fmt.Fprintf(os.Stderr, "round %d %-8s db calls %5d  GETs %8d  misses %5d  errors %d\n",
				round+1, t.name, r.dbCalls, r.gets, r.misses, r.errs)
		}
	}
	fmt.Printf("%d naive cache-aside workers on one key, SET EX %d, %v per run, database call %v; medians of %d rounds\n\n",
		workers, int(ttl/time.Second), dur, dbLatency, rounds)
	fmt.Println("| target | database calls | GETs/s | misses seen | errors |")
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
		fmt.Printf("| %s | %.0f | %.0f | %.0f | %.0f |\n", t.name,
			med(func(r result) float64 { return float64(r.dbCalls) }),
			med(func(r result) float64 { return float64(r.gets) / r.elapsed.Seconds() }),
			med(func(r result) float64 { return float64(r.misses) }),
			med(func(r result) float64 { return float64(r.errs) }))
	}
	return nil
}

// runOne runs the workers on addr for dur.
func runOne(ctx context.Context, addr, key string, workers int, ttl, dur, dbLatency time.Duration) (result, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: workers, MinIdleConns: workers})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return result{}, err
	}
	var r result
	var dbCalls, gets, misses, errs atomic.Int64
	value := strings.Repeat("v", 100)
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				gets.Add(1)
				_, err := c.Get(ctx, key).Result()
				switch {
				case err == nil:
					continue
				case !errors.Is(err, redis.Nil):
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				misses.Add(1)
				// The database: one call, counted.
				dbCalls.Add(1)
				select {
				case <-time.After(dbLatency):
				case <-ctx.Done():
					return
				}
				if err := c.Set(ctx, key, value, ttl).Err(); err != nil && ctx.Err() == nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.dbCalls, r.gets, r.misses, r.errs = dbCalls.Load(), gets.Load(), misses.Load(), errs.Load()
	return r, nil
}
