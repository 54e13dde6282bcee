// Command staleness measures cross-node staleness (issue 19): one key
// written every -interval through one address and read by -readers
// clients through another, as with two rproxies in front of one Redis. A
// read is stale when it returns a version older than the last one whose
// write was acknowledged before the read began; its age is the time since
// the first newer version was acknowledged.
//
//	go run ./bench/cmd/staleness -target direct=127.0.0.1:6379,127.0.0.1:6379 \
//		-target rproxy=127.0.0.1:6380,127.0.0.1:6381
//
// A target is name=writeAddr,readAddr. Targets run in turn, rounds
// alternating their order.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

type target struct{ name, write, read string }

type targets []target

func (t *targets) String() string { return fmt.Sprint(*t) }

func (t *targets) Set(s string) error {
	name, addrs, ok := strings.Cut(s, "=")
	w, r, ok2 := strings.Cut(addrs, ",")
	if !ok || !ok2 || name == "" || w == "" || r == "" {
		return fmt.Errorf("want name=writeAddr,readAddr, got %q", s)
	}
	*t = append(*t, target{name, w, r})
	return nil
}

type result struct {
	writes, reads, stale, errs int64
	maxBehind                  int64
	maxAge                     time.Duration
}

func main() {
	var tgts targets
	flag.Var(&tgts, "target", "name=writeAddr,readAddr, repeated")
	readers := flag.Int("readers", 8, "reading clients")
	interval := flag.Duration("interval", 2*time.Millisecond, "time between writes")
	dur := flag.Duration("duration", 5*time.Second, "length of each run")
	rounds := flag.Int("rounds", 3, "runs per target, order alternating")
	key := flag.String("key", "stale:n", "the key written and read")
	flag.Parse()
	if len(tgts) == 0 {
		fmt.Fprintln(os.Stderr, "staleness: no -target")
		os.Exit(2)
	}
	all := map[string][]result{}
	for round := 1; round <= *rounds; round++ {
		order := slices.Clone(tgts)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, t := range order {
			r, err := run(t, *key, *readers, *interval, *dur)
			if err != nil {
				fmt.Fprintf(os.Stderr, "staleness: %s: %v\n", t.name, err)
				os.Exit(1)
			}
			all[t.name] = append(all[t.name], r)
			fmt.Printf("round %d %-20s writes %6d reads %8d stale %6d (%.3f%%) max %d versions %v behind errors %d\n",
				round, t.name, r.writes, r.reads, r.stale, pct(r), r.maxBehind, r.maxAge.Round(time.Microsecond), r.errs)
		}
	}
	fmt.Println()
	fmt.Println("| target | writes | reads | stale reads | stale % | max versions behind | max age | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range tgts {
		var s result
		for _, r := range all[t.name] {
			s.writes += r.writes
			s.reads += r.reads
			s.stale += r.stale
			s.errs += r.errs
			s.maxBehind = max(s.maxBehind, r.maxBehind)
			s.maxAge = max(s.maxAge, r.maxAge)
		}
		fmt.Printf("| %s | %d | %d | %d | %.3f | %d | %v | %d |\n",
			t.name, s.writes, s.reads, s.stale, pct(s), s.maxBehind, s.maxAge.Round(time.Microsecond), s.errs)
	}
}

func pct(r result) float64 { return 100 * float64(r.stale) / float64(max(r.reads, 1)) }

func run(t target, key string, readers int, interval, dur time.Duration) (result, error) {
	ctx := context.Background()
	w := redis.NewClient(&redis.Options{Addr: t.write, PoolSize: 1})
	defer w.Close()
	rd := redis.NewClient(&redis.Options{Addr: t.read, PoolSize: readers})
	defer rd.Close()
	if err := w.Set(ctx, key, "0", 0).Err(); err != nil {
		return result{}, fmt.Errorf("first SET through %s: %w", t.write, err)
	}
	maxVersions := int(dur/interval) + 16
	acks := make([]atomic.Int64, maxVersions+1)
	acks[0].Store(time.Now().UnixNano())
	var acked atomic.Int64
	var res result
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l result
			defer func() {
				mu.Lock()
				res.reads += l.reads
				res.stale += l.stale
				res.errs += l.errs
				res.maxBehind = max(res.maxBehind, l.maxBehind)
				res.maxAge = max(res.maxAge, l.maxAge)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := acked.Load()
				began := time.Now()
				s, err := rd.Get(ctx, key).Result()
				v, perr := strconv.ParseInt(s, 10, 64)
				if err != nil || perr != nil {
					l.errs++
					continue
				}
				l.reads++
				if v < floor {
					l.stale++
					l.maxBehind = max(l.maxBehind, floor-v)
					l.maxAge = max(l.maxAge, began.Sub(time.Unix(0, acks[v+1].Load())))
				}
			}
		}()
	}
	tick := time.NewTicker(interval)
	end := time.Now().Add(dur)
	var err error
	for i := 1; i <= maxVersions && time.Now().Before(end); i++ {
		<-tick.C
		if err = w.Set(ctx, key, strconv.Itoa(i), 0).Err(); err != nil {
			err = fmt.Errorf("SET through %s: %w", t.write, err)
			break
		}
		acks[i].Store(time.Now().UnixNano())
		acked.Store(int64(i))
		res.writes++
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	return res, err
}
