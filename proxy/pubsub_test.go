package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// TestPubSubMatchesRedis runs one subscriber script against Redis directly
// and through rproxy, with messages published in between, and requires the
// same bytes: subscribe confirmations, messages in order, PING in
// subscribed mode, RESP2's refusal of other commands, RESP3's normal
// commands interleaved with pushes, and unsubscribing.
func TestPubSubMatchesRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			var got [2]string
			for i, addr := range []string{rs.Addr, p.Addr} {
				c := dialClient(t, addr)
				c.do("HELLO", proto)
				c.do("SET", "k", "v")
				var script []byte
				script = resp.AppendCommandString(script, "SUBSCRIBE", "news", "sport")
				script = resp.AppendCommandString(script, "PSUBSCRIBE", "n*")
				c.send(script)
				var out strings.Builder
				for j := 0; j < 3; j++ { // three confirmations
					out.Write(c.read())
				}
				for _, m := range []string{"m1", "m2", "m3"} {
					rs.Do(t, "PUBLISH", "news", m) // direct, so both runs see the same
				}
				for j := 0; j < 6; j++ { // each message as message and pmessage
					out.Write(c.read())
				}
				script = resp.AppendCommandString(nil, "PING")
				script = resp.AppendCommandString(script, "GET", "k") // RESP2: refused by Redis; RESP3: answered
				script = resp.AppendCommandString(script, "UNSUBSCRIBE", "news")
				script = resp.AppendCommandString(script, "PUNSUBSCRIBE")
				script = resp.AppendCommandString(script, "UNSUBSCRIBE")
				script = resp.AppendCommandString(script, "PING")
				c.send(script)
				for j := 0; j < 6; j++ {
					out.Write(c.read())
				}
				got[i] = out.String()
			}
			if got[0] != got[1] {
				t.Fatalf("pub/sub bytes differ\n  direct: %q\n  rproxy: %q", got[0], got[1])
			}
			if !strings.Contains(got[1], "m3") {
				t.Fatalf("messages missing: %q", got[1])
			}
		})
	}
}

// TestSubscriberDisconnectReleases: a subscriber that leaves ends its
// upstream subscription and connection.
func TestSubscriberDisconnectReleases(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	baseline := redisClients(t, rs)
	for i := 0; i < 3; i++ {
		c := dialClient(t, p.Addr)
		c.do("SUBSCRIBE", "gone")
		if got := string(rs.Do(t, "PUBSUB", "NUMSUB", "gone")); got != "*2\r\n$4\r\ngone\r\n:1\r\n" {
			t.Fatalf("NUMSUB while subscribed = %q", got)
		}
		c.nc.Close()
		waitFor(t, "the subscription to end", func() bool {
			return string(rs.Do(t, "PUBSUB", "NUMSUB", "gone")) == "*2\r\n$4\r\ngone\r\n:0\r\n"
		})
	}
	assertNoPins(t, p)
	// A stream connection is never reused; the pool keeps two spares.
	waitFor(t, "Redis connections back to baseline", func() bool { return redisClients(t, rs) == baseline+2 })
}

// TestGoRedisPubSub: go-redis's PubSub (RESP3 default and RESP2) receives
// every message in order through rproxy, and a QUIT-less Close cleans up.
func TestGoRedisPubSub(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	ctx := context.Background()
	for _, proto := range []int{3, 2} {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto})
		sub := rdb.Subscribe(ctx, "events")
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("RESP%d: subscribe: %v", proto, err)
		}
		ch := sub.Channel()
		for i := 0; i < 100; i++ {
			if err := rdb.Publish(ctx, "events", i).Err(); err != nil {
				t.Fatalf("RESP%d: publish: %v", proto, err)
			}
		}
		for i := 0; i < 100; i++ {
			select {
			case m := <-ch:
				if want := strconv.Itoa(i); m.Payload != want {
					t.Fatalf("RESP%d: message %d = %q", proto, i, m.Payload)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("RESP%d: message %d not delivered", proto, i)
			}
		}
		if err := sub.Ping(ctx); err != nil {
			t.Fatalf("RESP%d: PING while subscribed: %v", proto, err)
		}
		sub.Close()
		rdb.Close()
	}
	assertNoPins(t, p)
}

// TestMonitorHidesTierPings: the local tier checks its tracking connection
// with a PING four times a second while it holds something (and after
// writes whose keys rproxy cannot see). MONITOR through rproxy showed them between the client's
// commands, where a MONITOR of Redis without rproxy has none (Redis's
// unit/introspection MONITOR tests read their lines one by one and lost to
// them). They are hidden; a client's own PING still shows.
func TestMonitorHidesTierPings(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, cacheAll)
	// The tier probes only while it holds something.
	waitServing(t, p)
	rs.Do(t, "SET", "c:k", "v")
	cached(t, p, dialClient(t, p.Addr), "c:k")
	m := monitorOn(t, p.Addr)
	// Redis's own MONITOR, opened after rproxy's: two of the tier's
	// PINGs there were sent to rproxy's monitor too.
	direct := monitorOn(t, rs.Addr)
	for pings := 0; pings < 2; {
		if strings.HasSuffix(string(direct.read()), `] "PING"`+"\r\n") {
			pings++
		}
	}
	c := dialClient(t, p.Addr)
	c.do("PING")
	c.do("SET", "mk", "1")
	lines := monitorUntil(t, m, `"SET" "mk" "1"`)
	pings := 0
	for _, l := range lines {
		if strings.HasSuffix(l, `] "PING"`+"\r\n") {
			pings++
		}
	}
	if pings != 1 {
		t.Fatalf("MONITOR through rproxy showed %d PINGs before the SET, want the client's one: %q", pings, lines)
	}
}

// monitorOn dials addr (rproxy or a Redis server) and turns MONITOR on.
func monitorOn(t *testing.T, addr string) *rawClient {
	t.Helper()
	m := dialClient(t, addr)
	if r := m.do("MONITOR"); r != "+OK\r\n" {
		t.Fatalf("MONITOR on %s = %q", addr, r)
	}
	return m
}

// expectMultiAsSent reads m's MONITOR lines up to a MULTI and fails
// unless Redis ran it as the client spelled it (multi), not rproxy's own
// spelling.
func expectMultiAsSent(t *testing.T, m *rawClient) {
	t.Helper()
	for {
		if l := string(m.read()); strings.Contains(l, `"MULTI"`) || strings.Contains(l, `"multi"`) {
			if !strings.Contains(l, `"multi"`) {
				t.Errorf("Redis ran %q, the client sent multi", l)
			}
			return
		}
	}
}

// monitorUntil reads m's MONITOR lines up to the one containing want (at
// most 20), and returns them.
func monitorUntil(t *testing.T, m *rawClient, want string) []string {
	t.Helper()
	var lines []string
	for len(lines) < 20 {
		lines = append(lines, string(m.read()))
		if strings.Contains(lines[len(lines)-1], want) {
			return lines
		}
	}
	t.Fatalf("MONITOR lines without %s: %q", want, lines)
	return nil
}

// TestMonitorAndTracking: MONITOR and RESP3 CLIENT TRACKING give the session
// its own connection, so they behave as on Redis: MONITOR sees other
// clients' commands, and tracking delivers an invalidation push when
// another client writes a key this client read.
func TestMonitorAndTracking(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)

	m := monitorOn(t, p.Addr)
	dialClient(t, p.Addr).do("SET", "mk", "1")
	// MONITOR shows every connection's commands, rproxy's tier fills too
	// (not its PINGs: TestMonitorHidesTierPings).
	monitorUntil(t, m, `"SET" "mk" "1"`)

	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	if got := c.do("CLIENT", "TRACKING", "on"); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on = %q", got)
	}
	if got := c.do("GET", "tk"); got != "_\r\n" {
		t.Fatalf("GET = %q", got)
	}
	dialClient(t, p.Addr).do("SET", "tk", "x")
	if got := string(c.read()); got != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n" {
		t.Fatalf("invalidation = %q", got)
	}
	if got := c.do("GET", "tk"); got != "$1\r\nx\r\n" {
		t.Fatalf("GET after invalidation = %q", got)
	}
}

// A SUBSCRIBE reaches Redis about one round trip after the client sent it
// (its connection is a warm spare, not dialled on demand), so a PUBLISH
// another client sends right after it is seldom missed: the same race
// direct to Redis. Checked two ways. First the mechanism, which holds
// however loaded the machine is: the subscriber's Redis connection is
// older than the SUBSCRIBE (its client id is at most the newest one Redis
// listed just before). Then the race itself, which a loaded machine widens
// (CI under -race once had 26 of 50 missed), so it gets three tries of 50
// rounds to show at most half missed; its rounds ask Redis nothing, as a
// CLIENT LIST just before the SUBSCRIBE alone raises the misses (2-11 of 50
// here without, 8-24 with). Measured: before the spare, 37 and 44 of 50.
func TestSubscribeThenPublishAtOnce(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	warm := dialClient(t, p.Addr)
	warm.do("MULTI") // the first pin leaves the pool a spare
	warm.do("DISCARD")
	pub := dialClient(t, p.Addr)
	direct := dialClient(t, rs.Addr)
	// The last subscriber's connection is closed (its client left
	// subscribed) and a spare is dialled in its place.
	waitSpare := func() {
		waitFor(t, "a spare dedicated connection", func() bool {
			return counterValue(t, p.Registry, "rproxy_upstream_pinned_connections", nil) == 0 &&
				counterValue(t, p.Registry, "rproxy_upstream_idle_dedicated_connections", nil) >= 1
		})
	}
	for i := 0; i < 5; i++ {
		waitSpare()
		waitFor(t, "the last subscriber gone from Redis", func() bool { return subscriberID(t, direct) == 0 })
		newest := newestClientID(t, direct)
		sub := dialClient(t, p.Addr)
		if got := sub.do("SUBSCRIBE", fmt.Sprintf("spare:%d", i)); !strings.Contains(got, "subscribe") {
			t.Fatalf("SUBSCRIBE = %q", got)
		}
		if id := subscriberID(t, direct); id == 0 || id > newest {
			t.Fatalf("round %d: the subscriber's Redis connection (id %d) was dialled after the SUBSCRIBE was sent (newest id before it: %d), not taken from the spares", i, id, newest)
		}
		sub.nc.Close()
	}

	const rounds, tries = 50, 3
	var misses []int
	for try := 0; try < tries; try++ {
		missed := 0
		for i := 0; i < rounds; i++ {
			ch := fmt.Sprintf("race:%d:%d", try, i)
			waitSpare()
			sub := dialClient(t, p.Addr)
			sub.send(resp.AppendCommandString(nil, "SUBSCRIBE", ch))
			n := pub.do("PUBLISH", ch, "m")
			if n == ":0\r\n" {
				missed++
			}
			sub.read() // the subscribe confirmation
			if n == ":1\r\n" {
				if m := string(sub.read()); !strings.Contains(m, "message") {
					t.Fatalf("round %d: got %q, want the message", i, m)
				}
			}
			sub.nc.Close()
		}
		misses = append(misses, missed)
		t.Logf("try %d: %d of %d publishes sent right after a SUBSCRIBE found no subscriber", try+1, missed, rounds)
		if missed <= rounds/2 {
			return
		}
	}
	t.Errorf("publishes that missed the subscriber in %d tries of %d rounds: %v (before warm connections: 37 and 44)", tries, rounds, misses)
}

// subscriberID is the highest Redis client id among connections in
// subscribed mode, 0 when there is none.
func subscriberID(t *testing.T, direct *rawClient) int64 {
	return maxClientID(t, direct.do("CLIENT", "LIST", "TYPE", "pubsub"))
}

// newestClientID is the highest Redis client id now connected.
func newestClientID(t *testing.T, direct *rawClient) int64 {
	return maxClientID(t, direct.do("CLIENT", "LIST"))
}

func maxClientID(t *testing.T, list string) int64 {
	t.Helper()
	var newest int64
	for _, line := range strings.Split(list, "\n") {
		var id int64
		if i := strings.Index(line, "id="); i >= 0 {
			fmt.Sscanf(line[i:], "id=%d", &id)
		}
		newest = max(newest, id)
	}
	return newest
}

// SYNC through rproxy makes the client a replica as it would directly: the
// session gets its own connection and what Redis sends (the RDB, then the
// write stream) is copied to it (Redis's suite reads the replication
// stream this way).
func TestReplicationStreamThroughProxy(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	repl := dialClient(t, p.Addr)
	repl.send(resp.AppendCommandString(nil, "SYNC"))
	w := dialClient(t, p.Addr)
	var got []byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains(got, []byte("repl-marker")) {
		if r := w.do("SET", "repl-marker", "1"); r != "+OK\r\n" {
			t.Fatalf("SET = %q", r)
		}
		repl.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, _ := repl.nc.Read(buf)
		got = append(got, buf[:n]...)
		if time.Now().After(deadline) {
			t.Fatalf("no write in the replication stream after 10s; got %q", got)
		}
	}
	if got[0] != '$' && got[0] != '\n' {
		t.Errorf("SYNC's reply starts %q, want the RDB's bulk header", got[:min(len(got), 16)])
	}
}

// TestStreamResetKeepsTheConnection: after a RESET ends stream mode, the
// session's connection goes back to the pool, reset and logged in again,
// instead of being closed: a pipeline of SUBSCRIBE and RESET opened a
// connection to Redis per pair (each then in TIME_WAIT here, as with
// passthrough's AUTH checks). A connection that tracked keys stays the
// session's, and a pipeline of CLIENT TRACKING and RESET opened one per
// pair too, until the session kept it. The connection lent next is the
// upstream user's, with no subscription left.
func TestStreamResetKeepsTheConnection(t *testing.T) {
	rs := redisWithAppUser(t)
	p := proxytest.Start(t, rs.Addr, asAppUser)
	admin := dialClient(t, rs.Addr)
	admin.do("AUTH", "adminpw")
	c := dialClient(t, p.Addr)
	const pairs = 200
	for _, enter := range []struct {
		cmd   []string
		reply string
	}{
		{[]string{"SUBSCRIBE", "ch"}, "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"},
		{[]string{"CLIENT", "TRACKING", "on"}, "+OK\r\n"},
	} {
		var batch []byte
		for i := 0; i < pairs; i++ {
			batch = resp.AppendCommandString(batch, enter.cmd...)
			batch = resp.AppendCommandString(batch, "RESET")
		}
		before := connectionsReceived(t, admin)
		c.send(batch)
		for i := 0; i < pairs; i++ {
			if r := string(c.read()); r != enter.reply {
				t.Fatalf("%v %d = %q", enter.cmd, i, r)
			}
			if r := string(c.read()); r != "+RESET\r\n" {
				t.Fatalf("RESET %d = %q", i, r)
			}
		}
		if n := connectionsReceived(t, admin) - before; n > 4 {
			t.Errorf("%d pairs of %v and RESET opened %d connections to Redis, want at most 4", pairs, enter.cmd, n)
		}
	}
	// A pinned session gets a reset connection: the upstream user's, and
	// subscribed to nothing (PUBLISH would be refused in subscribed mode).
	for _, st := range []struct{ cmd, want []string }{
		{[]string{"WATCH", "k"}, []string{"+OK\r\n"}},
		{[]string{"ACL", "WHOAMI"}, []string{"$3\r\napp\r\n"}},
		{[]string{"PUBLISH", "ch", "x"}, []string{":0\r\n"}},
	} {
		r := c.do(st.cmd...)
		for _, w := range st.want {
			if !strings.Contains(r, w) {
				t.Errorf("%v after the pairs = %q, want %q in it", st.cmd, r, w)
			}
		}
	}
}

// TestStreamResetReplyAfterTheSessionLeft: a client that has read RESET's
// reply finds its session reset in CLIENT LIST (no P flag, no
// subscriptions), as on Redis, where the reply comes after the reset; the
// Tcl test "RESET clears MONITOR state" asks this of MONITOR.
func TestStreamResetReplyAfterTheSessionLeft(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c, other := dialClient(t, p.Addr), dialClient(t, p.Addr)
	id := strings.Trim(c.do("CLIENT", "ID"), ":\r\n")
	for i := 0; i < 20; i++ {
		c.do("SUBSCRIBE", "ch")
		if r := c.do("RESET"); r != "+RESET\r\n" {
			t.Fatalf("RESET = %q", r)
		}
		line := regexp.MustCompile(`(?m)^id=` + id + ` .*$`).FindString(other.do("CLIENT", "LIST"))
		if !strings.Contains(line, " flags=N ") || !strings.Contains(line, " sub=0 ") {
			t.Fatalf("round %d: CLIENT LIST after RESET's reply shows the session as %q", i, line)
		}
	}
}

// TestStreamResetKeepsATrackedConnectionForItsSession: a connection that
// tracked keys is not lent to another session after RESET: Redis keeps its
// id in the tracking table for the keys read, and the next session to turn
// tracking on on it would get invalidations of the first one's keys. The
// session keeps it instead (TestTrackingAfterResetAsRedis).
func TestStreamResetKeepsATrackedConnectionForItsSession(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	a := dialClient(t, p.Addr)
	a.do("HELLO", "3")
	for _, cmd := range [][]string{{"CLIENT", "TRACKING", "on"}, {"GET", "secret-key"}, {"RESET"}} {
		a.do(cmd...)
	}
	b := dialClient(t, p.Addr)
	b.do("HELLO", "3")
	if r := b.do("CLIENT", "TRACKING", "on"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on = %q", r)
	}
	dialClient(t, p.Addr).do("SET", "secret-key", "x")
	if r := b.do("PING"); r != "+PONG\r\n" {
		t.Errorf("PING of a session that read nothing = %q, want +PONG (no invalidation of another session's key)", r)
	}
	// a's connection is kept for it (b's is lent), and closed once it leaves.
	pinned := func() float64 {
		v, _ := metricSum(t, p.Registry, "rproxy_upstream_pinned_connections", nil)
		return v
	}
	if n := pinned(); n != 2 {
		t.Fatalf("pinned connections = %v, want 2 (a's kept, b's)", n)
	}
	a.nc.Close()
	waitFor(t, "the connection a kept closed", func() bool { return pinned() == 1 })
}

// TestTrackingAfterResetAsRedis: a client that tracked a key, sent RESET
// and turned tracking on again gets the key's invalidation when it changes:
// Redis keeps the connection's entries through RESET. Through rproxy the
// session keeps its connection, so the client sees what it would directly;
// before, rproxy closed the connection and the invalidation never came.
func TestTrackingAfterResetAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	var got [2]string
	for i, addr := range []string{rs.Addr, p.Addr} {
		c := dialClient(t, addr)
		for _, cmd := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "on"}, {"GET", "tracked"}, {"RESET"},
			{"HELLO", "3"}, {"CLIENT", "TRACKING", "on"}} {
			c.do(cmd...)
		}
		dialClient(t, addr).do("SET", "tracked", "x")
		c.send(resp.AppendCommandString(nil, "PING"))
		got[i] = readUntil(t, c, "+PONG\r\n")
		c.nc.Close()
	}
	if want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\ntracked\r\n+PONG\r\n"; got[0] != want {
		t.Fatalf("Redis directly: %q, want %q", got[0], want)
	}
	if got[1] != got[0] {
		t.Errorf("through rproxy: %q, want %q as from Redis", got[1], got[0])
	}
}

// TestStreamResetNotForgedByAScript: a script's status reply +RESET, in
// stream mode before the client's own RESET, does not pass for the RESET's:
// the session leaves stream mode after the real one, and the client gets
// every reply, as from Redis directly. Before, the copy ended at the
// script's reply and the RESET's own was lost.
func TestStreamResetNotForgedByAScript(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	var batch []byte
	for _, cmd := range [][]string{
		{"SET", "k", "v"},
		{"CLIENT", "TRACKING", "on"},
		{"EVAL", "return redis.status_reply('RESET')", "0"},
		{"RESET"},
		{"GET", "k"},
		{"PING"},
	} {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	want := []string{"+OK\r\n", "+OK\r\n", "+RESET\r\n", "+RESET\r\n", "$1\r\nv\r\n", "+PONG\r\n"}
	for _, addr := range []string{rs.Addr, p.Addr} {
		c := dialClient(t, addr)
		c.send(batch)
		for i, w := range want {
			if got := string(c.read()); got != w {
				t.Fatalf("%s: reply %d = %q, want %q", addr, i, got, w)
			}
		}
	}
}

// TestResetLeavesStreamMode: RESET ends subscriptions, tracking and MONITOR
// on Redis and leaves a clean connection; through rproxy the session then
// goes on as a new one on the shared connections. Before, it stayed on its
// pinned connection, which RESET had logged out of Redis: against a Redis
// with a password every later command got -NOAUTH. The commands after the
// RESET arrive in the same write, so the session changes mode mid-read.
func TestResetLeavesStreamMode(t *testing.T) {
	rs := redisWithAppUser(t)
	p := proxytest.Start(t, rs.Addr, asAppUser)
	for _, enter := range [][][]string{
		{{"SUBSCRIBE", "ch"}},
		{{"HELLO", "3"}, {"SUBSCRIBE", "ch"}},
		{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}},
		{{"MONITOR"}},
	} {
		c := dialClient(t, p.Addr)
		for _, cmd := range enter {
			c.do(cmd...)
		}
		var batch []byte
		for _, cmd := range [][]string{{"RESET"}, {"SET", "k", "v"}, {"GET", "k"}, {"ACL", "WHOAMI"}, {"CLIENT", "INFO"}} {
			batch = resp.AppendCommandString(batch, cmd...)
		}
		c.send(batch)
		got := []string{string(c.read())}
		for i := 0; got[0] != "+RESET\r\n" && i < 50; i++ {
			got[0] = string(c.read()) // MONITOR shows other connections' commands first
		}
		for range 4 {
			got = append(got, string(c.read()))
		}
		if got[0] != "+RESET\r\n" || got[1] != "+OK\r\n" || got[2] != "$1\r\nv\r\n" || got[3] != "$3\r\napp\r\n" {
			t.Fatalf("after %v: RESET, SET, GET, ACL WHOAMI = %q", enter, got[:4])
		}
		if info := got[4]; !strings.Contains(info, " flags=N ") || !strings.Contains(info, " sub=0 psub=0") {
			t.Fatalf("after %v: CLIENT INFO = %q, want a plain client", enter, info)
		}
		// Publishing to the old channel reaches no one.
		if n := c.do("PUBLISH", "ch", "x"); n != ":0\r\n" {
			t.Fatalf("after %v: PUBLISH to the old channel = %q", enter, n)
		}
		c.nc.Close()
	}
	assertNoPins(t, p)
}

// With rproxy's own users, RESET in stream mode logs the session out, as
// outside it.
func TestResetInStreamModeLogsOut(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"alice": sha("alicepw")}
	})
	c := dialClient(t, p.Addr)
	c.do("AUTH", "alice", "alicepw")
	c.do("SUBSCRIBE", "ch")
	for _, step := range []struct{ cmd, want string }{
		{"RESET", "+RESET\r\n"},
		{"PING", "-NOAUTH Authentication required.\r\n"},
		{"AUTH alice alicepw", "+OK\r\n"},
		{"PING", "+PONG\r\n"},
	} {
		if got := c.do(strings.Fields(step.cmd)...); got != step.want {
			t.Fatalf("%s = %q, want %q", step.cmd, got, step.want)
		}
	}
}

// TestResp2SubscribedModeAsRedis: in RESP2's subscribed mode Redis refuses
// every command but the subscribe ones, PING, QUIT and RESET, naming it;
// rproxy answers CLIENT ID and AUTH itself elsewhere, and must not here
// (before, CLIENT ID got "Can't execute 'eval'" from the script that
// carried rproxy's answer). Bytes compared with Redis's own.
func TestResp2SubscribedModeAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	got := directAndThrough(t, rs, p, nil, [][]string{{"SUBSCRIBE", "ch"}},
		[][]string{{"CLIENT", "ID"}, {"CLIENT", "GETNAME"}, {"CLIENT", "LIST"}, {"CLIENT", "KILL", "ID", "1"},
			{"AUTH", "default", "x"}, {"AUTH", "x"}, {"HELLO", "2", "AUTH", "default", "x"}, {"MULTI"}, {"CLIENT", "ID"}, {"EXEC"}, {"PING"}})
	if !strings.Contains(got, "Can't execute 'client|id'") {
		t.Fatalf("no refusal of CLIENT ID: %q", got)
	}
}

// directAndThrough sends, on a new connection to Redis and then to rproxy,
// the setup commands one by one and then script in one write (after
// before, when given), and requires the script's replies to be the same
// bytes both ways. It returns them.
func directAndThrough(t *testing.T, rs *redistest.Server, p *proxytest.Proxy, before func(), setup, script [][]string) string {
	t.Helper()
	var got [2]string
	for i, addr := range []string{rs.Addr, p.Addr} {
		if before != nil {
			before()
		}
		c := dialClient(t, addr)
		for _, cmd := range setup {
			c.do(cmd...)
		}
		got[i] = c.pipeline(script...)
	}
	if got[0] != got[1] {
		t.Fatalf("replies differ\n  direct: %q\n  rproxy: %q", got[0], got[1])
	}
	return got[1]
}

// In stream mode, a command rproxy answers with Redis's own error for its
// arguments fails inside EXEC's array, the rest of the transaction applied,
// as on Redis: it is not a queue-time rejection. Bytes compared with
// Redis's own.
func TestStreamModeRuntimeErrorInsideMultiAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	got := directAndThrough(t, rs, p, func() { rs.Do(t, "DEL", "k") },
		[][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}},
		[][]string{{"MULTI"}, {"SET", "k", "1"}, {"CLIENT", "LIST", "TYPE", "bogus"}, {"EXEC"}, {"GET", "k"}})
	if !strings.HasSuffix(got, "$1\r\n1\r\n") {
		t.Fatalf("the transaction's SET did not apply: %q", got)
	}
}

// TestTrackingInfoInSessionIDs: CLIENT TRACKINGINFO's redirect, and the
// tracking-redir-broken push, give the id the client gave (rproxy's), not
// Redis's id of the target's connection, also once the target has gone
// (broken_redirect), as Redis's own test expects (unit/tracking).
func TestTrackingInfoInSessionIDs(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c, target, id := redirectedTracking(t, p)
	wantRedirect := "$8\r\nredirect\r\n:" + id + "\r\n"
	if got := c.do("CLIENT", "TRACKINGINFO"); !strings.Contains(got, wantRedirect) || !strings.Contains(got, "$2\r\non\r\n") {
		t.Fatalf("CLIENT TRACKINGINFO = %q, want redirect %s", got, id)
	}
	c.do("GET", "k")
	target.nc.Close()
	// Until Redis has seen the target's connection close (the only one
	// subscribed), a write would still be redirected to it.
	for deadline := time.Now().Add(5 * time.Second); strings.Contains(string(rs.Do(t, "CLIENT", "LIST")), " sub=1 "); {
		if time.Now().After(deadline) {
			t.Fatal("the target's connection is still open on Redis")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rs.Do(t, "SET", "k", "v")
	// The push names the target by the id the client gave too (before
	// 2026-11-29, Redis's id of the target's connection).
	if got, want := string(c.read()), ">2\r\n$21\r\ntracking-redir-broken\r\n:"+id+"\r\n"; got != want {
		t.Fatalf("push = %q, want %q", got, want)
	}
	got := c.do("CLIENT", "TRACKINGINFO")
	if !strings.Contains(got, wantRedirect) || !strings.Contains(got, "broken_redirect") {
		t.Fatalf("CLIENT TRACKINGINFO after the target left = %q, want redirect %s and broken_redirect", got, id)
	}
}

// redirectedTracking connects a RESP3 client c whose tracking is
// redirected (CLIENT TRACKING on REDIRECT) to target, a session subscribed
// to __redis__:invalidate whose id is id.
func redirectedTracking(t *testing.T, p *proxytest.Proxy) (c, target *rawClient, id string) {
	t.Helper()
	target = dialClient(t, p.Addr)
	id = strings.TrimSpace(strings.TrimPrefix(target.do("CLIENT", "ID"), ":"))
	target.do("SUBSCRIBE", "__redis__:invalidate")
	c = dialClient(t, p.Addr)
	c.do("HELLO", "3")
	if got := c.do("CLIENT", "TRACKING", "on", "REDIRECT", id); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on REDIRECT %s = %q", id, got)
	}
	return c, target, id
}

// TestStreamModeAnswersNeedNoScripting: in stream mode, rproxy's own
// answers (CLIENT ID, GETNAME, INFO, GETREDIR, UNBLOCK) come in order with
// Redis's replies without a script, so an upstream user without @scripting
// (a stricter least-privilege user than docs/security.md's) gets them, and
// CLIENT INFO is RESP3's verbatim string as outside stream mode. The same
// commands, pipelined in one write, give the same bytes before and after
// the session enters stream mode (CLIENT TRACKING on).
func TestStreamModeAnswersNeedNoScripting(t *testing.T) {
	rs := redisWithAppUser(t, "-@scripting")
	p := proxytest.Start(t, rs.Addr, asAppUser)
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	c.do("CLIENT", "SETNAME", "n1")
	script := [][]string{{"CLIENT", "ID"}, {"CLIENT", "GETNAME"}, {"CLIENT", "GETREDIR"},
		{"CLIENT", "UNBLOCK", "999999"}, {"CLIENT", "INFO"}, {"PING"}}
	var raw []byte
	for _, cmd := range script {
		raw = resp.AppendCommandString(raw, cmd...)
	}
	replies := func() []string {
		c.send(raw)
		out := make([]string, len(script))
		for i := range script {
			out[i] = string(c.read())
		}
		return out
	}
	before := replies()
	if got := c.do("CLIENT", "TRACKING", "on"); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING on = %q", got)
	}
	after := replies()
	// Only GETREDIR (tracking on, no redirect: 0) and CLIENT INFO's
	// tracking flag, age, idle and last command may differ.
	if before[2] != ":-1\r\n" || after[2] != ":0\r\n" {
		t.Fatalf("CLIENT GETREDIR before/after tracking = %q/%q, want :-1/:0", before[2], after[2])
	}
	for _, i := range []int{0, 1, 3, 5} {
		if before[i] != after[i] {
			t.Fatalf("%v in stream mode = %q, want %q as before it", script[i], after[i], before[i])
		}
	}
	if !strings.HasPrefix(after[4], "=") || !strings.Contains(after[4], "txt:id="+strings.Trim(after[0], ":\r\n")+" ") ||
		!strings.Contains(after[4], " name=n1 ") {
		t.Fatalf("CLIENT INFO in stream mode = %q, want a verbatim string with the session's id and name", after[4])
	}
}

// TestResp2SubscribedCredentialsStayHere: when Redis refused the
// SUBSCRIBE (here the upstream user may not use the channel), the
// connection is not subscribed, and an AUTH or HELLO AUTH sent on as the
// client wrote it would run: the client's credentials would reach Redis
// and switch the session's connection to another Redis user, past auth
// mode none. rproxy asks Redis for the mode first and handles them as in
// any session (the same reply as a session that never subscribed), and the
// connection stays the upstream user's.
func TestResp2SubscribedCredentialsStayHere(t *testing.T) {
	rs := redisWithAppUser(t, "resetchannels", "&allowed")
	p := proxytest.Start(t, rs.Addr, asAppUser)
	c, fresh := dialClient(t, p.Addr), dialClient(t, p.Addr)
	if got := c.do("SUBSCRIBE", "forbidden"); !strings.HasPrefix(got, "-NOPERM") {
		t.Fatalf("SUBSCRIBE forbidden = %q, want Redis's NOPERM", got)
	}
	for _, cmd := range [][]string{{"AUTH", "default", "adminpw"}, {"AUTH", "adminpw"}, {"HELLO", "2", "AUTH", "default", "adminpw"}} {
		got, want := c.do(cmd...), fresh.do(cmd...)
		if cmd[0] == "HELLO" {
			id := regexp.MustCompile(`id\r\n:\d+`) // each session's own
			got, want = id.ReplaceAllString(got, "id"), id.ReplaceAllString(want, "id")
		}
		if got != want {
			t.Errorf("%v after a refused SUBSCRIBE = %q, in a session that never subscribed %q", cmd, got, want)
		}
		if got := c.do("ACL", "WHOAMI"); got != "$3\r\napp\r\n" {
			t.Fatalf("ACL WHOAMI after %v = %q: the session's connection is no longer rproxy's upstream user", cmd, got)
		}
	}
}

// TestResp2RefusedSubscribeLeavesCommandsHere: rproxy follows Redis's
// subscribed mode, not the one the client asked for. After a SUBSCRIBE
// Redis refused (sent in one write with what follows), the commands rproxy
// answers are rproxy's: CLIENT ID is the session's, CLIENT LIST lists
// rproxy's sessions, and CLIENT KILL reaches rproxy's sessions, not every
// connection on Redis. Once Redis confirms the mode, it refuses them as it
// does for a client of its own.
func TestResp2RefusedSubscribeLeavesCommandsHere(t *testing.T) {
	rs := redisWithAppUser(t, "resetchannels", "&allowed")
	p := proxytest.Start(t, rs.Addr, asAppUser)
	other := dialClient(t, p.Addr)
	if got := other.do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET = %q", got)
	}
	c := dialClient(t, p.Addr)
	id := c.do("CLIENT", "ID")
	var batch []byte
	for _, cmd := range [][]string{{"SUBSCRIBE", "forbidden"}, {"CLIENT", "ID"}, {"CLIENT", "LIST"}} {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	c.send(batch)
	if got := string(c.read()); !strings.HasPrefix(got, "-NOPERM") {
		t.Fatalf("SUBSCRIBE forbidden = %q, want Redis's NOPERM", got)
	}
	if got := string(c.read()); got != id {
		t.Errorf("CLIENT ID after a refused SUBSCRIBE = %q, want the session's %q", got, id)
	}
	list := string(c.read())
	if n := strings.Count(list, "\nid="); n != 2 || !strings.Contains(list, "id="+strings.Trim(id, ":\r\n")+" ") {
		t.Errorf("CLIENT LIST after a refused SUBSCRIBE lists %d clients, want rproxy's 2 sessions, %q among them:\n%s", n, id, list)
	}
	if got := c.do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); got != ":1\r\n" {
		t.Errorf("CLIENT KILL TYPE normal SKIPME yes = %q, want :1 (the other session)", got)
	}
	if got := dialClient(t, p.Addr).do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Errorf("GET from a new session after the KILL = %q", got)
	}

	direct := dialClient(t, rs.Addr)
	direct.do("AUTH", "app", "apppw")
	for _, cl := range []*rawClient{c, direct} {
		if got := cl.do("SUBSCRIBE", "allowed"); got != "*3\r\n$9\r\nsubscribe\r\n$7\r\nallowed\r\n:1\r\n" {
			t.Fatalf("SUBSCRIBE allowed = %q", got)
		}
	}
	for _, cmd := range [][]string{{"CLIENT", "ID"}, {"CLIENT", "LIST"}, {"AUTH", "default", "adminpw"}, {"MULTI"}, {"PING"}, {"GET", "k"}} {
		if got, want := c.do(cmd...), direct.do(cmd...); got != want {
			t.Errorf("%v while subscribed = %q, Redis directly: %q", cmd, got, want)
		}
	}
	// Once Redis has confirmed the mode, no probe until an unsubscribe.
	admin := dialClient(t, rs.Addr)
	admin.do("AUTH", "adminpw")
	pings := func() int {
		m := regexp.MustCompile(`cmdstat_ping:calls=(\d+)`).FindStringSubmatch(admin.do("INFO", "commandstats"))
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before := pings()
	for i := 0; i < 20; i++ {
		c.do("CLIENT", "GETNAME")
	}
	if n := pings() - before; n > 3 {
		t.Errorf("20 CLIENT GETNAMEs in a confirmed subscribed mode cost Redis %d PINGs, want no probe each", n)
	}
}

// streamActedCommands are the commands of the stream-mode random tests
// that rproxy acts on, and streamPlainCommands those it forwards as sent.
// The acting ones need the ACL user of the tests' servers: channels
// allowed*, so that SUBSCRIBE forbidden is refused.
var streamActedCommands = [][]string{
	{"SUBSCRIBE", "allowed1"}, {"SUBSCRIBE", "allowed1", "allowed1"}, {"SUBSCRIBE", "forbidden"},
	{"PSUBSCRIBE", "allowed*"}, {"UNSUBSCRIBE"}, {"UNSUBSCRIBE", "allowed1"}, {"PUNSUBSCRIBE"},
	{"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME", "n1"}, {"AUTH", "nobody", "x"},
	{"MULTI"}, {"CLIENT", "TRACKING", "on"}, {"CLIENT", "TRACKING", "off"},
	{"EVAL", "return redis.status_reply('RESET')", "0"}, {"RESET"},
	{"SELECT", "1"}, {"SELECT", "0"}, {"SELECT", "99"}, {"CLIENT", "INFO"}, {"WATCH", "k"}, {"UNWATCH"},
	{"CLIENT", "REPLY", "OFF"}, {"CLIENT", "REPLY", "ON"}, {"CLIENT", "REPLY", "SKIP"},
	{"HELLO", "3"}, {"HELLO", "2"},
	{"SSUBSCRIBE", "allowed1"}, {"SUNSUBSCRIBE"},
	{"CLIENT", "CACHING", "yes"}, {"CLIENT", "GETREDIR"}, {"CLIENT", "TRACKINGINFO"},
	{"CLIENT", "TRACKING", "on", "OPTIN"}, {"CLIENT", "NO-TOUCH", "on"},
	{"CLIENT", "NO-EVICT", "on"}, {"CLIENT", "NO-EVICT", "off"}, {"DBSIZE"},
}
var streamPlainCommands = [][]string{{"PING"}, {"PING", "x"}, {"GET", "k"}, {"SET", "k", "v"}, {"ECHO", "hi"}, {"EXEC"}, {"DISCARD"},
	{"PUBLISH", "allowed1", "m"}, {"INCR", "n"}, {"GET", "n"}, {"MOVE", "k", "1"}, {"COPY", "n", "k", "DB", "1"}, {"SWAPDB", "0", "1"},
	// A blocking command that waits, or finds an element (the stream-mode
	// marker after it: CLIENT LIST's b flag).
	{"LPUSH", "l", "x"}, {"BLPOP", "l", "0.01"}}

// streamTestServers starts the two Redis servers of a stream-mode random
// test, one for the direct client and one behind rproxy, whose default
// user may use the channels allowed* only.
func streamTestServers(t *testing.T) [2]*redistest.Server {
	var servers [2]*redistest.Server
	for i := range servers {
		servers[i] = redistest.Start(t)
		if r := servers[i].Do(t, "ACL", "SETUSER", "default", "resetchannels", "&allowed*"); string(r) != "+OK\r\n" {
			t.Fatal(string(r))
		}
	}
	return servers
}

// TestStreamModeAsRedisRandomSequences sends seeded random sequences of
// subscribe, stream-mode and plain commands, each in one write, to a Redis
// directly and to another through rproxy, and requires the same bytes
// back. Among them are the commands rproxy acts on in stream mode (CLIENT
// GETNAME and SETNAME, AUTH, MULTI, RESET, CLIENT TRACKING), a channel the
// user may not use, so that Redis refuses some SUBSCRIBEs (the mode probe),
// and a script whose reply looks like RESET's (the end marker). Each
// sequence ends with RESET and an ECHO, so both sides start the next one
// alike, but for the id in HELLO's reply; a GET of a key written in
// stream mode comes between them. Inside MULTI only plain commands are drawn: a SUBSCRIBE there is
// refused through rproxy (docs/commands.md). One channel name only: an
// UNSUBSCRIBE of several lists them in the order of each server's own
// (randomly seeded) hash table. A key of its own per sequence: Redis keeps
// invalidating, on the direct connection, keys it read while tracking in
// an earlier sequence, and through rproxy the session keeps a tracked
// connection per protocol (HELLO 2 and 3 each have their pool) and, in
// passthrough mode, per user, so keys read while tracking on one are not
// on another: k and n become k<seq> and n<seq>. With fill set (the tier
// variant), n<seq> is written and in the tier before its sequence starts. And no refused SUBSCRIBE while replies are off: rproxy cannot
// ask Redis for the mode then, and takes a later CLIENT REPLY ON for
// refused, as it is when the subscription holds (subscribedContext).
// No BCAST tracking: Redis sends its invalidations when it next waits for
// input, so whether a sequence sees them depends on how its write was cut.
func TestStreamModeAsRedisRandomSequences(t *testing.T) {
	t.Run("tier for hot keys", func(t *testing.T) { streamModeAsRedis(t, false) })
	// Every key in the local tier, with client tracking's invalidations
	// late: reads outside stream mode (after a RESET) are served by it,
	// after writes made in stream mode.
	t.Run("every key in the tier", func(t *testing.T) { streamModeAsRedis(t, true) })
}

func streamModeAsRedis(t *testing.T, cacheAll bool) {
	servers := streamTestServers(t)
	p := proxytest.Start(t, servers[1].Addr, func(c *proxy.Config) {
		if cacheAll {
			c.HotKey.Prefixes = []string{"k", "n"}
			c.HotKey.Churn.Limit = 0
			// Invalidations late: a stream-mode write must drop its key
			// from the tier itself, before its reply.
			c.HotKey.TrackingDial = slowDial(2*time.Millisecond, 1<<16)
		}
	})
	if cacheAll {
		waitServing(t, p)
	}
	clients := [2]*rawClient{dialClient(t, servers[0].Addr), dialClient(t, p.Addr)}
	// The tier's hits in the sequences, not in the fills before them.
	var fill func(key string)
	var served, afterFill float64
	hits := func() float64 { return counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil) }
	if cacheAll {
		fill = func(key string) {
			served += hits() - afterFill
			for _, c := range clients {
				c.do("SET", key, "0")
			}
			cached(t, p, clients[1], key)
			afterFill = hits()
		}
	}
	compareStreamSequences(t, clients, nil, fill, sequenceSource(t, 1, 2), 300)
	if served += hits() - afterFill; cacheAll && served == 0 {
		t.Fatal("the tier served no read in the sequences: the variant tests nothing of it")
	} else if cacheAll {
		t.Logf("%v reads in the sequences served by the tier", served)
	}
}

// compareStreamSequences is TestStreamModeAsRedisRandomSequences's loop:
// seqs sequences of streamActedCommands and streamPlainCommands, and of
// outside (nil: none) while the session is not in stream mode, each ended
// by RESET, sent to clients[0] (Redis) and clients[1] (rproxy). With
// outside set, rproxy is in passthrough mode, which refuses AUTH in stream
// mode: none is drawn there. fill, if set, is called with each sequence's
// n before it starts.
func compareStreamSequences(t *testing.T, clients [2]*rawClient, outside [][]string, fill func(key string), rng *rand.Rand, seqs int) {
	t.Helper()
	acted, plain := streamActedCommands, streamPlainCommands
	withKey := func(cmd []string, seq int) []string { // keys of their own per sequence (above)
		if len(cmd) > 1 && (cmd[1] == "k" || cmd[1] == "n") {
			return append([]string{cmd[0], fmt.Sprintf("%s%d", cmd[1], seq)}, cmd[2:]...)
		}
		return cmd
	}
	var names []string
	defer func() {
		if t.Failed() {
			t.Logf("the sequence: %q", names)
		}
	}()
	for seq := 0; seq < seqs; seq++ {
		if fill != nil {
			fill(withKey([]string{"GET", "n"}, seq)[1])
		}
		var batch []byte
		names = names[:0]
		inMulti, replyOff, stream, bob := false, false, false, false
		for n := 1 + rng.IntN(10); n > 0; n-- {
			pool := append(slices.Clip(plain), acted...)
			if !stream {
				pool = append(pool, outside...)
			}
			if inMulti {
				pool = plain
			}
			cmd := withKey(pool[rng.IntN(len(pool))], seq)
			// A SUBSCRIBE Redis refuses while replies are off leaves rproxy
			// unable to ask for the mode (docs/commands.md): bob may use no
			// channel.
			refused := cmd[0] == "SUBSCRIBE" && cmd[1] == "forbidden" || bob && strings.HasSuffix(cmd[0], "SUBSCRIBE") && !strings.HasSuffix(cmd[0], "UNSUBSCRIBE")
			if replyOff && refused || stream && outside != nil && cmd[0] == "AUTH" {
				continue
			}
			joined := strings.Join(cmd, " ")
			switch joined {
			case "AUTH bob bobpw":
				bob = true
			case "AUTH alice alicepw", "HELLO 3 AUTH alice alicepw":
				bob = false
			case "MULTI":
				inMulti = true
			case "EXEC", "DISCARD":
				inMulti = false
			case "RESET":
				inMulti, replyOff, stream, bob = false, false, false, false
			case "CLIENT REPLY OFF":
				replyOff = true
			case "CLIENT REPLY ON":
				replyOff = false
			}
			stream = stream || entersStreamMode(joined)
			batch = resp.AppendCommandString(batch, cmd...)
			names = append(names, joined)
		}
		end := fmt.Sprintf("end-%d", seq)
		batch = resp.AppendCommandString(batch, "RESET")
		batch = resp.AppendCommandString(batch, withKey([]string{"GET", "n"}, seq)...) // out of stream mode: the tier's, when it holds n
		batch = resp.AppendCommandString(batch, "ECHO", end)
		var got [2]string
		for i, c := range clients {
			c.send(batch)
			got[i] = readUntil(t, c, fmt.Sprintf("$%d\r\n%s\r\n", len(end), end))
		}
		for i := range got { // HELLO's id: Redis's, or the session's; CLIENT INFO's db alone
			got[i] = helloIDField.ReplaceAllString(got[i], "id\r\n:ID")
			got[i] = clientInfoLine.ReplaceAllString(got[i], "CLIENT INFO db=$1")
		}
		if got[0] != got[1] {
			t.Fatalf("sequence %d %q:\nRedis:  %q\nrproxy: %q", seq, names, got[0], got[1])
		}
	}
}

// entersStreamMode reports whether rproxy puts a session in stream mode
// for cmd (docs/commands.md): a (un)subscribe, or CLIENT TRACKING, REPLY,
// CACHING, NO-TOUCH, NO-EVICT.
func entersStreamMode(cmd string) bool {
	for _, prefix := range []string{"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
		"CLIENT TRACKING", "CLIENT REPLY", "CLIENT CACHING", "CLIENT NO-TOUCH", "CLIENT NO-EVICT", "MONITOR"} {
		if strings.HasPrefix(cmd, prefix) {
			return true
		}
	}
	return false
}

// TestStreamModeAsRedisRandomSequencesPassthrough: the same with auth.mode
// passthrough, where the sequences also log in, outside stream mode (AUTH
// is refused there, docs/commands.md), as users whose channels differ:
// alice may use allowed*, bob no channel at all.
func TestStreamModeAsRedisRandomSequencesPassthrough(t *testing.T) {
	servers := streamTestServers(t)
	for _, srv := range servers {
		for _, rule := range [][]string{
			{"ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "&allowed*", "+@all"},
			{"ACL", "SETUSER", "bob", "on", ">bobpw", "~*", "resetchannels", "+@all"},
		} {
			if r := srv.Do(t, rule...); string(r) != "+OK\r\n" {
				t.Fatal(string(r))
			}
		}
	}
	p := proxytest.Start(t, servers[1].Addr, func(c *proxy.Config) { c.AuthPassthrough = true })
	clients := [2]*rawClient{dialClient(t, servers[0].Addr), dialClient(t, p.Addr)}
	outside := [][]string{{"AUTH", "alice", "alicepw"}, {"AUTH", "bob", "bobpw"}, {"AUTH", "bob", "wrong"},
		{"HELLO", "3", "AUTH", "alice", "alicepw"}, {"ACL", "WHOAMI"}}
	compareStreamSequences(t, clients, outside, nil, sequenceSource(t, 11, 12), 300)
}

// helloIDField is the id field of a HELLO reply.
var helloIDField = regexp.MustCompile(`id\r\n:\d+`)

// clientInfoLine is a CLIENT INFO reply (RESP2's bulk string or RESP3's
// verbatim one), its db in the group: the rest is the connection's own.
var clientInfoLine = regexp.MustCompile(`[$=]\d+\r\n(?:txt:)?id=\d+ [^\r]*? db=(\d+) [^\r]*\r\n`)

// readUntil reads c's replies until the one equal to last, and returns
// them all.
func readUntil(t *testing.T, c *rawClient, last string) string {
	t.Helper()
	var all strings.Builder
	for i := 0; i < 1000; i++ {
		r := string(c.read())
		all.WriteString(r)
		if r == last {
			return all.String()
		}
	}
	t.Fatalf("no %q in 1000 replies: %q", last, all.String())
	return ""
}

// TestStreamModeKeepsCachingFlag: after CLIENT CACHING yes (tracking in
// OPTIN mode) Redis tracks the client's next read, also when CLIENT
// commands come between: it drops the flag after any other command. Those
// rproxy answers in stream mode went to Redis as an unknown command, which
// dropped it: the read went untracked and its key's invalidation never
// came. A command rproxy answers that is not a CLIENT one (AUTH, a policy
// refusal) must drop it, as it does on Redis: the substitute once kept it
// for those too (found by TestStreamModeAsRedisRandomSequences). Each is
// compared with Redis directly from the read on.
func TestStreamModeKeepsCachingFlag(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, withPolicy(nil))
	tracked := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\noptin\r\n+PONG\r\n"
	for _, tc := range []struct {
		between []string
		want    string
	}{
		{[]string{"CLIENT", "GETREDIR"}, tracked}, {[]string{"CLIENT", "GETNAME"}, tracked}, {[]string{"CLIENT", "ID"}, tracked},
		{[]string{"CLIENT", "INFO"}, tracked}, {[]string{"CLIENT", "LIST"}, tracked}, {[]string{"CLIENT", "SETNAME", "x"}, tracked},
		{[]string{"AUTH", "nobody", "x"}, "+PONG\r\n"}, {[]string{"AUTH", "x"}, "+PONG\r\n"}, {[]string{"KEYS", "*"}, "+PONG\r\n"},
	} {
		between := tc.between
		var got [2]string
		for i, addr := range []string{rs.Addr, p.Addr} {
			c := dialClient(t, addr)
			for _, cmd := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "on", "OPTIN"}, {"CLIENT", "CACHING", "yes"}, between} {
				c.do(cmd...)
			}
			c.do("GET", "optin")
			dialClient(t, addr).do("SET", "optin", "x")
			c.send(resp.AppendCommandString(nil, "PING"))
			got[i] = readUntil(t, c, "+PONG\r\n")
			c.nc.Close()
		}
		if got[0] != tc.want {
			t.Fatalf("%v: Redis directly: %q, want %q", between, got[0], tc.want)
		}
		if got[1] != got[0] {
			t.Errorf("%v: through rproxy %q, want %q as from Redis", between, got[1], got[0])
		}
	}
}

// TestStreamModeKeepsAWatchFromBefore: a session that watched a key and
// then sent an (P|S)UNSUBSCRIBE of nothing (stream mode, which it left at
// once) lost its WATCH: rproxy reset the pinned connection, so an EXEC
// after the watched key changed ran (*0) where Redis aborts it (*-1).
// Found by TestStreamModeAsRedisLongSessions with RPROXY_SEQUENCE_SEED=2.
func TestStreamModeKeepsAWatchFromBefore(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	for _, unsub := range []string{"UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE"} {
		for _, changed := range []bool{false, true} {
			var got [2]string
			for i, addr := range []string{rs.Addr, p.Addr} {
				c := dialClient(t, addr)
				steps := [][]string{{"WATCH", "wk"}, {unsub}}
				if changed {
					steps = append(steps, []string{"SET", "wk", "v"})
				}
				got[i] = c.pipeline(append(steps, []string{"MULTI"}, []string{"PING"}, []string{"EXEC"})...)
				c.nc.Close()
			}
			if want := map[bool]string{false: "*1\r\n+PONG\r\n", true: "*-1\r\n"}[changed]; !strings.HasSuffix(got[0], want) {
				t.Fatalf("%s, key changed %v: Redis directly %q, want it to end %q", unsub, changed, got[0], want)
			}
			if got[1] != got[0] {
				t.Errorf("%s, key changed %v: through rproxy %q, Redis %q", unsub, changed, got[1], got[0])
			}
		}
	}
}

// TestStreamModeKeepsStateItDoesNotFollow: a SELECT sent in stream mode
// (RESP3, subscribed) was lost when an UNSUBSCRIBE then left the mode,
// so the next SET went to database 0 through rproxy (found by
// TestStreamModeAsRedisLongSessions with RPROXY_SEQUENCE_SEED=2); CLIENT
// NO-EVICT ON was lost the same way, and CLIENT INFO never showed its e
// flag, which RESET leaves on Redis.
func TestStreamModeKeepsStateItDoesNotFollow(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	var got [2]string
	for i, addr := range []string{rs.Addr, p.Addr} {
		c := dialClient(t, addr)
		c.do("HELLO", "3")
		c.pipeline([]string{"SUBSCRIBE", "ch"}, []string{"SELECT", "1"})
		got[i] = c.pipeline([]string{"UNSUBSCRIBE", "ch"}, []string{"SET", "sk", "v"}, []string{"GET", "sk"})
		c.nc.Close()
	}
	if got[1] != got[0] {
		t.Errorf("through rproxy %q, Redis %q", got[1], got[0])
	}
	// Both SETs are in database 1 of the one server.
	if n := dialClient(t, rs.Addr).pipeline([]string{"SELECT", "1"}, []string{"DBSIZE"}); n != "+OK\r\n:1\r\n" {
		t.Errorf("database 1 after both SETs: %q, want one key (the SET through rproxy went elsewhere?)", n)
	}
	if n := dialClient(t, rs.Addr).do("DBSIZE"); n != ":0\r\n" {
		t.Errorf("database 0: %q, want no key", n)
	}

	flags := regexp.MustCompile(`flags=[A-Za-z]+`)
	for _, steps := range [][][]string{
		{{"CLIENT", "NO-EVICT", "on"}, {"UNSUBSCRIBE"}},
		{{"CLIENT", "NO-EVICT", "on"}, {"RESET"}},
		{{"CLIENT", "NO-EVICT", "on"}, {"CLIENT", "NO-EVICT", "off"}, {"UNSUBSCRIBE"}},
		{{"CLIENT", "NO-EVICT", "maybe"}},
	} {
		var got [2]string
		for i, addr := range []string{rs.Addr, p.Addr} {
			c := dialClient(t, addr)
			c.pipeline(steps...)
			got[i] = flags.FindString(c.do("CLIENT", "INFO"))
			c.nc.Close()
		}
		if got[1] != got[0] || got[0] == "" {
			t.Errorf("%q then CLIENT INFO: through rproxy %q, Redis %q", steps, got[1], got[0])
		}
	}
}

// TestStreamModeSelectShowsInClientInfo: a SELECT changes the db CLIENT
// INFO and CLIENT LIST show, as on Redis, and one Redis refuses (out of
// range; RESP2's subscribed mode) does not; in stream mode (tracking,
// pub/sub) and outside it, pipelined in one write and one command at a
// time. Before 2026-11-29 a stream-mode session's db stayed what it was
// when the stream began, and a CLIENT INFO in the same write as a SELECT
// showed the db from before the write.
func TestStreamModeSelectShowsInClientInfo(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	dbOf := func(line string) string {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "db=") {
				return f
			}
		}
		return "no db= in " + strconv.Quote(line)
	}
	// The db of each CLIENT INFO among the replies, in order.
	dbs := func(replies []string) string {
		var out []string
		for _, r := range replies {
			if strings.Contains(r, "id=") {
				out = append(out, dbOf(r))
			} else {
				out = append(out, strings.SplitN(r, "\r\n", 2)[0])
			}
		}
		return strings.Join(out, " ")
	}
	script := [][]string{{"SELECT", "9"}, {"CLIENT", "INFO"}, {"SELECT", "99"}, {"CLIENT", "INFO"},
		{"SELECT", "3"}, {"SELECT", "77"}, {"SELECT", "x"}, {"CLIENT", "INFO"}, {"SELECT", "0"}, {"CLIENT", "INFO"}}
	run := func(addr string, pipelined, tracking bool) string {
		c := dialClient(t, addr)
		if tracking { // stream mode
			c.do("HELLO", "3")
			c.do("CLIENT", "TRACKING", "on")
		}
		var replies []string
		if pipelined {
			var batch []byte
			for _, cmd := range script {
				batch = resp.AppendCommandString(batch, cmd...)
			}
			c.send(batch)
			for range script {
				replies = append(replies, string(c.read()))
			}
		} else {
			for _, cmd := range script {
				replies = append(replies, c.do(cmd...))
			}
		}
		return dbs(replies)
	}
	for _, tracking := range []bool{false, true} {
		for _, pipelined := range []bool{false, true} {
			want, got := run(rs.Addr, pipelined, tracking), run(p.Addr, pipelined, tracking)
			if got != want {
				t.Errorf("tracking %v, pipelined %v: through rproxy %q, Redis %q", tracking, pipelined, got, want)
			}
		}
	}

	// A CLIENT INFO after a CLIENT CACHING is answered before Redis's reply
	// to a SELECT in the same read comes back (random sequence seed 112 of
	// TestStreamModeAsRedisLongSessions): a SELECT Redis refuses there must
	// not show.
	caching := [][]string{{"CLIENT", "NO-EVICT", "off"}, {"PUNSUBSCRIBE"}, {"SELECT", "99"}, {"CLIENT", "CACHING", "yes"}, {"CLIENT", "INFO"},
		{"SELECT", "5"}, {"CLIENT", "CACHING", "yes"}, {"CLIENT", "INFO"}}
	cachingDBs := func(addr string) string {
		c := dialClient(t, addr)
		return dbs(sendAll(c, caching...))
	}
	if want, got := cachingDBs(rs.Addr), cachingDBs(p.Addr); got != want {
		t.Errorf("SELECT, CLIENT CACHING, CLIENT INFO in stream mode: through rproxy %q, Redis %q", got, want)
	}

	// RESP2's subscribed mode: Redis refuses SELECT; another client's
	// CLIENT LIST shows the database the subscriber is in.
	listDB := func(addr string) string {
		sub := dialClient(t, addr)
		id := sub.id()
		sub.do("SELECT", "4")
		sub.do("SUBSCRIBE", "ch")
		if got := sub.do("SELECT", "6"); !strings.HasPrefix(got, "-ERR") {
			t.Fatalf("SELECT in subscribed mode = %q", got)
		}
		other := dialClient(t, addr)
		for _, line := range strings.Split(other.do("CLIENT", "LIST"), "\n") {
			if strings.Contains(line, "id="+id+" ") {
				return dbOf(line)
			}
		}
		return "no line for id " + id
	}
	if want, got := listDB(rs.Addr), listDB(p.Addr); got != want {
		t.Errorf("subscriber's CLIENT LIST db through rproxy %q, Redis %q", got, want)
	}
}

// TestStreamModeWatchSurvivesRefusedEnd: an EXEC or DISCARD without MULTI,
// which Redis refuses, leaves a WATCH made in stream mode in place, so the
// session keeps its connection when it then leaves the mode (SUBSCRIBE and
// UNSUBSCRIBE), and its next EXEC fails after another client wrote the
// key, as on Redis. Found by TestStreamModeAsRedisLongSessions with seed
// 10 (2026-11-29): rproxy took the refused DISCARD for the end of the
// WATCH, gave the connection back, and the EXEC ran.
func TestStreamModeWatchSurvivesRefusedEnd(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	for _, end := range []string{"DISCARD", "EXEC"} {
		run := func(addr string) string {
			c, other := dialClient(t, addr), dialClient(t, addr)
			out := c.pipeline([]string{"CLIENT", "TRACKING", "on"}, []string{"WATCH", "wk"}, []string{"CLIENT", "TRACKING", "off"})
			other.do("SET", "wk", "v")
			out += c.pipeline([]string{end}, []string{"SUBSCRIBE", "ch"})
			out += c.do("UNSUBSCRIBE")
			return out + c.pipeline([]string{"MULTI"}, []string{"PING"}, []string{"EXEC"})
		}
		if want, got := run(rs.Addr), run(p.Addr); got != want {
			t.Errorf("%s without MULTI: through rproxy %q, Redis %q", end, got, want)
		}
	}
}

// TestSelectInTransactionShowsInClientInfo: a SELECT queued in a
// transaction changes CLIENT INFO's db once EXEC ran it, as on Redis; one
// EXEC refused, or a DISCARD, leaves it. Each command in a write of its
// own (redis-cli). Before 2026-11-29 the db stayed what it was before the
// transaction.
func TestSelectInTransactionShowsInClientInfo(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	cmds := [][]string{{"MULTI"}, {"SELECT", "5"}, {"PING"}, {"EXEC"}, {"CLIENT", "INFO"},
		{"MULTI"}, {"SELECT", "99"}, {"EXEC"}, {"CLIENT", "INFO"},
		{"MULTI"}, {"SELECT", "7"}, {"DISCARD"}, {"CLIENT", "INFO"},
		{"MULTI"}, {"SELECT", "2"}, {"SELECT", "3"}, {"EXEC"}, {"CLIENT", "INFO"},
		{"SELECT", "4"}, {"MULTI"}, {"SELECT", "6"}, {"GET", "k"}, {"EXEC"}, {"CLIENT", "LIST", "ID", "0"}, {"CLIENT", "INFO"}}
	// One command per write; all in one write; and cut after each MULTI,
	// so that a SELECT queued in an earlier write is run by an EXEC sent
	// with the CLIENT INFO after it.
	shapes := map[string]func(c *rawClient) string{
		"one by one": func(c *rawClient) string {
			var out strings.Builder
			for _, cmd := range cmds {
				out.WriteString(c.do(cmd...))
			}
			return out.String()
		},
		"one write": func(c *rawClient) string { return c.pipeline(cmds...) },
		"cut after MULTI": func(c *rawClient) string {
			var out strings.Builder
			from := 0
			for i, cmd := range cmds {
				if cmd[0] == "MULTI" || i == len(cmds)-1 {
					out.WriteString(c.pipeline(cmds[from : i+1]...))
					from = i + 1
				}
			}
			return out.String()
		},
	}
	for name, shape := range shapes {
		run := func(addr string) string {
			c := dialClient(t, addr)
			c.do("CLIENT", "SETNAME", "tx") // CLIENT LIST ID 0 lists nobody, the same both ways
			return clientInfoLine.ReplaceAllString(shape(c), "db=$1")
		}
		if want, got := run(rs.Addr), run(p.Addr); got != want {
			t.Errorf("%s: through rproxy %q\nRedis %q", name, got, want)
		}
	}
}

// TestClientInfoAfterSelectLeavesInfoAlone: a CLIENT INFO made after the
// batch's replies (a SELECT before it in the same write) takes no upstream
// reply's place: the INFO after it still gets rproxy's Clients section
// (connected_clients counts sessions: 1 here, where Redis counts
// rproxy's own connections too).
func TestClientInfoAfterSelectLeavesInfoAlone(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	c := dialClient(t, p.Addr)
	c.send(resp.AppendCommandString(resp.AppendCommandString(resp.AppendCommandString(nil, "SELECT", "1"), "CLIENT", "INFO"), "INFO", "clients"))
	c.read()
	if r := string(c.read()); !strings.Contains(r, " db=1 ") {
		t.Fatalf("CLIENT INFO = %q, want db=1", r)
	}
	if r := string(c.read()); !strings.Contains(r, "connected_clients:1\r\n") {
		t.Fatalf("INFO clients = %q, want rproxy's connected_clients:1", r)
	}
}
