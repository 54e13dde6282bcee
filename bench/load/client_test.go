package load

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// replayConn is a net.Conn whose every Read returns the same canned bytes:
// the replies to one batch. Writes are discarded.
type replayConn struct {
	net.Conn // nil: only the methods below are used
	replies  []byte
}

func (c *replayConn) Read(p []byte) (int, error)       { return copy(p, c.replies), nil }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) RemoteAddr() net.Addr             { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return nil }

func newTestClient(t testing.TB, cfg Config, replies string) *client {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	gen, err := cfg.KeyGen()
	if err != nil {
		t.Fatal(err)
	}
	return newClient(0, 0, 1, &cfg, gen, &replayConn{replies: []byte(replies)}, time.Now())
}

// oneBatch is the body of client.run's loop.
func (c *client) oneBatch(t testing.TB) {
	var n int
	if c.open {
		n = c.planOpen(nil)
	} else {
		n = c.planClosed(nil)
	}
	c.out = c.out[:0]
	for i := range c.ops[:n] {
		c.out = c.appendOp(c.out, &c.ops[i])
	}
	sentAt := c.now()
	if _, err := c.conn.Write(c.out); err != nil {
		t.Fatal(err)
	}
	if err := c.readBatch(n, sentAt); err != nil {
		t.Fatal(err)
	}
}

// The hot path must not allocate: the generator shares a small machine
// with the server it measures.
func TestHotPathDoesNotAllocate(t *testing.T) {
	const pipeline = 8
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		reply string
	}{
		{"closed get", func(c *Config) {}, "$4\r\nabcd\r\n"},
		{"closed null", func(c *Config) {}, "$-1\r\n"},
		{"closed error", func(c *Config) {}, "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"},
		{"open set ttl zipf scrambled", func(c *Config) {
			c.Rate = 1e12 // always due: never sleeps
			c.ReadRatio, c.TTL = 0, 10
			c.Dist, c.Scramble = DistZipf, true
		}, "+OK\r\n"},
		{"hotset mix", func(c *Config) { c.Dist, c.ReadRatio = DistHotSet, 0.5 }, "+OK\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Clients, cfg.Pipeline = 1, pipeline
			tc.edit(&cfg)
			c := newTestClient(t, cfg, strings.Repeat(tc.reply, pipeline))
			c.oneBatch(t) // first use may size buffers and add an error word
			if allocs := testing.AllocsPerRun(200, func() { c.oneBatch(t) }); allocs != 0 {
				t.Errorf("%v allocations per batch, want 0", allocs)
			}
			// AllocsPerRun adds one warm-up run of its own.
			if want := int64(202 * pipeline); c.stats.ops != want || c.stats.hist.TotalCount() != want {
				t.Errorf("ops = %d, latencies %d, want %d", c.stats.ops, c.stats.hist.TotalCount(), want)
			}
		})
	}
}

func TestCommandsReproducible(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clients, cfg.Pipeline, cfg.ReadRatio, cfg.Dist = 2, 16, 0.5, DistZipf
	batch := func(id int, seed uint64) []byte {
		cfg.Seed = seed
		gen, err := cfg.KeyGen()
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(id, id, cfg.Clients, &cfg, gen, &replayConn{}, time.Now())
		var out []byte
		for i := range c.ops {
			out = c.appendOp(out, &c.ops[i])
		}
		return out
	}
	a := batch(0, 1)
	if !bytes.Equal(a, batch(0, 1)) {
		t.Error("same seed and client: different commands")
	}
	if bytes.Equal(a, batch(1, 1)) || bytes.Equal(a, batch(0, 2)) {
		t.Error("different client or seed: same commands")
	}
	if !bytes.Contains(a, []byte("$3\r\nGET\r\n$")) || !bytes.Contains(a, []byte("$3\r\nSET\r\n$")) {
		t.Errorf("want GETs and SETs, got %q", a)
	}
}

func TestReplyHelpers(t *testing.T) {
	for head, want := range map[string]string{
		"-ERR unknown command":  "ERR",
		"-WRONGTYPE Operation":  "WRONGTYPE",
		"-DENIED\r\n":           "DENIED",
		"-NOWORD":               "NOWORD",
		"-":                     "",
		"-LOADING Redis is lo…": "LOADING",
	} {
		if got := string(errorWord([]byte(head))); got != want {
			t.Errorf("errorWord(%q) = %q, want %q", head, got, want)
		}
	}
	for _, tc := range []struct {
		kind byte
		head string
		want bool
	}{
		{'$', "$-1\r\n", true},
		{'*', "*-1\r\n", true},
		{'_', "_\r\n", true},
		{'$', "$1\r\n-\r\n", false},
		{'$', "$0\r\n\r\n", false},
		{':', ":-1\r\n", false},
	} {
		if got := isNull(tc.kind, []byte(tc.head)); got != tc.want {
			t.Errorf("isNull(%q) = %v, want %v", tc.head, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"no addr":           func(c *Config) { c.Addr = "" },
		"no clients":        func(c *Config) { c.Clients = 0 },
		"no pipeline":       func(c *Config) { c.Pipeline = 0 },
		"no limit":          func(c *Config) { c.Duration, c.Requests = 0, 0 },
		"negative rate":     func(c *Config) { c.Rate = -1 },
		"bad dist":          func(c *Config) { c.Dist = "pareto" },
		"zipf s 0":          func(c *Config) { c.Dist, c.ZipfS = DistZipf, 0 },
		"no keys":           func(c *Config) { c.Keys = 0 },
		"too many hot keys": func(c *Config) { c.Dist, c.HotKeys = DistHotSet, c.Keys+1 },
		"hot fraction > 1":  func(c *Config) { c.Dist, c.HotFraction = DistHotSet, 1.5 },
		"read ratio > 1":    func(c *Config) { c.ReadRatio = 2 },
		"negative value":    func(c *Config) { c.ValueSize = -1 },
		"negative ttl":      func(c *Config) { c.TTL = -1 },
		"no timeout":        func(c *Config) { c.Timeout = 0 },
	} {
		c := DefaultConfig()
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
