package upstream

import (
	"testing"
	"time"

	"github.com/rproxy/rproxy/resp"
)

func TestOwnCommandsHideWhatWasRecordedInOrder(t *testing.T) {
	now := time.Unix(1000, 0)
	o := NewOwnCommands(func() time.Time { return now })
	o.noteAddr("a:1", "ROLE") // long before the MONITOR: not in its stream
	now = now.Add(ownRecentSpan + time.Millisecond)
	m := o.Monitor()
	m.Acked()
	o.noteAddr("a:1", "RESET")
	o.noteAddr("a:1", "ECHO")
	o.noteAddr("b:2", "ROLE")
	steps := []struct {
		addr, name string
		hide       bool
	}{
		{"a:1", "ROLE", false},  // recorded before the view: a client's
		{"c:3", "RESET", false}, // another address
		{"a:1", "reset", true},
		{"a:1", "ECHO", true},
		{"a:1", "ECHO", false}, // a client's, after the recorded one
		{"b:2", "ROLE", true},
		{"b:2", "ROLE", false},
	}
	for i, s := range steps {
		if got := m.Hide(s.addr, s.name); got != s.hide {
			t.Fatalf("step %d: Hide(%s, %s) = %v, want %v", i, s.addr, s.name, got, s.hide)
		}
	}
	// A second MONITOR's view hides the same commands again: each stream
	// shows them.
	m2 := o.Monitor()
	m2.Acked()
	o.noteAddr("a:1", "RESET")
	if !m.Hide("a:1", "RESET") || !m2.Hide("a:1", "RESET") {
		t.Fatal("a RESET recorded after both views began is not hidden in each")
	}
}

func TestOwnCommandsPassOverWhatRedisDoesNotShow(t *testing.T) {
	o := NewOwnCommands(nil)
	m := o.Monitor()
	m.Acked()
	o.noteAddr("a:1", "AUTH") // say this Redis shows no AUTH
	o.noteAddr("a:1", "ROLE")
	if !m.Hide("a:1", "ROLE") {
		t.Fatal("ROLE after an AUTH Redis did not show is not hidden")
	}
	if m.Hide("a:1", "AUTH") {
		t.Fatal("an AUTH after the ROLE (a client's) is hidden")
	}
}

func TestOwnCommandsBetweenMonitorAndItsAck(t *testing.T) {
	o := NewOwnCommands(nil)
	m := o.Monitor()
	o.noteAddr("a:1", "RESET") // may have run before the MONITOR
	o.noteAddr("b:2", "RESET")
	m.Acked()
	// It showed: it comes first from its address.
	if !m.Hide("a:1", "RESET") {
		t.Fatal("a RESET recorded before the +OK, first from its address, is not hidden")
	}
	// It ran before the MONITOR: a client's line came first, and a
	// client's RESET after it shows.
	if m.Hide("b:2", "GET") {
		t.Fatal("GET hidden")
	}
	if m.Hide("b:2", "RESET") {
		t.Fatal("a client's RESET, after another line from its address, is hidden")
	}
}

func TestOwnCommandsJustBeforeTheMonitor(t *testing.T) {
	now := time.Unix(1000, 0)
	o := NewOwnCommands(func() time.Time { return now })
	o.noteAddr("a:1", "ROLE") // long before: not in the stream
	now = now.Add(ownRecentSpan + time.Millisecond)
	o.noteAddr("a:1", "ROLE") // a spare's dial just before the view
	o.noteAddr("b:2", "ROLE")
	m := o.Monitor()
	m.Acked()
	if !m.Hide("a:1", "ROLE") {
		t.Fatal("a ROLE recorded just before the MONITOR, first from its address, is not hidden")
	}
	if m.Hide("a:1", "ROLE") {
		t.Fatal("a second ROLE (the client's) is hidden")
	}
	if m.Hide("b:2", "GET") || m.Hide("b:2", "ROLE") {
		t.Fatal("a line after a client's from the same address is hidden")
	}
}

func TestOwnCommandsForgetTheOld(t *testing.T) {
	now := time.Unix(1000, 0)
	o := NewOwnCommands(func() time.Time { return now })
	m := o.Monitor()
	m.Acked()
	o.noteAddr("a:1", "ROLE")
	now = now.Add(ownCommandsAge + time.Second)
	o.noteAddr("b:2", "ROLE") // forgets the first
	if m.Hide("a:1", "ROLE") {
		t.Fatal("a command older than ownCommandsAge is still hidden")
	}
	if !m.Hide("b:2", "ROLE") {
		t.Fatal("the new one is not hidden")
	}
	for range ownCommandsMax + 10 {
		o.noteAddr("c:3", "RESET")
	}
	o.mu.Lock()
	n, kept := len(o.order), len(o.byAddr["c:3"])
	o.mu.Unlock()
	if n > ownCommandsMax || kept > ownCommandsMax {
		t.Fatalf("%d commands remembered (%d for one address), want at most %d", n, kept, ownCommandsMax)
	}
}

func TestOwnCommandsNilRecordsNothing(t *testing.T) {
	var o *OwnCommands
	o.note(nil, roleCmd)
	m := o.Monitor()
	m.Acked()
	if m.Hide("a:1", "ROLE") {
		t.Fatal("a nil record hides")
	}
}

func TestCommandName(t *testing.T) {
	for _, c := range []struct {
		cmd  []byte
		want string
	}{
		{roleCmd, "ROLE"},
		{resp.AppendCommandString(nil, "hello", "3", "AUTH", "u", "p"), "HELLO"},
		{[]byte("*1\r\n$4\r\nRO"), ""},
		{[]byte("PING\r\n"), ""},
		{nil, ""},
	} {
		if got := commandName(c.cmd); got != c.want {
			t.Errorf("commandName(%q) = %q, want %q", c.cmd, got, c.want)
		}
	}
}
