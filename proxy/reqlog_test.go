package proxy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// noSecrets fails if any logged message or field holds "secret": tests
// put it in every key, value and argument.
func noSecrets(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	for _, e := range logs.All() {
		if line := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(line, "secret") {
			t.Errorf("a log entry holds an argument or value: %s", line)
		}
	}
}

// Request logging, switched at run time: each client batch is one debug
// line with the client's address, session id, command names, count,
// duration and outcome; arguments, values and Redis's error messages
// (which may quote arguments) never appear.
func TestRequestLog(t *testing.T) {
	rs := redistest.Start(t)
	core, logs := observer.New(zapcore.DebugLevel)
	p := proxytest.StartLogged(t, zap.New(core), rs.Addr, withPolicy(nil))
	c := dialClient(t, p.Addr)
	batches := func() []observer.LoggedEntry { return logs.FilterMessage("client batch").All() }
	c.do("SET", "secret-key", "secret-value")
	if n := len(batches()); n != 0 {
		t.Fatalf("%d batch lines with request logging off", n)
	}

	p.Server.SetRequestLog(true)
	var pipe []byte
	for _, cmd := range [][]string{
		{"SET", "secret-key", "secret-value"},
		{"GET", "secret-key"},
		{"LPUSH", "secret-key", "secret-element"}, // WRONGTYPE
		{"NOSUCHCMD", "secret-arg"},               // Redis quotes the argument
		{"KEYS", "secret*"},                       // denied by the default policy
	} {
		pipe = resp.AppendCommandString(pipe, cmd...)
	}
	c.send(pipe)
	for range 5 {
		c.read()
	}
	got := batches()
	if len(got) != 1 {
		t.Fatalf("%d batch lines for one pipeline, want 1: %v", len(got), got)
	}
	e := got[0]
	f := e.ContextMap()
	if e.Level != zapcore.DebugLevel || f["client"] != c.nc.LocalAddr().String() || f["id"] == nil ||
		f["count"] != int64(5) || f["outcome"] != "error_replies" || f["errors"] != int64(3) ||
		f["upstream"] != int64(4) || f["refused"] != int64(1) || f["duration_seconds"] == nil {
		t.Errorf("batch line: level %v, fields %v", e.Level, f)
	}
	if names, _ := f["commands"].([]any); !slices.Equal(names, []any{"set", "get", "lpush", "unknown", "keys"}) {
		t.Errorf("commands = %#v", f["commands"])
	}
	c.do("GET", "secret-key")
	if got := batches(); len(got) != 2 || got[1].ContextMap()["outcome"] != "ok" {
		t.Fatalf("second batch: %v", got)
	}

	p.Server.SetRequestLog(false)
	c.do("GET", "secret-key")
	if n := len(batches()); n != 2 {
		t.Fatalf("%d batch lines after turning request logging off, want 2", n)
	}
	noSecrets(t, logs)
}

// With the logger above debug, request logging on writes nothing.
func TestRequestLogNeedsDebugLevel(t *testing.T) {
	rs := redistest.Start(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := proxytest.StartLogged(t, zap.New(core), rs.Addr, func(c *proxy.Config) { c.LogRequests = true })
	c := dialClient(t, p.Addr)
	c.do("PING")
	if n := logs.FilterMessage("client batch").Len(); n != 0 {
		t.Fatalf("%d batch lines at info level", n)
	}
}

// Errors on a client's path name the client and the command, never its
// arguments: a failed AUTH, and a client closed for an input limit.
func TestErrorLogsNameClientAndCommand(t *testing.T) {
	rs := redistest.Start(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := proxytest.StartLogged(t, zap.New(core), rs.Addr, func(c *proxy.Config) {
		c.Users = proxy.Users{"default": sha("pw")}
		c.MaxBulkLen = 1024
	})
	c := dialClient(t, p.Addr)
	if r := c.do("AUTH", "secret-password"); !strings.HasPrefix(r, "-WRONGPASS") {
		t.Fatalf("AUTH with a wrong password = %q", r)
	}
	failed := logs.FilterMessage("client authentication failed").All()
	if len(failed) != 1 || failed[0].ContextMap()["client"] != c.nc.LocalAddr().String() || failed[0].ContextMap()["command"] != "auth" {
		t.Fatalf("authentication failure log: %v", failed)
	}
	c.do("AUTH", "pw")
	c.do("GET", "secret-key")
	c.send([]byte("*3\r\n$3\r\nSET\r\n$10\r\nsecret-key\r\n$5000\r\n"))
	c.expectClosed()
	waitFor(t, "the close logged", func() bool { return logs.FilterMessageSnippet("client closed").Len() > 0 })
	closed := logs.FilterMessageSnippet("client closed").All()[0].ContextMap()
	if closed["client"] != c.nc.LocalAddr().String() || closed["last_command"] != "get" {
		t.Fatalf("input limit close log: %v", closed)
	}
	noSecrets(t, logs)
}
