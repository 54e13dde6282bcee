package proxy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rproxy/rproxy/internal/redistest"
)

// TestClusterGoRedisClientSideCaching: go-redis's client-side cache
// (ClientSideCacheConfig, RESP3 tracking on its connections) pointed at
// rproxy in front of three masters: reads of every master's keys are
// served from its cache the second time (its hit counter), and another
// client's writes to every master's keys reach it (the invalidation
// drops the entry; the next read gets the new value); its Watch (WATCH,
// MULTI, EXEC) works on every master's keys. Before, its reads and WATCHes
// of two masters' keys in three failed with "slot N is on another master".
func TestClusterGoRedisClientSideCaching(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "csc")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: 3, PoolSize: 2, ClientSideCacheConfig: &redis.ClientSideCacheConfig{}})
	defer c.Close()
	w := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer w.Close()
	for i, k := range keys {
		if err := w.Set(ctx, k, "v"+strconv.Itoa(i), 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for i, k := range keys {
		for range 2 {
			if v, err := c.Get(ctx, k).Result(); err != nil || v != "v"+strconv.Itoa(i) {
				t.Fatalf("GET %s: %q, %v", k, v, err)
			}
		}
	}
	if st := c.CSCStats(); st.Hits < uint64(len(keys)) {
		t.Fatalf("cache hits %d after reading %d keys twice: %+v", st.Hits, len(keys), st)
	}
	for _, k := range keys {
		if err := w.Set(ctx, k, "new", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	// Optimistic locking through the cached client: WATCH, GET, MULTI,
	// SET, EXEC on every master's key.
	for _, k := range keys {
		for range 2 {
			err := c.Watch(ctx, func(tx *redis.Tx) error {
				n, err := tx.Get(ctx, "{"+k+"}counter").Int()
				if err != nil && err != redis.Nil {
					return err
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, "{"+k+"}counter", n+1, 0)
					return nil
				})
				return err
			}, "{"+k+"}counter")
			if err != nil {
				t.Fatalf("Watch {%s}counter: %v", k, err)
			}
		}
		if v, err := w.Get(ctx, "{"+k+"}counter").Result(); err != nil || v != "2" {
			t.Fatalf("{%s}counter after two watched increments: %q, %v", k, v, err)
		}
	}
	for _, k := range keys {
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := c.Get(ctx, k).Result()
			if err != nil {
				t.Fatalf("GET %s after another client's write: %v", k, err)
			}
			if v == "new" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: still %q 5 s after another client's write (no invalidation)", k, v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
