package upstream

import (
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// OwnCommands records the commands rproxy sends on its own upstream
// connections, which no client sent: a new connection's handshake (HELLO,
// AUTH, Setup, the ROLE that confirms a master) and a lent connection's
// reset on its return (RESET, the handshake again, an ECHO marker). Redis
// shows them in MONITOR; a MONITOR relay hides them (OwnMonitor), as a
// client connected to Redis directly would not see them.
//
// Each command is recorded, before it is sent, under the connection's local
// address (its address as Redis's MONITOR line gives it) with a sequence
// number. On one connection they precede every client command that follows
// them, so a MONITOR that began before they were recorded shows them as
// that address's next lines, in order.
type OwnCommands struct {
	now func() time.Time

	mu     sync.Mutex
	seq    uint64
	byAddr map[string][]ownCommand
	order  []ownRef // oldest first, to forget the old ones
}

type ownCommand struct {
	seq  uint64
	name string // the command's name, upper case
}

type ownRef struct {
	addr string
	seq  uint64
	at   time.Time
}

// ownCommandsMax and ownCommandsAge bound what OwnCommands remembers:
// commands older than ownCommandsAge, or beyond the last ownCommandsMax,
// are forgotten (a MONITOR so far behind shows them).
const (
	ownCommandsMax = 4096
	ownCommandsAge = time.Minute
)

// NewOwnCommands returns an empty record; now nil means time.Now.
func NewOwnCommands(now func() time.Time) *OwnCommands {
	if now == nil {
		now = time.Now
	}
	return &OwnCommands{now: now, byAddr: map[string][]ownCommand{}}
}

// note records cmd (a RESP command) as about to be sent on nc. A nil o
// records nothing.
func (o *OwnCommands) note(nc net.Conn, cmd []byte) {
	if o == nil || nc == nil {
		return
	}
	name := commandName(cmd)
	if name == "" {
		return
	}
	o.noteAddr(nc.LocalAddr().String(), name)
}

func (o *OwnCommands) noteAddr(addr, name string) {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.order) > 0 && (len(o.order) >= ownCommandsMax || now.Sub(o.order[0].at) > ownCommandsAge) {
		o.forget(o.order[0])
		o.order = o.order[1:]
	}
	o.seq++
	o.byAddr[addr] = append(o.byAddr[addr], ownCommand{seq: o.seq, name: name})
	o.order = append(o.order, ownRef{addr: addr, seq: o.seq, at: now})
}

func (o *OwnCommands) forget(r ownRef) {
	cmds := o.byAddr[r.addr]
	if len(cmds) > 0 && cmds[0].seq == r.seq {
		cmds = cmds[1:]
	}
	if len(cmds) == 0 {
		delete(o.byAddr, r.addr)
		return
	}
	o.byAddr[r.addr] = cmds
}

// Seq is the number of the last command recorded: a MONITOR that Redis
// acknowledged before Seq was read shows every command recorded after it.
func (o *OwnCommands) Seq() uint64 {
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seq
}

// OwnMonitor is one MONITOR session's view of OwnCommands: which of the
// recorded commands its stream has shown so far.
type OwnMonitor struct {
	own *OwnCommands
	// sent: Seq when the MONITOR was sent (less the commands recorded
	// ownRecentSpan before); acked: when its +OK was read. A command
	// recorded after acked shows in the stream; one recorded between the
	// two may have run before the MONITOR and not show.
	sent, acked uint64
	shown       map[string]uint64 // by address: the last recorded command hidden
	clientLine  map[string]bool   // by address: a line not hidden came
}

// ownRecentSpan: a view of a MONITOR about to be sent takes the commands
// recorded this long before it as sent after it (the commands a new
// connection's handshake sends are recorded once it is connected, and a
// session dials its MONITOR's connection, and a spare, just before).
const ownRecentSpan = time.Second

// Monitor starts a view for a MONITOR about to be sent; Acked marks its
// +OK read.
func (o *OwnCommands) Monitor() *OwnMonitor {
	m := &OwnMonitor{own: o, shown: map[string]uint64{}, clientLine: map[string]bool{}}
	if o == nil {
		return m
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	m.sent, m.acked = o.seq, o.seq
	since := o.now().Add(-ownRecentSpan)
	if i, _ := slices.BinarySearchFunc(o.order, since, func(r ownRef, t time.Time) int { return r.at.Compare(t) }); i < len(o.order) {
		m.sent = o.order[i].seq - 1
	}
	return m
}

// Acked marks the MONITOR's +OK read: what was recorded from now on shows
// in its stream.
func (m *OwnMonitor) Acked() {
	if m != nil {
		m.acked = m.own.Seq()
	}
}

// Hide reports whether a MONITOR line's command, sent from addr (the
// line's client address) and named name, is one of the recorded commands:
// the first one recorded for addr, after the view began and after the
// last one it hid there, that has this name. Those recorded before it are
// passed over: Redis shows none of some commands (an admin command, AUTH
// in some versions), and a client's command of such a name does not show
// either. One recorded between the MONITOR's sending and its +OK, which
// may have run before the MONITOR, matches only while no other line from
// addr has come: if it shows, it comes first from addr.
func (m *OwnMonitor) Hide(addr, name string) bool {
	if m == nil || m.own == nil {
		return false
	}
	o := m.own
	o.mu.Lock()
	defer o.mu.Unlock()
	cmds := o.byAddr[addr]
	if len(cmds) == 0 {
		return false
	}
	after := max(m.sent, m.shown[addr])
	for _, c := range cmds {
		if c.seq <= after || c.seq <= m.acked && m.clientLine[addr] {
			continue
		}
		if strings.EqualFold(c.name, name) {
			if len(m.shown) >= ownCommandsMax {
				clear(m.shown)
			}
			m.shown[addr] = c.seq
			return true
		}
	}
	if len(m.clientLine) >= ownCommandsMax {
		clear(m.clientLine)
	}
	m.clientLine[addr] = true
	return false
}

// commandName is the upper-cased first argument of a RESP command
// (*N\r\n$L\r\nNAME...), or "" when cmd is not one.
func commandName(cmd []byte) string {
	_, rest, ok := resp.Header(cmd, '*')
	if !ok {
		return ""
	}
	n, rest, ok := resp.Header(rest, '$')
	if !ok || len(rest) < n {
		return ""
	}
	return strings.ToUpper(string(rest[:n]))
}
