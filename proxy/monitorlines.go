package proxy

import (
	"bytes"
	"sync"
	"time"

	"github.com/rproxy/rproxy/upstream"
)

// monitorLines is what a session in MONITOR mode is not shown of the lines
// the masters send: rproxy's own housekeeping (Server.ownMonitorCommand), the
// commands it sends on its own connections (the handshake of a new one, the
// reset of a lent one: upstream.OwnCommands) and, on a cluster, all but the
// first line of a command rproxy sent to every master (fanOutCommands:
// CONFIG SET, FLUSHALL, INFO...), which each master shows, where one Redis
// would show one line. Its state is the session's: the pin's copy goroutine
// and the branches' ask it at once.
type monitorLines struct {
	s      *Server
	mu     sync.Mutex
	copies map[string]fanOutCopies // by the command as MONITOR shows it
	// own is the view of upstream.OwnCommands, begun before the MONITOR
	// is sent and acknowledged at the first line, its +OK (acked).
	own   *upstream.OwnMonitor
	acked sync.Once
}

// fanOutCopies counts the lines of one command sent to every master.
type fanOutCopies struct {
	seen int
	at   time.Time // of the first
}

// fanOutLineSpan is how far apart the masters' lines of one command sent
// to every master may come.
const fanOutLineSpan = time.Second

// maxFanOutLines bounds the commands monitorLines remembers.
const maxFanOutLines = 1024

func newMonitorLines(s *Server) *monitorLines {
	return &monitorLines{s: s, copies: map[string]fanOutCopies{}, own: s.cfg.Upstream.Own.Monitor()}
}

// hide reports whether line, a MONITOR line, is not shown.
func (m *monitorLines) hide(line []byte) bool {
	m.acked.Do(m.own.Acked)
	addr, cmd, ok := monitorLineParts(line)
	if !ok {
		return false
	}
	if m.s.ownMonitorCommand(addr, cmd) || m.own.Hide(string(addr), monitorLineName(cmd)) {
		return true
	}
	if m.s.routing == nil {
		return false
	}
	masters := m.s.routing.cluster.Masters()
	if masters < 2 || !fanOutLine(cmd) {
		return false
	}
	now := m.s.clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.copies[string(cmd)]; ok && c.seen < masters && now.Sub(c.at) < fanOutLineSpan {
		c.seen++
		m.copies[string(cmd)] = c
		return true
	}
	if len(m.copies) >= maxFanOutLines {
		for k, c := range m.copies {
			if now.Sub(c.at) >= fanOutLineSpan {
				delete(m.copies, k)
			}
		}
		if len(m.copies) >= maxFanOutLines {
			clear(m.copies)
		}
	}
	m.copies[string(cmd)] = fanOutCopies{seen: 1, at: now}
	return false
}

// fanOutLine reports whether cmd, a command as a MONITOR line shows it
// ("NAME" "ARG" ...), is one of fanOutCommands.
func fanOutLine(cmd []byte) bool {
	var args [][]byte
	for len(args) < 2 && len(cmd) > 0 {
		arg, rest, ok := monitorArg(cmd)
		if !ok {
			return false
		}
		args, cmd = append(args, bytes.ToLower(arg)), bytes.TrimPrefix(rest, []byte(" "))
	}
	if len(args) == 0 {
		return false
	}
	_, ok := fanOutCommands[fanOutName(string(args[0]), args)]
	return ok
}

// monitorArg splits the first quoted argument off cmd, as MONITOR quotes
// it (monitorRepr); its escapes are kept, which command names do not have.
func monitorArg(cmd []byte) (arg, rest []byte, ok bool) {
	if len(cmd) < 2 || cmd[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(cmd); i++ {
		switch cmd[i] {
		case '\\':
			i++
		case '"':
			return cmd[1:i], cmd[i+1:], true
		}
	}
	return nil, nil, false
}

// monitorLineName is the name of a command as a MONITOR line shows it
// ("NAME" "ARG" ...): the first quoted word.
func monitorLineName(cmd []byte) string {
	if len(cmd) < 2 || cmd[0] != '"' {
		return ""
	}
	name, _, ok := bytes.Cut(cmd[1:], []byte(`"`))
	if !ok {
		return ""
	}
	return string(name)
}
