package proxy_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// TestCommandTableFollowsTheUpstream: Redis restarted under rproxy with
// a command it lacked at rproxy's start (as an upgrade, or a module
// loaded, brings new ones): rproxy loads the table again once the
// upstream's COMMAND COUNT differs, so the new command is handled for
// what it is. Here a blocking BLMPOP, which rproxy forwarded as unknown
// on the shared connection before, blocking every other client behind
// it, then waits on a connection of its own while another client's PING
// is answered at once.
func TestCommandTableFollowsTheUpstream(t *testing.T) {
	rs := redistest.Start(t, "--rename-command", "BLMPOP", "")
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.TableCheck = 20 * time.Millisecond })
	c := dialClient(t, p.Addr)
	tableSize := func() int {
		info := c.do("INFO", "proxy")
		_, rest, _ := strings.Cut(info, "command_table_commands:")
		n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\r\n", 2)[0]))
		return n
	}
	count := func() int {
		v, err := resp.Parse(rs.Do(t, "COMMAND", "COUNT"))
		if err != nil {
			t.Fatal(err)
		}
		return int(v.Int)
	}
	before := count()
	waitFor(t, "the table loaded from the upstream", func() bool { return tableSize() == before })

	rs.RestartWith(t) // BLMPOP back
	if count() != before+1 {
		t.Fatalf("COMMAND COUNT after the restart = %d, want %d", count(), before+1)
	}
	waitFor(t, "the table loaded again", func() bool { return tableSize() == before+1 })

	blocked := dialClient(t, p.Addr)
	blocked.send(resp.AppendCommandString(nil, "BLMPOP", "2", "1", "empty-list", "LEFT"))
	waitFor(t, "BLMPOP to block in Redis", func() bool {
		return strings.Contains(string(rs.Do(t, "CLIENT", "LIST")), "cmd=blmpop")
	})
	other := dialClient(t, p.Addr)
	start := time.Now()
	if r := other.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING = %q", r)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("another client's PING took %v behind a blocked BLMPOP: it shares its connection", took)
	}
}

// TestUnknownCommandChecksTheTable: a command rproxy's table lacks that
// Redis answers otherwise than "unknown command" has the table checked at
// once, not at the next TableCheck tick (an hour here): the second such
// command is handled for what it is.
func TestUnknownCommandChecksTheTable(t *testing.T) {
	rs := redistest.Start(t, "--rename-command", "BLMPOP", "")
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) { c.TableCheck = time.Hour })
	c := dialClient(t, p.Addr)
	tableSize := func() string {
		_, rest, _ := strings.Cut(c.do("INFO", "proxy"), "command_table_commands:")
		return strings.SplitN(rest, "\r\n", 2)[0]
	}
	waitFor(t, "the table loaded from the upstream", func() bool { return c.do("COMMAND", "COUNT") == ":"+tableSize()+"\r\n" })
	if r := c.do("NOSUCHCOMMAND"); !strings.HasPrefix(r, "-ERR unknown command") {
		t.Fatalf("NOSUCHCOMMAND = %q", r)
	}
	before := tableSize()
	rs.RestartWith(t) // BLMPOP back
	waitFor(t, "rproxy to reconnect", func() bool { return c.do("GET", "x") == "$-1\r\n" })
	if r := c.do("BLMPOP", "0.01", "1", "empty-list", "LEFT"); r != "*-1\r\n" {
		t.Fatalf("BLMPOP with a 10 ms timeout = %q", r)
	}
	waitFor(t, "the table loaded again", func() bool { return tableSize() != before })
	if r := c.do("COMMAND", "COUNT"); r != ":"+tableSize()+"\r\n" {
		t.Errorf("COMMAND COUNT %q, the table has %s", r, tableSize())
	}
}
