package proxy_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestScriptDebugIsTheClientsOwn: SCRIPT DEBUG YES puts a connection in
// Lua debugging mode, where its next EVAL stops in the debugger and the
// connection's next commands are debugger commands; the forked session
// closes the connection at its end. It went to a shared connection: the
// next EVAL of any client stopped in the debugger, and every client's
// commands on that connection went to it. The debugging client now gets
// Redis's bytes, the close included, and another client's EVAL runs, as
// on Redis.
func TestScriptDebugIsTheClientsOwn(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	session := [][]string{
		{"SCRIPT", "DEBUG", "YES"}, {"EVAL", "redis.call('SET', KEYS[1], '1')\nreturn 7", "1", "dbg"},
		{"step"}, {"print"}, {"continue"},
	}
	var got [2]string
	for i, addr := range []string{rs.Addr, p.Addr} {
		debugger, other := dialClient(t, addr), dialClient(t, addr)
		for _, cmd := range session {
			debugger.send(resp.AppendCommandString(nil, cmd...))
			got[i] += string(debugger.read())
			if r := other.do("EVAL", "return 1", "0"); r != ":1\r\n" {
				t.Fatalf("%s: another client's EVAL after %q: %q, want :1", addr, cmd, r)
			}
		}
		got[i] += string(debugger.read()) // the script's own reply, after <endsession>
		debugger.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := debugger.rd.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the debugging session: %v, want the connection closed (EOF)", addr, err)
		}
	}
	if got[1] != got[0] {
		t.Fatalf("the debugging session through rproxy:\n%q\nwant as on Redis:\n%q", got[1], got[0])
	}
}
