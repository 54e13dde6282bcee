package proxy_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// pttlOf is PTTL key read directly on Redis.
func pttlOf(t *testing.T, rs *redistest.Server, key string) int64 {
	t.Helper()
	r := string(rs.Do(t, "PTTL", key))
	n, err := strconv.ParseInt(r[1:len(r)-2], 10, 64)
	if err != nil || r[0] != ':' {
		t.Fatalf("PTTL %s = %q", key, r)
	}
	return n
}

// expireTimeOf is PEXPIRETIME key read directly on Redis.
func expireTimeOf(t *testing.T, rs *redistest.Server, key string) int64 {
	t.Helper()
	r := string(rs.Do(t, "PEXPIRETIME", key))
	n, err := strconv.ParseInt(r[1:len(r)-2], 10, 64)
	if err != nil || r[0] != ':' {
		t.Fatalf("PEXPIRETIME %s = %q", key, r)
	}
	return n
}

// The jitter contract (issue 19): through the default config a key never
// lives longer than the client asked. SET EX 3600 on 200 keys ends with
// TTLs in [3240, 3600], still spread; refreshes (GETEX, EXPIRE, PEXPIRE,
// EXPIREAT) and SET NX keep exactly what was asked.
func TestJitterNeverAboveAsked(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	var pipe []byte
	for i := range 200 {
		pipe = append(pipe, resp.AppendCommandString(nil, "SET", "user:"+strconv.Itoa(i), "v", "EX", "3600")...)
	}
	c.send(pipe)
	for i := range 200 {
		if r := string(c.read()); r != "+OK\r\n" {
			t.Fatalf("SET %d = %q", i, r)
		}
	}
	seen := map[int64]int{}
	for i := range 200 {
		ms := pttlOf(t, rs, "user:"+strconv.Itoa(i))
		if ms > 3600_000 || ms < 3240_000-1000 {
			t.Fatalf("PTTL of user:%d = %d ms after SET EX 3600: outside [3240 s, 3600 s]", i, ms)
		}
		seen[(ms+500)/1000]++
	}
	if len(seen) < 20 {
		t.Fatalf("200 SET EX 3600 ended with only %d distinct TTLs: not spread", len(seen))
	}
	t.Logf("200 SET EX 3600: %d distinct TTLs", len(seen))

	for _, tc := range []struct {
		cmd  []string
		want int64 // seconds, as TTL (rounded) reports them
	}{
		{[]string{"GETEX", "user:1", "EX", "1800"}, 1800},
		{[]string{"GETEX", "user:2", "PX", "1800000"}, 1800},
		{[]string{"EXPIRE", "user:3", "1800"}, 1800},
		{[]string{"PEXPIRE", "user:4", "1800000"}, 1800},
		{[]string{"SETEX", "plain", "1800", "v"}, -1}, // spread: at most 1800
		{[]string{"SET", "lock:1", "token", "NX", "EX", "1800"}, 1800},
		{[]string{"SET", "lock:2", "token", "PX", "1800000", "NX"}, 1800},
	} {
		if r := c.do(tc.cmd...); r[0] == '-' {
			t.Fatalf("%v = %q", tc.cmd, r)
		}
		ms := pttlOf(t, rs, tc.cmd[1])
		switch {
		case tc.want < 0 && (ms > 1800_000 || ms < 1620_000-1000):
			t.Errorf("%v: PTTL %d, want within [1620 s, 1800 s]", tc.cmd, ms)
		case tc.want > 0 && (ms > tc.want*1000 || ms < tc.want*1000-1000):
			t.Errorf("%v: PTTL %d, want %d s exactly (as direct)", tc.cmd, ms, tc.want)
		}
	}
}

// cacheProduct is the guides' tag pattern: the cached value and the tag set
// that indexes it, written in one transaction with the same TTL.
func cacheProduct(t *testing.T, c *rawClient, id, category int) {
	t.Helper()
	key, tag := fmt.Sprintf("product:%d", id), fmt.Sprintf("tag:category:%d", category)
	got := sendAll(c, []string{"MULTI"}, []string{"SETEX", key, "3600", "data"},
		[]string{"SADD", tag, key}, []string{"EXPIRE", tag, "3600"}, []string{"EXEC"})
	if got[4][0] != '*' {
		t.Fatalf("cache_product %d: %q", id, got)
	}
}

// invalidateCategory is the guides' invalidation: delete what the tag set
// lists, then the set.
func invalidateCategory(t *testing.T, c *rawClient, category int) {
	t.Helper()
	tag := fmt.Sprintf("tag:category:%d", category)
	members := c.do("SMEMBERS", tag)
	var keys []string
	for _, line := range splitLines(members)[1:] {
		if line != "" && line[0] != '$' {
			keys = append(keys, line)
		}
	}
	if len(keys) > 0 {
		c.do(append([]string{"DEL"}, keys...)...)
	}
	c.do("DEL", tag)
}

// Tag invalidation through rproxy behaves as direct: in one MULTI the
// cached key never outlives the tag set it is added to (no jitter inside a
// transaction), outside a transaction the key's TTL is spread below the
// tag set's, and invalidate_category removes every product.
func TestJitterTagInvalidationPattern(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	for id := range 20 {
		cacheProduct(t, c, id, 7)
	}
	// The guides' other form: a plain pipeline, the tag's TTL a bit longer.
	var pipe [][]string
	for id := 20; id < 40; id++ {
		key := fmt.Sprintf("product:%d", id)
		pipe = append(pipe, []string{"SET", key, "data", "EX", "3600"},
			[]string{"SADD", "tag:category:8", key}, []string{"EXPIRE", "tag:category:8", "3660"})
	}
	sendAll(c, pipe...)
	for id := range 40 {
		tag := "tag:category:7"
		if id >= 20 {
			tag = "tag:category:8"
		}
		key := fmt.Sprintf("product:%d", id)
		// Absolute expiry times: two PTTLs read one after the other differ
		// by the time between them.
		if k, s := expireTimeOf(t, rs, key), expireTimeOf(t, rs, tag); k > s || k <= 0 {
			t.Errorf("%s expires at %d ms, its tag set %s at %d ms: the key outlives its index", key, k, tag, s)
		}
	}
	invalidateCategory(t, c, 7)
	invalidateCategory(t, c, 8)
	for id := range 40 {
		if r := c.do("GET", fmt.Sprintf("product:%d", id)); r != "$-1\r\n" {
			t.Errorf("product:%d still served after invalidate_category: %q", id, r)
		}
	}
}

// PER (probabilistic early recomputation) as the guides write it: age is
// ttl - TTL(key), and a value is recomputed when age >= ttl*beta*-ln(rand)
// (or age is not positive). Through rproxy the age is never negative
// (issue 19 saw it negative for up to 10% of the TTL, and every call
// recomputed): it stays within [0, 10% of ttl], so with a fixed random
// sequence the database is called about as often as for a key that old.
func TestJitterPERPattern(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	const ttl, beta, calls = 3600, 1.0, 40
	rnd := rand.New(rand.NewPCG(1, 2))
	dbCalls := 0
	recompute := func(age int) bool { // the guides' decision
		return !(age > 0 && float64(age) < beta*ttl*-math.Log(rnd.Float64()))
	}
	// The key is chosen so that its spread is not zero (the hash is fixed),
	// so age > 0 from the first read: a value written this second reads as
	// up to 360 s old, never as from the future.
	key := "per:product:1"
	for range calls {
		cached := c.do("GET", key)
		r := c.do("TTL", key)
		remaining, err := strconv.Atoi(r[1 : len(r)-2])
		if err != nil {
			t.Fatalf("TTL = %q", r)
		}
		if cached != "$-1\r\n" && remaining > 0 {
			age := ttl - remaining
			if age < 0 || age > ttl/10 {
				t.Fatalf("age %d: TTL %d after SET EX %d", age, remaining, ttl)
			}
			if !recompute(age) {
				continue
			}
		}
		dbCalls++
		if r := c.do("SET", key, "value", "EX", strconv.Itoa(ttl)); r != "+OK\r\n" {
			t.Fatalf("SET = %q", r)
		}
	}
	// At age <= 360 of 3600 a call recomputes with probability <= 1 -
	// e^-0.1 (9.5%): 40 calls stay far below 40 (issue 19: 40 of 40).
	t.Logf("PER through rproxy: %d database calls of %d", dbCalls, calls)
	if dbCalls > 12 {
		t.Fatalf("PER through rproxy called the database %d times of %d", dbCalls, calls)
	}
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i+1 < len(s) && (s[i] != '\r' || s[i+1] != '\n') {
			i++
		}
		if i+1 >= len(s) {
			out = append(out, s)
			break
		}
		out = append(out, s[:i])
		s = s[i+2:]
	}
	return out
}

// A session in stream mode (here: RESP3 with client tracking) gets no
// jitter inside MULTI either: the tag pattern's key and tag set keep the
// TTL asked, together. Stream mode did not follow MULTI, so the policy
// spread TTLs inside the transaction.
func TestJitterNotInsideStreamModeMulti(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	if r := c.do("HELLO", "3"); r[0] != '%' {
		t.Fatalf("HELLO 3 = %q", r)
	}
	if r := c.do("CLIENT", "TRACKING", "on"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on = %q", r)
	}
	cmds := [][]string{{"MULTI"}}
	for i := range 20 {
		cmds = append(cmds, []string{"SETEX", "product:" + strconv.Itoa(i), "3600", "data"})
	}
	cmds = append(cmds, []string{"EXEC"})
	got := sendAll(c, cmds...)
	if got[len(got)-1][0] != '*' {
		t.Fatalf("EXEC = %q", got[len(got)-1])
	}
	for i := range 20 {
		if ms := pttlOf(t, rs, "product:"+strconv.Itoa(i)); ms > 3600_000 || ms < 3599_000 {
			t.Errorf("PTTL of product:%d = %d ms after SETEX 3600 inside MULTI in stream mode: want 3600 s as asked", i, ms)
		}
	}
	// EXEC ended the transaction in the session's view too.
	if r := c.do("CLIENT", "INFO"); !strings.Contains(r, "flags=t ") {
		t.Errorf("CLIENT INFO after EXEC in stream mode = %q, want flags=t (no x)", r)
	}
}
