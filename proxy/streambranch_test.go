package proxy_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// keyPerMaster returns, for each master of cl, a key prefix+n that it
// holds, with the master's address: the master that answers GET for it
// without MOVED.
func keyPerMaster(t *testing.T, cl *redistest.Cluster, prefix string) (keys, addrs []string) {
	t.Helper()
	for _, m := range cl.Masters() {
		r := dialClient(t, m.Addr)
		for n := 0; ; n++ {
			k := prefix + strconv.Itoa(n)
			if !strings.HasPrefix(r.do("GET", k), "-MOVED") {
				keys, addrs = append(keys, k), append(addrs, m.Addr)
				break
			}
		}
	}
	return keys, addrs
}

// writesInvalidate sets every key to "new" through w and requires c, which
// tracks them, to be told of each once, whichever master it is on.
func writesInvalidate(t *testing.T, c, w *rawClient, keys []string) {
	t.Helper()
	for _, k := range keys {
		w.do("SET", k, "new")
	}
	var got []string
	for range keys {
		got = append(got, readPush(t, c)...)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(keys)); !slices.Equal(got, want) {
		t.Fatalf("invalidations: %v, want %v", got, want)
	}
}

// clusterKeysPerMaster starts three masters and rproxy in front of them,
// and sets a key per master (keyPerMaster) to "v<i>" through w, a plain
// client of rproxy's.
func clusterKeysPerMaster(t *testing.T, prefix string, opts ...func(*proxy.Config)) (p *proxytest.Proxy, keys []string, w *rawClient) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 0)
	p = startClusterProxy(t, cl, opts...)
	keys, _ = keyPerMaster(t, cl, prefix)
	w = dialClient(t, p.Addr)
	for i, k := range keys {
		w.do("SET", k, "v"+strconv.Itoa(i))
	}
	return p, keys, w
}

// readPush reads one reply and requires it to be an invalidation push; it
// returns the keys it names.
func readPush(t *testing.T, c *rawClient) []string {
	t.Helper()
	raw := c.read()
	v, err := resp.Parse(raw)
	if err != nil || v.Kind != '>' || len(v.Elems) != 2 || string(v.Elems[0].Str) != "invalidate" {
		t.Fatalf("want an invalidate push, got %q (%v)", raw, err)
	}
	var keys []string
	for _, e := range v.Elems[1].Elems {
		keys = append(keys, string(e.Str))
	}
	return keys
}

// TestClusterTrackingAcrossMasters: a RESP3 client tracking keys through
// rproxy on a cluster reads keys of every master, in pipelines whose
// replies keep their order, and gets the invalidations of every master's
// keys, as from one Redis; in OPTIN mode, CLIENT CACHING YES and a MULTI
// of PTTL and GET (what rueidis sends for a cached read) track the key on
// its own master and nothing else is tracked. Before, every command for a
// key of another master than the session's first got "-ERR rproxy: slot N
// is on another master than this connection's" (rueidis and go-redis
// client-side caching failed so for two keys in three).
func TestClusterTrackingAcrossMasters(t *testing.T) {
	p, keys, w := clusterKeysPerMaster(t, "tr", withPolicy(nil)) // the shipped defaults: KEYS refused

	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	if got := c.do("CLIENT", "TRACKING", "ON"); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON: %q", got)
	}
	// Twice over every master in one pipeline: the replies in order.
	var cmds [][]string
	var want strings.Builder
	for range 2 {
		for i, k := range keys {
			cmds = append(cmds, []string{"GET", k})
			v := "v" + strconv.Itoa(i)
			want.WriteString("$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n")
		}
	}
	if got := c.pipeline(cmds...); got != want.String() {
		t.Fatalf("GET of every master's key, pipelined: %q, want %q", got, want.String())
	}
	// Another client's writes: one invalidation per key, whichever master.
	writesInvalidate(t, c, w, keys)
	// The session's own connections to the other masters are its: CLIENT
	// LIST through rproxy shows one client, tracking.
	if info := c.do("CLIENT", "INFO"); !strings.Contains(info, "flags=t") {
		t.Errorf("CLIENT INFO of the tracking client: %q", info)
	}

	// OPTIN, as rueidis reads a cached key: only the key asked for is
	// tracked, on its own master. The reply to a command sent after the
	// writes, on the same master, comes after any invalidation Redis sent.
	o := dialClient(t, p.Addr)
	o.do("HELLO", "3")
	o.do("CLIENT", "TRACKING", "ON", "OPTIN")
	for _, k := range keys {
		r := o.pipeline([]string{"CLIENT", "CACHING", "YES"}, []string{"MULTI"}, []string{"PTTL", k}, []string{"GET", k}, []string{"EXEC"})
		if want := "+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:-1\r\n$3\r\nnew\r\n"; r != want {
			t.Fatalf("CLIENT CACHING YES, MULTI, PTTL %s, GET %s, EXEC: %q, want %q", k, k, r, want)
		}
		if r := o.do("GET", k+"-untracked"); r != "_\r\n" {
			t.Fatalf("GET %s-untracked: %q", k, r)
		}
	}
	for _, k := range keys {
		w.do("SET", k, "newer")
		w.do("SET", k+"-untracked", "x")
		if push := readPush(t, o); !slices.Equal(push, []string{k}) {
			t.Fatalf("OPTIN: invalidation %v, want [%s]", push, k)
		}
		// Sent after both writes, answered on the same master: an
		// invalidation of the untracked key would come before it.
		if r := o.do("EXISTS", k+"-untracked"); r != ":1\r\n" {
			t.Fatalf("OPTIN: EXISTS %s-untracked: %q, want :1 (and no invalidation of it)", k, r)
		}
	}

	// A refusal inside a transaction sent on another master's connection
	// aborts it there, as on the session's own.
	key := keys[0]
	if r := o.pipeline([]string{"GET", "{" + keys[1] + "}x"}, []string{"GET", key}); strings.HasPrefix(r, "-") {
		t.Fatalf("GET: %q", r)
	}
	r := o.pipeline([]string{"MULTI"}, []string{"SET", key, "tx"}, []string{"KEYS", "*"}, []string{"EXEC"})
	if !strings.HasPrefix(r, "+OK\r\n+QUEUED\r\n-DENIED KEYS") || !strings.HasSuffix(r, "-EXECABORT Transaction discarded because of previous errors.\r\n") {
		t.Fatalf("MULTI, SET, KEYS (refused), EXEC on another master: %q", r)
	}
	if got := w.do("GET", key); got != "$5\r\nnewer\r\n" {
		t.Fatalf("the aborted transaction's SET ran: %s is %q", key, got)
	}

	// RESET leaves tracking and the other masters' connections; the
	// client goes on.
	if r := c.do("RESET"); r != "+RESET\r\n" {
		t.Fatalf("RESET: %q", r)
	}
	if r := c.pipeline([]string{"GET", keys[1]}, []string{"GET", keys[2]}); r != "$5\r\nnewer\r\n$5\r\nnewer\r\n" {
		t.Fatalf("GETs after RESET: %q", r)
	}
}

// TestClusterTrackingBranchLostClosesClient: when a tracking session's
// connection to another master ends, rproxy closes the client, whose cache
// would otherwise miss that master's invalidations for good (a client
// drops its cache when its connection ends).
func TestClusterTrackingBranchLostClosesClient(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, addrs := keyPerMaster(t, cl, "tl")
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	c.do("CLIENT", "TRACKING", "ON")
	c.pipeline([]string{"GET", keys[0]}, []string{"GET", keys[1]}, []string{"GET", keys[2]})
	// Keyless commands go to the session's first connection: after an
	// ECHO, its other connections are the tracked ones whose last command
	// is GET. Kill one.
	c.do("ECHO", "x")
	killed := false
	for _, addr := range addrs {
		m := dialClient(t, addr)
		for _, line := range strings.Split(m.do("CLIENT", "LIST"), "\n") {
			if killed || !strings.Contains(line, " flags=t ") || !strings.Contains(line, " cmd=get ") {
				continue
			}
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			killed = m.do("CLIENT", "KILL", "ID", id) == ":1\r\n"
		}
	}
	if !killed {
		t.Fatal("no connection of the session's to another master found")
	}
	c.expectClosed()
}

// TestClusterRESP3PubSubAcrossMasters: a RESP3 subscriber, whose session is
// in stream mode on one master, reads keys of every master in a pipeline
// (replies in order) and still gets its messages; tracking turned on later
// covers the masters it already reads from. Before, its reads of other
// masters' keys got "slot N is on another master".
func TestClusterRESP3PubSubAcrossMasters(t *testing.T) {
	p, keys, w := clusterKeysPerMaster(t, "ps")
	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	if r := c.do("SUBSCRIBE", "ps-ch"); !strings.HasPrefix(r, ">3\r\n$9\r\nsubscribe\r\n") {
		t.Fatalf("SUBSCRIBE: %q", r)
	}
	var cmds [][]string
	var want strings.Builder
	for i, k := range keys {
		cmds = append(cmds, []string{"GET", k})
		want.WriteString("$2\r\nv" + strconv.Itoa(i) + "\r\n")
	}
	if got := c.pipeline(cmds...); got != want.String() {
		t.Fatalf("GET of every master's key while subscribed: %q, want %q", got, want.String())
	}
	w.do("PUBLISH", "ps-ch", "hello")
	if got, want := string(c.read()), ">3\r\n$7\r\nmessage\r\n$5\r\nps-ch\r\n$5\r\nhello\r\n"; got != want {
		t.Fatalf("message: %q, want %q", got, want)
	}
	// Tracking turned on now reaches the connections to the other
	// masters too.
	if r := c.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON: %q", r)
	}
	c.pipeline(cmds...)
	writesInvalidate(t, c, w, keys)
}

// TestClusterTrackingWatchAcrossMasters: a tracking session's WATCH of
// another master's key holds there: the transaction after it goes to that
// master whole, so another client's write in between makes EXEC return a
// null, as on Redis, and without one EXEC runs. Before, the WATCH got
// "slot N is on another master" (go-redis's Watch with its client-side
// cache on failed so for two keys in three).
func TestClusterTrackingWatchAcrossMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	keys, _ := keyPerMaster(t, cl, "tw")
	w := dialClient(t, p.Addr)
	c := dialClient(t, p.Addr)
	doNoPush(t, c, "HELLO", "3")
	doNoPush(t, c, "CLIENT", "TRACKING", "ON")
	for _, k := range keys {
		w.do("SET", k, "1")
		// Interrupted: another client writes the watched key.
		if r := doNoPush(t, c, "WATCH", k); r != "+OK\r\n" {
			t.Fatalf("WATCH %s: %q", k, r)
		}
		if r := doNoPush(t, c, "GET", k); r != "$1\r\n1\r\n" {
			t.Fatalf("GET %s: %q", k, r)
		}
		w.do("SET", k, "2")
		r := pipelineNoPush(t, c, []string{"MULTI"}, []string{"SET", k, "from-tx"}, []string{"EXEC"})
		if !strings.HasPrefix(r, "+OK\r\n+QUEUED\r\n") || !strings.HasSuffix(r, "_\r\n") {
			t.Fatalf("WATCH %s, another client's SET, MULTI, SET, EXEC: %q, want EXEC's null", k, r)
		}
		if got := w.do("GET", k); got != "$1\r\n2\r\n" {
			t.Fatalf("%s after the aborted transaction: %q", k, got)
		}
		// Not interrupted: EXEC runs, the transaction in its own reads.
		doNoPush(t, c, "WATCH", k)
		for _, cmd := range [][]string{{"MULTI"}, {"SET", k, "from-tx"}} {
			if r := doNoPush(t, c, cmd...); !strings.HasPrefix(r, "+") {
				t.Fatalf("%v: %q", cmd, r)
			}
		}
		if r := doNoPush(t, c, "EXEC"); r != "*1\r\n+OK\r\n" {
			t.Fatalf("EXEC of %s's transaction: %q", k, r)
		}
		if got := w.do("GET", k); got != "$7\r\nfrom-tx\r\n" {
			t.Fatalf("%s after the transaction: %q", k, got)
		}
		// UNWATCH ends the watch where it was: a later write does not
		// abort the next transaction.
		doNoPush(t, c, "WATCH", k)
		if r := doNoPush(t, c, "UNWATCH"); r != "+OK\r\n" {
			t.Fatalf("UNWATCH: %q", r)
		}
		w.do("SET", k, "3")
		if r := pipelineNoPush(t, c, []string{"MULTI"}, []string{"GET", k}, []string{"EXEC"}); r != "+OK\r\n+QUEUED\r\n*1\r\n$1\r\n3\r\n" {
			t.Fatalf("MULTI, GET %s, EXEC after UNWATCH: %q", k, r)
		}
		// CLIENT REPLY OFF after the WATCH: the transaction still goes
		// where the WATCH went, and nothing is answered until REPLY ON.
		doNoPush(t, c, "WATCH", k)
		c.send(resp.AppendCommandString(nil, "CLIENT", "REPLY", "OFF"))
		for _, cmd := range [][]string{{"MULTI"}, {"SET", k, "quiet"}, {"EXEC"}} {
			c.send(resp.AppendCommandString(nil, cmd...))
		}
		if r := pipelineNoPush(t, c, []string{"CLIENT", "REPLY", "ON"}, []string{"GET", k}); r != "+OK\r\n$5\r\nquiet\r\n" {
			t.Fatalf("WATCH, CLIENT REPLY OFF, MULTI, SET, EXEC, CLIENT REPLY ON, GET %s: %q", k, r)
		}
		// A write sent while replies are off runs on its key's master.
		c.send(resp.AppendCommandString(nil, "CLIENT", "REPLY", "OFF"))
		c.send(resp.AppendCommandString(nil, "SET", k, "unanswered"))
		if r := pipelineNoPush(t, c, []string{"CLIENT", "REPLY", "ON"}, []string{"GET", k}); r != "+OK\r\n$10\r\nunanswered\r\n" {
			t.Fatalf("CLIENT REPLY OFF, SET %s, CLIENT REPLY ON, GET: %q", k, r)
		}
	}
}

// pipelineNoPush is rawClient.pipeline, pushes (invalidations) skipped.
func pipelineNoPush(t *testing.T, c *rawClient, cmds ...[]string) string {
	t.Helper()
	var batch []byte
	for _, cmd := range cmds {
		batch = resp.AppendCommandString(batch, cmd...)
	}
	c.send(batch)
	var replies strings.Builder
	for n := 0; n < len(cmds); {
		r := c.read()
		if r[0] == '>' {
			continue
		}
		replies.Write(r)
		n++
	}
	return replies.String()
}

// doNoPush is rawClient.do, pushes skipped.
func doNoPush(t *testing.T, c *rawClient, args ...string) string {
	t.Helper()
	return pipelineNoPush(t, c, args)
}

// TestClusterTrackingResetAcrossMasters: RESET ends what the session had
// on other masters' connections: run inside a transaction sent to one, it
// discards it (Redis runs RESET at once inside MULTI); and a later stream
// session (RESP3 pub/sub, no tracking) reads other masters' keys untracked,
// where the tracking it had before RESET was set up again on its new
// connections (no invalidation came before a later reply on them).
func TestClusterTrackingResetAcrossMasters(t *testing.T) {
	p, keys, w := clusterKeysPerMaster(t, "rs")
	for _, k := range keys {
		c := dialClient(t, p.Addr)
		doNoPush(t, c, "HELLO", "3")
		doNoPush(t, c, "CLIENT", "TRACKING", "ON")
		for _, cmd := range [][]string{{"WATCH", k}, {"MULTI"}, {"SET", k, "from-tx"}} {
			if r := doNoPush(t, c, cmd...); !strings.HasPrefix(r, "+") {
				t.Fatalf("%v: %q", cmd, r)
			}
		}
		if r := doNoPush(t, c, "RESET"); r != "+RESET\r\n" {
			t.Fatalf("RESET inside a transaction on %s's master: %q", k, r)
		}
		if r := c.do("EXEC"); r != "-ERR EXEC without MULTI\r\n" {
			t.Fatalf("EXEC after RESET: %q", r)
		}
		if got := w.do("GET", k); strings.Contains(got, "from-tx") {
			t.Fatalf("the transaction RESET discarded ran: %s is %q", k, got)
		}
	}

	c := dialClient(t, p.Addr)
	c.do("HELLO", "3")
	c.do("CLIENT", "TRACKING", "ON")
	for _, k := range keys {
		c.do("GET", k)
	}
	if r := c.do("RESET"); r != "+RESET\r\n" {
		t.Fatalf("RESET: %q", r)
	}
	c.do("HELLO", "3")
	c.do("SUBSCRIBE", "rs-ch")
	for _, k := range keys {
		if r := c.do("GET", k); strings.HasPrefix(r, "-") {
			t.Fatalf("GET %s while subscribed: %q", k, r)
		}
		w.do("SET", k, "changed")
		// Read on the same connection after the write: an invalidation
		// Redis sent would come first.
		if r := c.do("EXISTS", k); r != ":1\r\n" {
			t.Fatalf("EXISTS %s after another client's write, untracked: %q, want :1 and no invalidation", k, r)
		}
	}
}

// TestClusterRESP2UnsubscribedRunsEverywhere: a RESP2 connection that has
// unsubscribed from everything (or sent an UNSUBSCRIBE without ever
// subscribing) is an ordinary connection on Redis, which runs any command
// there. Through rproxy on a cluster the session stayed on one master's
// connection, and every command for another master's keys got "-ERR
// rproxy: slot N is on another master than this connection's" (Redis's
// Tcl suite in cluster mode: unit/pubsub's keyspace tests, on the client
// that had sent PUNSUBSCRIBE and UNSUBSCRIBE). While it is subscribed,
// commands other than the subscribed mode's are refused, as before.
func TestClusterRESP2UnsubscribedRunsEverywhere(t *testing.T) {
	p, keys, _ := clusterKeysPerMaster(t, "unsub")
	everyMaster := func(c *rawClient, what string) {
		t.Helper()
		var cmds [][]string
		var want strings.Builder
		for i, k := range keys {
			cmds = append(cmds, []string{"SET", k, "w" + strconv.Itoa(i)}, []string{"GET", k})
			want.WriteString("+OK\r\n$2\r\nw" + strconv.Itoa(i) + "\r\n")
		}
		if got := c.pipeline(cmds...); got != want.String() {
			t.Errorf("%s: SET and GET of every master's key = %q, want %q", what, got, want.String())
		}
	}

	c := dialClient(t, p.Addr)
	if got := c.pipeline([]string{"PUNSUBSCRIBE"}, []string{"UNSUBSCRIBE"}); got != "*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n" {
		t.Fatalf("PUNSUBSCRIBE, UNSUBSCRIBE = %q", got)
	}
	everyMaster(c, "after UNSUBSCRIBE")

	s := dialClient(t, p.Addr)
	s.send(resp.AppendCommandString(nil, "SUBSCRIBE", "ch"))
	s.readPrefixes("*3\r\n$9\r\nsubscribe\r\n")
	for _, k := range keys {
		// Redis's refusal on the pin's master; the slot error on the
		// others (a cluster node checks the slot first). Nothing runs.
		if got := s.do("SET", k, "subscribed"); !strings.HasPrefix(got, "-ERR Can't execute 'set'") && !strings.HasPrefix(got, "-ERR rproxy: slot ") {
			t.Errorf("SET %s while subscribed = %q, want a refusal", k, got)
		}
	}
	for i, k := range keys {
		if got, want := c.do("GET", k), "$2\r\nw"+strconv.Itoa(i)+"\r\n"; got != want {
			t.Errorf("GET %s after a SET refused in subscribed mode = %q, want %q", k, got, want)
		}
	}
	s.send(resp.AppendCommandString(nil, "UNSUBSCRIBE", "ch"))
	s.readPrefixes("*3\r\n$11\r\nunsubscribe\r\n")
	everyMaster(s, "after subscribing and unsubscribing")
}

// TestClusterKeyspaceNotificationsFromEveryMaster: a subscriber through
// rproxy on a cluster gets the keyspace and keyevent notifications of every
// master's keys, each once, as from one Redis, where a cluster node sends
// its own keys' only. A published message still comes once, and PUBLISH,
// PUBSUB NUMSUB and NUMPAT count as one Redis does. Redis's Tcl suite in
// cluster mode (unit/pubsub: 30 tests) found both: before, notifications
// came from the subscriber's one master, and PUBLISH counted only the
// subscribers whose connection was on its channel's master.
func TestClusterKeyspaceNotificationsFromEveryMaster(t *testing.T) {
	p, keys, w := clusterKeysPerMaster(t, "ks")
	if r := w.do("CONFIG", "SET", "notify-keyspace-events", "KEA"); r != "+OK\r\n" {
		t.Fatalf("CONFIG SET notify-keyspace-events = %q", r)
	}
	events := dialClient(t, p.Addr)
	events.send(resp.AppendCommandString(nil, "PSUBSCRIBE", "__keyevent@0__:*"))
	events.readPrefixes("*3\r\n$10\r\npsubscribe\r\n")
	all := dialClient(t, p.Addr)
	all.send(resp.AppendCommandString(nil, "PSUBSCRIBE", "*"))
	all.readPrefixes("*3\r\n$10\r\npsubscribe\r\n")
	channels := dialClient(t, p.Addr)
	for i, k := range keys {
		channels.send(resp.AppendCommandString(nil, "SUBSCRIBE", "__keyspace@0__:"+k, "plain"+strconv.Itoa(i)))
		channels.readPrefixes("*3\r\n$9\r\nsubscribe\r\n", "*3\r\n$9\r\nsubscribe\r\n")
	}
	// What each subscriber received, in any order (masters send apart).
	received := func(c *rawClient, n int) []string {
		t.Helper()
		var got []string
		for range n {
			v, err := resp.Parse(c.read())
			if err != nil || len(v.Elems) < 3 {
				t.Fatalf("want a message, got %v (%v)", v, err)
			}
			var parts []string
			for _, e := range v.Elems {
				parts = append(parts, string(e.Str))
			}
			got = append(got, strings.Join(parts, " "))
		}
		slices.Sort(got)
		return got
	}
	for _, k := range keys {
		w.do("SET", k, "x")
	}
	var wantEvents, wantAll, wantChannels []string
	for _, k := range keys {
		wantEvents = append(wantEvents, "pmessage __keyevent@0__:* __keyevent@0__:set "+k)
		wantAll = append(wantAll, "pmessage * __keyevent@0__:set "+k, "pmessage * __keyspace@0__:"+k+" set")
		wantChannels = append(wantChannels, "message __keyspace@0__:"+k+" set")
	}
	slices.Sort(wantEvents)
	slices.Sort(wantAll)
	slices.Sort(wantChannels)
	if got := received(events, len(keys)); !slices.Equal(got, wantEvents) {
		t.Errorf("PSUBSCRIBE __keyevent@0__:* got %q, want %q", got, wantEvents)
	}
	if got := received(all, 2*len(keys)); !slices.Equal(got, wantAll) {
		t.Errorf("PSUBSCRIBE * got %q, want %q", got, wantAll)
	}
	if got := received(channels, len(keys)); !slices.Equal(got, wantChannels) {
		t.Errorf("SUBSCRIBE __keyspace@0__:<key> got %q, want %q", got, wantChannels)
	}

	// A published message: once to each subscriber, counted once each.
	for i := range keys {
		ch := "plain" + strconv.Itoa(i)
		if r := w.do("PUBLISH", ch, "m"); r != ":2\r\n" {
			t.Errorf("PUBLISH %s = %q, want :2 (a channel and a pattern subscriber)", ch, r)
		}
		channels.readPrefixes("*3\r\n$7\r\nmessage\r\n$6\r\n" + ch)
		all.readPrefixes("*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$6\r\n" + ch)
	}
	if r := w.do("PUBSUB", "NUMPAT"); r != ":2\r\n" {
		t.Errorf("PUBSUB NUMPAT = %q, want :2", r)
	}
	if r := w.do("PUBSUB", "NUMSUB", "__keyspace@0__:"+keys[1], "plain1"); r != "*4\r\n$"+strconv.Itoa(len("__keyspace@0__:"+keys[1]))+"\r\n__keyspace@0__:"+keys[1]+"\r\n:1\r\n$6\r\nplain1\r\n:1\r\n" {
		t.Errorf("PUBSUB NUMSUB = %q, want 1 each", r)
	}
	// No copy of a published message came from another master: the next
	// messages are the notifications of the next writes.
	for _, k := range keys {
		w.do("DEL", k)
	}
	for _, m := range received(all, 2*len(keys)) {
		if !strings.Contains(m, "del") {
			t.Errorf("PSUBSCRIBE * got %q after the DELs, want their notifications only", m)
		}
	}
	received(events, len(keys))

	// Unsubscribed, the client is an ordinary one again: no notification,
	// and commands for every master's keys and for the whole data.
	events.send(resp.AppendCommandString(nil, "PUNSUBSCRIBE"))
	events.readPrefixes("*3\r\n$12\r\npunsubscribe\r\n")
	for _, k := range keys {
		if r := events.do("SET", k, "y"); r != "+OK\r\n" {
			t.Errorf("SET %s after PUNSUBSCRIBE = %q", k, r)
		}
	}
	if r := events.do("DBSIZE"); r != ":"+strconv.Itoa(len(keys))+"\r\n" {
		t.Errorf("DBSIZE after PUNSUBSCRIBE = %q, want every master's keys", r)
	}
}
