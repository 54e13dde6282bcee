package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// limit is the backlog_divert of startBacklogPool's pools.
const limit = 64 << 10

// startBacklogPool starts a stand-in that holds HOLD until release is
// closed (HOLDLONG until the test ends) and echoes ECHO, and a pool of
// conns shared connections to it with BacklogDivert limit and no
// StallDivert, so that only a backlog sends batches around.
func startBacklogPool(t *testing.T, conns int, release <-chan struct{}) (*fakeRedis, *Pool) {
	t.Helper()
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	f := startFake(t, func(args [][]byte) string {
		switch strings.ToUpper(string(args[0])) {
		case "HOLD":
			<-release
		case "HOLDLONG":
			<-never
		case "ECHO":
			return echoReply(args)
		}
		return "+OK\r\n"
	})
	p := testPool(t, f.ln.Addr().String(), 2, func(c *Config) {
		c.Connections, c.StallDivert, c.BacklogDivert, c.Timeout = conns, 0, limit, 30*time.Second
	})
	return f, p
}

// TestBacklogDivertSendsSmallBatchesAround: a shared connection holding
// BacklogDivert bytes of commands not yet answered (here a large ECHO
// behind a command the server holds) no longer makes a small batch wait
// for all of them: once the spare is up, the small batch goes there and
// is answered while the backlog still waits. A large batch still waits
// its turn on the shared connection, and so does a small batch whose
// previous use got large replies (a session reading large values: its
// next replies are expected to be as large). The backlogs are counted back to
// zero when their replies come, and when the connection is lost; the
// spare is closed once nothing has gone around a backlog for spareQuiet.
func TestBacklogDivertSendsSmallBatchesAround(t *testing.T) {
	release := make(chan struct{})
	f, p := startBacklogPool(t, 1, release)
	shared, spare := p.conns[0], p.spares[0].c

	mid := strings.Repeat("m", limit/16+1)
	reader := NewBatch()
	reader.Add(resp.AppendCommandString(nil, "ECHO", mid))
	p.Do(reader)
	reader.ResetKeep()
	reader.Add(resp.AppendCommandString(nil, "ECHO", "r"))

	big := strings.Repeat("v", 100<<10)
	held := make(chan []string, 1)
	go func() { held <- do(p, []string{"HOLD"}, []string{"ECHO", big}) }()
	waitFor(t, "the shared connection's backlog", func() bool { return shared.backlog.Load() >= limit })

	// The first small batch starts the spare, and waits behind the
	// backlog if the spare is not up yet: it is not waited for.
	first := make(chan []string, 1)
	go func() { first <- do(p, []string{"ECHO", "first"}) }()
	waitFor(t, "the spare up", func() bool { return spare.up() })

	diverted := metricValue(t, p.metrics.diverted.backlog)
	small := make(chan []string, 1)
	go func() { small <- do(p, []string{"ECHO", "small"}) }()
	select {
	case r := <-small:
		if r[0] != "$5\r\nsmall\r\n" {
			t.Fatalf("small batch around the backlog: %q", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a small batch waited behind the shared connection's backlog")
	}
	if got := metricValue(t, p.metrics.diverted.backlog); got != diverted+1 {
		t.Errorf("diverted_batches_total{reason=backlog} %v, want %v", got, diverted+1)
	}

	// A batch of more than a sixteenth of the mark waits its turn.
	before := shared.backlog.Load()
	large := make(chan []string, 1)
	go func() { large <- do(p, []string{"ECHO", mid}) }()
	waitFor(t, "the large batch queued on the shared connection", func() bool { return shared.backlog.Load() > before })
	// So does a small one expecting large replies.
	before = shared.backlog.Load()
	read := make(chan struct{})
	go func() { p.Do(reader); close(read) }()
	waitFor(t, "the reader's batch queued on the shared connection", func() bool { return shared.backlog.Load() > before })
	select {
	case r := <-large:
		t.Fatalf("a large batch went around the backlog: %.20q", r)
	case <-read:
		t.Fatalf("a batch expecting large replies went around the backlog: %q", reader.Reply(0))
	default:
	}

	close(release)
	if r := <-held; r[0] != "+OK\r\n" || r[1] != "$102400\r\n"+big+"\r\n" {
		t.Fatalf("held batch: %.40q", r)
	}
	if r := <-first; r[0] != "$5\r\nfirst\r\n" {
		t.Fatalf("first small batch: %q", r)
	}
	if r := <-large; len(r[0]) != len(mid)+len("$4097\r\n\r\n") {
		t.Fatalf("large batch: %.20q", r)
	}
	if <-read; string(reader.Reply(0)) != "$1\r\nr\r\n" {
		t.Fatalf("the reader's batch: %q", reader.Reply(0))
	}
	if b := shared.backlog.Load() + spare.backlog.Load(); b != 0 {
		t.Fatalf("backlog %d bytes with every reply in, want 0", b)
	}
	// The watcher ticks once a second here (Timeout/10, at most 1 s) and
	// closes the spare on the tick after a whole spareQuiet without a
	// divert: 2-4 s, which a loaded machine can stretch past waitFor's 5.
	for deadline := time.Now().Add(20 * time.Second); spare.up(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the spare still up 20 s after the last batch went around a backlog")
		}
	}

	// A lost connection's batches leave its backlog with it.
	lost := make(chan []string, 1)
	go func() { lost <- do(p, []string{"HOLDLONG"}, []string{"ECHO", big}) }()
	waitFor(t, "the backlog again", func() bool { return shared.backlog.Load() >= limit })
	f.killConns()
	if r := <-lost; !strings.HasPrefix(r[0], "-") {
		t.Fatalf("batch on a lost connection: %.40q", r)
	}
	if b := shared.backlog.Load(); b != 0 {
		t.Fatalf("backlog %d bytes after the connection was lost, want 0", b)
	}
}

// TestBacklogDivertToAnotherSharedConnection: with two shared connections
// taken in turn, a small batch whose turn falls on the one holding a
// backlog goes to the other, which has room; no spare is needed. Without
// the divert every other batch would wait behind the held one.
func TestBacklogDivertToAnotherSharedConnection(t *testing.T) {
	release := make(chan struct{})
	_, p := startBacklogPool(t, 2, release)
	// Ready is one connection up; the divert needs the other one too.
	waitFor(t, "both shared connections up", func() bool { return p.conns[0].up() && p.conns[1].up() })
	held := make(chan []string, 1)
	go func() { held <- do(p, []string{"HOLD"}, []string{"ECHO", strings.Repeat("v", 100<<10)}) }()
	waitFor(t, "a shared connection's backlog", func() bool {
		return p.conns[0].backlog.Load() >= limit || p.conns[1].backlog.Load() >= limit
	})
	for i := range 6 {
		done := make(chan []string, 1)
		go func() { done <- do(p, []string{"ECHO", "small"}) }()
		select {
		case r := <-done:
			if r[0] != "$5\r\nsmall\r\n" {
				t.Fatalf("batch %d: %q", i, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("batch %d waited behind the other connection's backlog", i)
		}
	}
	if got := metricValue(t, p.metrics.diverted.backlog); got < 1 {
		t.Errorf("diverted_batches_total{reason=backlog} %v, want at least 1", got)
	}
	if sp := p.spares[0].c; sp.up() {
		t.Error("a spare was dialled while a shared connection had room")
	}
	close(release)
	if r := <-held; r[0] != "+OK\r\n" {
		t.Fatalf("held batch: %.40q", r)
	}
}
