package proxy

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// OpsHooks connect the in-band operator commands to the process around the
// server (cmd/rproxy): nil hooks answer with an error saying so.
type OpsHooks struct {
	Version string
	// Reload re-reads the configuration file and applies what can change
	// at run time; an error leaves everything as it was. note, when not
	// empty, says what was not applied (changed keys that need a restart).
	Reload func() (note string, err error)
	// EffectiveConfig renders the running configuration, secrets redacted.
	EffectiveConfig func() string
	// Info, if set, gives more "field:value" lines for INFO's # Proxy
	// section (cmd/rproxy's checks: the upstream user's rights, the
	// certificates' expiry).
	Info func() []string
}

// infoWantsProxy reports whether an INFO command's sections include the
// proxy section: no argument (the default sections), "default", "all",
// "everything" or "proxy".
func infoWantsProxy(args [][]byte) bool {
	if len(args) == 1 {
		return true
	}
	for _, a := range args[1:] {
		switch strings.ToLower(string(a)) {
		case "proxy", "default", "all", "everything":
			return true
		}
	}
	return false
}

// proxyInfo renders the "# Proxy" INFO section, in INFO's field:value form.
func (s *Server) proxyInfo() string {
	var b strings.Builder
	field := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	b.WriteString("# Proxy\r\n")
	field("rproxy_version", s.cfg.Ops.Version)
	field("uptime_in_seconds", int64(time.Since(s.started).Seconds()))
	field("connected_clients", s.clients.Load())
	field("upstream_address", s.cfg.Upstream.Address)
	field("upstream_ready", boolInt(s.pools[2].Ready()))
	if f := s.cfg.Upstream.Follow; f != nil {
		field("upstream_master_searching", boolInt(f.Searching())) // a READONLY came: a master is looked for at the address
		field("upstream_master_follows", f.Changes())              // the connections moved to another master found there
	}
	s.topologyInfo(field)
	field("command_table", s.table.Load().Source())
	field("command_table_commands", s.table.Load().Len())
	field("coalesce", onOff(s.coalescing != nil))
	field("policy", onOff(s.policing.current.Load() != nil))
	s.metrics.latencyInfo(field)
	if s.hot != nil {
		field("hot_keys", len(s.hot.HotKeys()))
		if st, ok := s.TierStats(); ok {
			field("tier_serving", boolInt(s.hot.TrackingUp()))
			field("tier_entries", st.Entries)
			field("tier_bytes", st.Bytes)
			field("tier_hits", st.Hits)
			field("tier_misses", st.Misses)
			field("tier_invalidations", st.Invalidations)
			field("tier_evictions", st.Evictions)
		}
	}
	if s.cfg.Ops.Info != nil {
		for _, l := range s.cfg.Ops.Info() {
			b.WriteString(oneLine(l))
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// infoAt is an INFO command of a batch: its reply's index among the
// upstream replies, and whether it gets the # Proxy section.
type infoAt struct {
	up        int
	withProxy bool
}

// infoAtReply is the reply r of the batch's upstream reply up (the first
// part's, for a command sent to every master), as infoReply rewrites it
// when that is an INFO command's.
func (s *Server) infoAtReply(ss *session, up int, r []byte) []byte {
	if len(ss.infoAt) == 0 || ss.infoAt[0].up != up {
		return r
	}
	r = s.infoReply(r, ss, ss.infoAt[0].withProxy)
	ss.infoAt = ss.infoAt[1:]
	return r
}

// infoReply is Redis's INFO reply as rproxy's client sees it: a bulk
// string (RESP2) or a verbatim string (RESP3); anything else (an error) is
// returned unchanged. The Clients section's connected_clients and
// tracking_clients count rproxy's sessions, as CLIENT LIST and CLIENT KILL
// see them, not Redis's connections (rproxy's shared, pinned, tracking and
// spare ones, other nodes' clients). With withProxy the # Proxy section is
// added, with Redis's own two figures as upstream_connected_clients and
// upstream_tracking_clients. caller is the asking session on its own
// goroutine, or nil on a stream's copy goroutine: every session's state is
// then its published one.
func (s *Server) infoReply(reply []byte, caller *session, withProxy bool) []byte {
	if len(reply) == 0 || (reply[0] != '$' && reply[0] != '=') {
		return reply
	}
	body, ok := resp.Payload(reply, reply[0])
	if !ok {
		return reply
	}
	var upstream []string // Redis's replaced figures, as # Proxy fields
	if bytes.Contains(body, []byte("# Clients\r\n")) {
		connected, tracking := s.clientCounts(caller)
		var was []byte
		if body, was = replaceInfoField(body, "connected_clients", connected); was != nil {
			upstream = append(upstream, "upstream_connected_clients:"+string(was)+"\r\n")
		}
		if body, was = replaceInfoField(body, "tracking_clients", tracking); was != nil {
			upstream = append(upstream, "upstream_tracking_clients:"+string(was)+"\r\n")
		}
	}
	if !withProxy && upstream == nil {
		return reply
	}
	extra := ""
	if withProxy {
		extra = s.proxyInfo() + strings.Join(upstream, "")
		if len(body) > 0 && !(reply[0] == '=' && len(body) == 4) { // "txt:" alone is empty
			extra = "\r\n" + extra
		}
	}
	dst := []byte{reply[0]}
	dst = strconv.AppendInt(dst, int64(len(body)+len(extra)), 10)
	dst = append(dst, "\r\n"...)
	dst = append(dst, body...)
	dst = append(dst, extra...)
	return append(dst, "\r\n"...)
}

// replaceInfoField returns INFO text with the value of the line field:value
// replaced by v, and the value it had (nil when there is no such line).
func replaceInfoField(text []byte, field string, v int) ([]byte, []byte) {
	key := "\r\n" + field + ":"
	i := bytes.Index(text, []byte(key))
	if i < 0 {
		return text, nil
	}
	from := i + len(key)
	end := bytes.Index(text[from:], []byte("\r\n"))
	if end < 0 {
		end = len(text) - from
	}
	was := bytes.Clone(text[from : from+end])
	out := make([]byte, 0, len(text)+8)
	out = append(out, text[:from]...)
	out = strconv.AppendInt(out, int64(v), 10)
	return append(out, text[from+end:]...), was
}

// clientCounts counts rproxy's sessions as Redis counts its clients in
// INFO: connected_clients all but replicas (as CLIENT KILL sees them: not
// those killed), tracking_clients those with tracking on. caller's own
// state is its live one (nil: none is, see infoReply).
func (s *Server) clientCounts(caller *session) (connected, tracking int) {
	for _, ss := range s.sessions.unordered() {
		st := s.clientCmds.clientStateOf(ss, caller)
		if st.role != 'S' {
			connected++
		}
		if st.tracking {
			tracking++
		}
	}
	return connected, tracking
}

// proxyCommand answers PROXY INFO | HOTKEYS | CONFIG GET | CLIENTS |
// RELOAD | SLOWLOG | HELP.
// The policy has already checked it (PROXY RELOAD is loopback-only by
// default).
func (s *Server) proxyCommand(ss *session, args [][]byte) {
	if isInfoNodes(args) {
		s.proxyInfoNodes(ss, args[3:])
		return
	}
	sub := ""
	if len(args) > 1 {
		sub = strings.ToLower(string(args[1]))
	}
	var r []byte
	switch {
	case sub == "info" && len(args) == 2:
		r = resp.AppendBulk(nil, []byte(s.proxyInfo()))
	case sub == "hotkeys" && len(args) == 2:
		hot := s.HotKeys()
		r = fmt.Appendf(nil, "*%d\r\n", len(hot))
		for _, h := range hot {
			r = append(r, "*2\r\n"...)
			r = resp.AppendBulk(r, []byte(h.Key))
			r = resp.AppendBulk(r, []byte(strconv.FormatFloat(h.Rate, 'f', 1, 64)))
		}
	case sub == "config" && len(args) >= 3 && strings.EqualFold(string(args[2]), "get"):
		switch {
		case s.cfg.Ops.EffectiveConfig == nil:
			r = resp.AppendError(nil, "ERR rproxy: no configuration to show")
		case len(args) == 3:
			r = resp.AppendBulk(nil, []byte(s.cfg.Ops.EffectiveConfig()))
		default:
			r = configGet(s.cfg.Ops.EffectiveConfig(), args[3:])
		}
	case sub == "clients" && len(args) == 2:
		r = s.clientsList(ss)
	case sub == "reload" && len(args) == 2:
		switch {
		case s.cfg.Ops.Reload == nil:
			r = resp.AppendError(nil, "ERR rproxy: reload is not available (no -config file)")
		default:
			switch note, err := s.cfg.Ops.Reload(); {
			case err != nil:
				r = resp.AppendError(nil, "ERR rproxy: reload rejected, configuration unchanged: "+oneLine(err.Error()))
			case note != "":
				r = []byte("+OK, " + oneLine(note) + "\r\n")
			default:
				r = []byte("+OK\r\n")
			}
		}
	case sub == "slowlog" && s.slow != nil:
		r = s.slow.command(args)
	case sub == "slowlog":
		r = resp.AppendError(nil, "ERR rproxy: the slow log is off (slowlog.threshold: 0)")
	case sub == "help" && len(args) == 2:
		lines := []string{
			"PROXY <subcommand>. Subcommands are:",
			"INFO -- the proxy's own figures (also the # Proxy section of INFO).",
			"INFO NODES [section ...] -- Redis's INFO from every master (cluster) or the server, as [address, INFO] pairs.",
			"HOTKEYS -- the keys currently detected as hot, with reads per second.",
			"CONFIG GET [pattern ...] -- the running configuration, secrets redacted: all of it as YAML, or the keys matching a glob pattern (limits.*) as key, value pairs.",
			"CLIENTS -- the connected clients: id, address, name, age, idle, db, last command, user, shared or pinned upstream connection.",
			"RELOAD -- re-read the configuration file (policy, jitter, hot keys and tier, log level and request logging, limits).",
			"SLOWLOG GET [count] | LEN | RESET -- client batches slower than slowlog.threshold (command names only).",
		}
		r = fmt.Appendf(nil, "*%d\r\n", len(lines))
		for _, l := range lines {
			r = append(r, '+')
			r = append(r, l...)
			r = append(r, "\r\n"...)
		}
	default:
		r = resp.AppendError(nil, "ERR rproxy: unknown PROXY subcommand or wrong number of arguments; try PROXY HELP")
	}
	ss.reply(r)
}

// oneLine keeps an error usable in a RESP error line.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", "; ").Replace(s)
}
