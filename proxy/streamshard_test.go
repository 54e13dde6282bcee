package proxy_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// shardStep is one step of a sharded pub/sub script: the subscriber sends
// cmds in one write (or, with publish, another client publishes first),
// then reads frames replies. anyOrder: the frames of an SUNSUBSCRIBE of
// every channel, whose order is Redis's dictionary order, compared as a
// set of channels and a list of counts.
type shardStep struct {
	cmds     [][]string
	publish  []string
	frames   int
	anyOrder bool
	skip     bool // sent and read, not compared (HELLO 3: the server's own details)
}

// runShardScript runs steps as subscriber on addr, with a second
// connection to addr for the publishes and the keys' values, and returns
// what each step read.
func runShardScript(t *testing.T, addr string, keys []string, steps []shardStep) []string {
	t.Helper()
	c, w := dialClient(t, addr), dialClient(t, addr)
	for i, k := range keys {
		w.do("SET", k, "v"+strconv.Itoa(i))
	}
	out := make([]string, len(steps))
	for i, st := range steps {
		if st.publish != nil {
			if r := w.do(st.publish...); !strings.HasPrefix(r, ":1") {
				t.Fatalf("step %d: %v: %q, want 1 receiver", i, st.publish, r)
			}
		}
		var batch []byte
		for _, cmd := range st.cmds {
			batch = resp.AppendCommandString(batch, cmd...)
		}
		if len(batch) > 0 {
			c.send(batch)
		}
		frames := make([]string, st.frames)
		for j := range frames {
			frames[j] = string(c.read())
		}
		switch {
		case st.skip:
		case st.anyOrder:
			out[i] = unorderedConfirmations(t, frames)
		default:
			out[i] = strings.Join(frames, "")
		}
	}
	return out
}

// unorderedConfirmations is the channels of frames' confirmations,
// sorted, their counts in order, and the other frames in order.
func unorderedConfirmations(t *testing.T, frames []string) string {
	t.Helper()
	var channels, counts, rest []string
	for _, f := range frames {
		v, err := resp.Parse([]byte(f))
		if err != nil {
			t.Fatalf("%q: %v", f, err)
		}
		if len(v.Elems) != 3 || !strings.HasSuffix(string(v.Elems[0].Str), "subscribe") {
			rest = append(rest, f)
			continue
		}
		channels = append(channels, string(v.Elems[0].Str)+" "+string(v.Elems[1].Str))
		counts = append(counts, strconv.FormatInt(v.Elems[2].Int, 10))
	}
	slices.Sort(channels)
	return strings.Join(channels, ",") + " counts " + strings.Join(counts, ",") + " then " + strings.Join(rest, "")
}

// TestClusterShardChannelsOfEveryMaster: a client that subscribes to shard
// channels of every master on one connection (SSUBSCRIBE one by one, as
// node-redis's and ioredis's cluster clients do on the one node the facade
// shows, and any client of one Redis) gets, through rproxy on a 3-master
// cluster, the bytes one Redis sends: each confirmation counting the
// session's shard channels on every master, the messages SPUBLISHed to
// each, PING's and the refusals of RESP2's subscribed mode while its only
// subscriptions are another master's, and SUNSUBSCRIBE of everything, in
// RESP2 and RESP3. Before, a channel of another master than the
// connection's first got "slot N is on another master than this
// connection's".
func TestClusterShardChannelsOfEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, addrs := keyPerMaster(t, cl, "sch")
	direct := redistest.Start(t)
	k0, k1, k2 := keys[0], keys[1], keys[2]
	// long: a channel of k0's master whose confirmation is longer than
	// what the relay holds while a mode probe waits.
	long := ""
	for n := 0; long == ""; n++ {
		if ch := strings.Repeat("L", 200) + strconv.Itoa(n); cl.MasterForSlot(t, cl.Slot(ch)).Addr == addrs[0] {
			long = ch
		}
	}

	resp2 := []shardStep{
		{cmds: [][]string{{"SSUBSCRIBE", k0}}, frames: 1},
		{cmds: [][]string{{"SSUBSCRIBE", k1}, {"SSUBSCRIBE", k2, k2}}, frames: 3},
		{publish: []string{"SPUBLISH", k1, "m1"}, frames: 1},
		{publish: []string{"SPUBLISH", k0, "m0"}, frames: 1},
		{publish: []string{"SPUBLISH", k2, "m2"}, frames: 1},
		{cmds: [][]string{{"PING"}, {"PING", "x"}, {"GET", k1}}, frames: 3},
		{cmds: [][]string{{"SUNSUBSCRIBE", k0}}, frames: 1},
		// Only other masters' channels now: the connection's own master
		// holds none, and rproxy answers as the subscribed mode does.
		{cmds: [][]string{{"PING"}, {"PING", "y"}, {"GET", k0}, {"GET", k2}, {"CLIENT", "ID", "x"}}, frames: 5},
		{publish: []string{"SPUBLISH", k2, "m2b"}, frames: 1},
		{cmds: [][]string{{"SSUBSCRIBE", long}, {"PING"}, {"SUNSUBSCRIBE", long}, {"GET", k0}}, frames: 4},
		{cmds: [][]string{{"SSUBSCRIBE", k0}, {"SUNSUBSCRIBE", k1}, {"SUNSUBSCRIBE", "nope"}}, frames: 3},
		{cmds: [][]string{{"SUNSUBSCRIBE"}}, frames: 2, anyOrder: true},
		{cmds: [][]string{{"GET", k0}, {"GET", k2}, {"PING"}}, frames: 3},
		{cmds: [][]string{{"SUNSUBSCRIBE"}}, frames: 1},
		{cmds: [][]string{{"SSUBSCRIBE", k2}, {"SUNSUBSCRIBE", k2}, {"GET", k1}}, frames: 3},
		// Every master's channel in the write that starts the subscription.
		{cmds: [][]string{{"SSUBSCRIBE", k1}, {"SSUBSCRIBE", k0}, {"SSUBSCRIBE", k2}}, frames: 3},
		{publish: []string{"SPUBLISH", k0, "m0"}, frames: 1},
		{cmds: [][]string{{"SUNSUBSCRIBE"}, {"PING"}}, frames: 4, anyOrder: true},
	}
	resp3 := []shardStep{
		{cmds: [][]string{{"HELLO", "3"}}, frames: 1, skip: true},
		{cmds: [][]string{{"SSUBSCRIBE", k0}}, frames: 1},
		{cmds: [][]string{{"SSUBSCRIBE", k1}, {"GET", k2}, {"SSUBSCRIBE", k2, k2}}, frames: 4},
		{publish: []string{"SPUBLISH", k2, "m2"}, frames: 1},
		{publish: []string{"SPUBLISH", k1, "m1"}, frames: 1},
		{cmds: [][]string{{"SUNSUBSCRIBE", k0}, {"PING"}, {"GET", k0}, {"GET", k1}}, frames: 4},
		{publish: []string{"SPUBLISH", k1, "m1b"}, frames: 1},
		{cmds: [][]string{{"SUNSUBSCRIBE"}}, frames: 2, anyOrder: true},
		{cmds: [][]string{{"GET", k2}}, frames: 1},
	}
	for _, tc := range []struct {
		name  string
		steps []shardStep
	}{{"RESP2", resp2}, {"RESP3", resp3}} {
		t.Run(tc.name, func(t *testing.T) {
			want := runShardScript(t, direct.Addr, keys, tc.steps)
			got := runShardScript(t, p.Addr, keys, tc.steps)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("step %d %v %v:\n got %q\nwant %q", i, tc.steps[i].cmds, tc.steps[i].publish, got[i], want[i])
				}
			}
		})
	}
}

// TestClusterShardChannelsGoRedis: go-redis's PubSub, subscribed to a
// shard channel of each master in turn on its one connection to rproxy,
// receives what each master's channel is sent.
func TestClusterShardChannelsGoRedis(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "gsch")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer rdb.Close()
	ps := rdb.SSubscribe(ctx)
	defer ps.Close()
	for i, k := range keys {
		if err := ps.SSubscribe(ctx, k); err != nil {
			t.Fatalf("SSubscribe %s: %v", k, err)
		}
		m, err := ps.Receive(ctx)
		if err != nil {
			t.Fatalf("confirmation of %s: %v", k, err)
		}
		if s, ok := m.(*redis.Subscription); !ok || s.Kind != "ssubscribe" || s.Channel != k || s.Count != i+1 {
			t.Fatalf("confirmation of %s: %#v, want ssubscribe %s %d", k, m, k, i+1)
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if n, err := rdb.SPublish(ctx, keys[i], "hi"+strconv.Itoa(i)).Result(); err != nil || n != 1 {
			t.Fatalf("SPublish %s: %d %v", keys[i], n, err)
		}
		m, err := ps.ReceiveMessage(ctx)
		if err != nil || m.Channel != keys[i] || m.Payload != "hi"+strconv.Itoa(i) {
			t.Fatalf("message on %s: %#v %v", keys[i], m, err)
		}
	}
	if err := ps.SUnsubscribe(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	if m, err := ps.Receive(ctx); err != nil || m.(*redis.Subscription).Kind != "sunsubscribe" || m.(*redis.Subscription).Count != 2 {
		t.Fatalf("SUNSUBSCRIBE %s: %#v %v, want sunsubscribe with count 2", keys[1], m, err)
	}
	if err := ps.Ping(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	if m, err := ps.Receive(ctx); err != nil || m.(*redis.Pong).Payload != "ok" {
		t.Fatalf("PING while subscribed: %#v %v", m, err)
	}
}

// TestClusterShardChannelMovedAway: when the slot of a shard channel a
// session holds moves to another master, the node that held it
// unsubscribes it (Redis Cluster sends sunsubscribe), which one Redis never
// does: rproxy subscribes it again on the slot's new master and shows the
// client nothing, and the channel's messages go on reaching it. The
// channel moves from a branch to a branch, from the pin to a branch and
// from a branch to the pin, in RESP2 and RESP3; after it the confirmations
// count the session's channels as one Redis does, and an SUNSUBSCRIBE of
// the moved channel ends it on its new master. Before 2026-11-29 the
// client got the sunsubscribe and the channel's messages were lost (a
// client of one Redis, go-redis's PubSub say, drops it silently).
func TestClusterShardChannelMovedAway(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	w := dialClient(t, p.Addr)
	moves := []struct {
		name     string
		from, to int // masters, by the index of keyPerMaster's keys; 0 is the pin's
	}{{"branch to branch", 1, 2}, {"pin to branch", 0, 2}, {"branch to pin", 1, 0}}
	for _, proto := range []string{"2", "3"} {
		for i, mv := range moves {
			t.Run("RESP"+proto+" "+mv.name, func(t *testing.T) {
				keys, _ := keyPerMaster(t, cl, "mv"+proto+strconv.Itoa(i)+"-")
				extra, _ := keyPerMaster(t, cl, "mx"+proto+strconv.Itoa(i)+"-")
				c, push, confirmation := shardSubscriber(t, p.Addr, proto)
				got := c.pipeline([]string{"SSUBSCRIBE", keys[0]}, []string{"SSUBSCRIBE", keys[1]}, []string{"SSUBSCRIBE", keys[2]})
				if want := confirmation("ssubscribe", keys[0], 1) + confirmation("ssubscribe", keys[1], 2) + confirmation("ssubscribe", keys[2], 3); got != want {
					t.Fatalf("subscribing: %q, want %q", got, want)
				}
				moved := keys[mv.from]
				cl.MigrateSlot(t, cl.Slot(moved), cl.MasterForSlot(t, cl.Slot(keys[mv.to])))
				// Subscribed again once the cluster counts a subscriber.
				deadline := time.Now().Add(5 * time.Second)
				for w.do("PUBSUB", "SHARDNUMSUB", moved) != "*2\r\n$"+strconv.Itoa(len(moved))+"\r\n"+moved+"\r\n:1\r\n" {
					if time.Now().After(deadline) {
						t.Fatalf("%s not subscribed again on its new master within 5 s", moved)
					}
					time.Sleep(10 * time.Millisecond)
				}
				for _, k := range keys {
					if r := w.do("SPUBLISH", k, "after"); r != ":1\r\n" {
						t.Fatalf("SPUBLISH %s: %q, want 1 receiver", k, r)
					}
					if got, want := string(c.read()), push+"$8\r\nsmessage\r\n$"+strconv.Itoa(len(k))+"\r\n"+k+"\r\n$5\r\nafter\r\n"; got != want {
						t.Fatalf("message on %s: %q, want %q (nothing else before it)", k, got, want)
					}
				}
				if got, want := c.do("SSUBSCRIBE", extra[mv.to]), confirmation("ssubscribe", extra[mv.to], 4); got != want {
					t.Fatalf("SSUBSCRIBE after the move: %q, want %q", got, want)
				}
				if got, want := c.do("SUNSUBSCRIBE", moved), confirmation("sunsubscribe", moved, 3); got != want {
					t.Fatalf("SUNSUBSCRIBE of the moved channel: %q, want %q", got, want)
				}
				if r := w.do("SPUBLISH", moved, "gone"); r != ":0\r\n" {
					t.Fatalf("SPUBLISH %s after its SUNSUBSCRIBE: %q, want no receiver", moved, r)
				}
				wantPong := "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
				if proto == "3" {
					wantPong = "+PONG\r\n"
				}
				if got := c.do("PING"); got != wantPong {
					t.Fatalf("PING: %q, want %q", got, wantPong)
				}
			})
		}
	}
}

// TestClusterShardChannelUnsubscribedForGood: when a master drops a shard
// channel's slot and no master takes it (CLUSTER DELSLOTS on that master),
// rproxy cannot subscribe the channel again; after upstream.timeout it
// gives up and shows the client the sunsubscribe its master sent, with the
// session's remaining count, as Redis Cluster does, and the session's
// other channels go on. The channel is on the pin's master or on a
// branch's, in RESP2 and RESP3.
func TestClusterShardChannelUnsubscribedForGood(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const timeout = 400 * time.Millisecond
	p := startClusterProxy(t, cl, func(c *proxy.Config) { c.Upstream.Timeout = timeout })
	w := dialClient(t, p.Addr)
	for _, proto := range []string{"2", "3"} {
		for i, where := range []string{"pin", "branch"} {
			t.Run("RESP"+proto+" "+where, func(t *testing.T) {
				keys, addrs := keyPerMaster(t, cl, "gone"+proto+strconv.Itoa(i)+"-")
				c, push, frame := shardSubscriber(t, p.Addr, proto)
				if got, want := c.pipeline([]string{"SSUBSCRIBE", keys[0]}, []string{"SSUBSCRIBE", keys[1]}), frame("ssubscribe", keys[0], 1)+frame("ssubscribe", keys[1], 2); got != want {
					t.Fatalf("subscribing: %q, want %q", got, want)
				}
				gone, kept := keys[i], keys[1-i]
				owner := dialClient(t, addrs[i])
				slot := strconv.Itoa(cl.Slot(gone))
				start := time.Now()
				if r := owner.do("CLUSTER", "DELSLOTS", slot); r != "+OK\r\n" {
					t.Fatalf("CLUSTER DELSLOTS %s: %q", slot, r)
				}
				defer func() {
					if r := owner.do("CLUSTER", "ADDSLOTS", slot); r != "+OK\r\n" {
						t.Fatalf("CLUSTER ADDSLOTS %s: %q", slot, r)
					}
					// The master may have marked the cluster down meanwhile.
					waitFor(t, "the cluster up again", func() bool {
						return strings.Contains(owner.do("CLUSTER", "INFO"), "cluster_state:ok")
					})
				}()
				if got, want := string(c.read()), frame("sunsubscribe", gone, 1); got != want {
					t.Fatalf("after the slot's deletion: %q, want %q", got, want)
				}
				// rproxy times the retries with its millisecond clock, which a
				// loaded machine leaves a few ms stale (393 ms seen under -race).
				if took := time.Since(start); took < timeout*3/4 {
					t.Fatalf("sunsubscribe shown after %v, well before upstream.timeout (%v): rproxy did not try to subscribe again", took, timeout)
				}
				if r := w.do("SPUBLISH", kept, "still"); r != ":1\r\n" {
					t.Fatalf("SPUBLISH %s: %q, want 1 receiver", kept, r)
				}
				if got, want := string(c.read()), push+"$8\r\nsmessage\r\n$"+strconv.Itoa(len(kept))+"\r\n"+kept+"\r\n$5\r\nstill\r\n"; got != want {
					t.Fatalf("message on %s: %q, want %q", kept, got, want)
				}
				if got, want := c.do("SUNSUBSCRIBE", kept), frame("sunsubscribe", kept, 0); got != want {
					t.Fatalf("SUNSUBSCRIBE of the other channel: %q, want %q", got, want)
				}
			})
		}
	}
}

// shardSubscriber dials addr as a client of protocol proto ("2" or "3") and
// returns it, the header of a push in that protocol, and a maker of
// (un)subscribe confirmations: kind, channel, count.
func shardSubscriber(t *testing.T, addr, proto string) (*rawClient, string, func(kind, ch string, n int) string) {
	t.Helper()
	push := "*3\r\n"
	c := dialClient(t, addr)
	if proto == "3" {
		c.do("HELLO", "3")
		push = ">3\r\n"
	}
	return c, push, func(kind, ch string, n int) string {
		return push + "$" + strconv.Itoa(len(kind)) + "\r\n" + kind + "\r\n$" + strconv.Itoa(len(ch)) + "\r\n" + ch + "\r\n:" + strconv.Itoa(n) + "\r\n"
	}
}
