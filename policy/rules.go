package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Rule matches commands and says what to do with them. Every matching
// dimension that is set must match (and); within one dimension any listed
// value may match (or).
type Rule struct {
	Name      string   // required, unique: the metrics label and in every message
	Commands  []string // required: command names, any case; "config|set" for a subcommand (CONFIG SET in any case)
	Args      []string // optional: the arguments after the command (after the subcommand for "x|y") start with these, case-insensitive
	Keys      []string // optional: Redis glob patterns; any key of the command matching any of them matches. A command without keys never matches
	Patterns  []string // optional, the reverse of Keys: some argument after the command (after the subcommand for "x|y"), read as a glob the way CONFIG GET reads it (case-insensitive), matches one of these names: [requirepass] matches CONFIG GET *pass* and *, not maxmemory
	Users     []string // optional: proxy user names; "" is the unauthenticated / default user
	Addrs     []string // optional: client source IPs or CIDR prefixes
	Action    Action   // allow, deny, rewrite or log (dry run)
	Message   string   // deny (or log of a deny): the text after "-DENIED "; default names the rule
	RewriteTo string   // rewrite (or log of a rewrite): the command name that replaces args[0]
	LogAction Action   // log: what the rule would do, deny or rewrite
}

// SecretParams are the Redis configuration parameters that hold a
// password or name the identity Redis uses elsewhere: CONFIG GET of a
// pattern matching one of them is refused by default.
var SecretParams = []string{"requirepass", "masterauth", "masteruser", "tls-key-file-pass", "tls-client-key-file-pass"}

// credentialRules are the default rules that keep Redis's own credentials
// out of clients' reach. In auth.mode passthrough (Config.Passthrough) a
// client that has AUTHed is one of Redis's own ACL users and Redis decides
// what it may run, so there they cover only clients that have not AUTHed,
// whose commands ride rproxy's own upstream user.
var credentialRules = map[string]bool{"deny-acl": true, "deny-config-get-secrets": true}

// Names reserved for the checks that are not rules but are counted like them.
const (
	bigKeyRule   = "bigkey-del"
	maxValueRule = "max-value"
)

// DefaultRules are appended after the operator's rules unless NoDefaults is
// set. Each refuses a command that one client can use to hurt every other
// client of the same Redis; the message says what to do instead. An operator
// allows one for some users or addresses with an allow rule, which comes
// first and so wins.
func DefaultRules() []Rule {
	return []Rule{
		{
			// KEYS walks the whole keyspace in one call. Redis runs
			// commands one at a time, so on millions of keys every other
			// client waits for seconds. SCAN does the same walk in small
			// steps between other clients' commands.
			Name:     "deny-keys",
			Commands: []string{"keys"},
			Action:   Deny,
			Message:  "KEYS scans the whole keyspace and blocks Redis while it runs; use SCAN with MATCH and COUNT instead",
		},
		{
			// FLUSHALL deletes every key of every database: irreversible,
			// easy to send to the wrong environment through a shared
			// endpoint, and without ASYNC it blocks Redis while it frees
			// the memory. Only an explicit operator rule lets it through.
			Name:     "deny-flushall",
			Commands: []string{"flushall"},
			Action:   Deny,
			Message:  "FLUSHALL deletes every key and is refused by default; an operator can allow it with a policy rule (e.g. commands [flushall], args [async], action allow)",
		},
		{
			// FLUSHDB: the same for one database.
			Name:     "deny-flushdb",
			Commands: []string{"flushdb"},
			Action:   Deny,
			Message:  "FLUSHDB deletes every key of the database and is refused by default; an operator can allow it with a policy rule (e.g. commands [flushdb], args [async], action allow)",
		},
		{
			// Server administration affects every client of the server,
			// not just the caller: DEBUG can sleep, crash or reload Redis;
			// SHUTDOWN stops it; CONFIG SET changes server-wide settings
			// (maxmemory, persistence, and dir/dbfilename, a known way to
			// write files on the host); MONITOR streams every command of
			// every client, values and passwords included, and costs Redis
			// a copy of each; REPLICAOF/SLAVEOF turns the server into a
			// replica and discards its data; FAILOVER hands the master role
			// to a replica; CONFIG REWRITE writes the server's config file;
			// MODULE LOAD runs a shared library's code inside Redis;
			// SYNC/PSYNC make the client a replica: the whole dataset, then
			// every write of every client; SCRIPT DEBUG forks Redis for each
			// debugged script (YES) or blocks it while one is debugged (SYNC).
			Name: "deny-admin",
			Commands: []string{"debug", "shutdown", "config|set", "config|rewrite", "monitor", "replicaof", "slaveof",
				"failover", "module|load", "module|loadex", "module|unload", "sync", "psync", "script|debug"},
			Action:  Deny,
			Message: "restricted admin command; run it on the Redis server directly, or ask the operator for a policy rule allowing it for your user or address",
		},
		{
			// Every client of rproxy shares rproxy's upstream user, so a
			// client that reads or changes Redis's users reads or changes
			// everyone's: ACL LIST and GETUSER show the users and their
			// rules, ACL SETUSER default resetpass locks rproxy itself out
			// at its next reconnect, ACL SETUSER evil on >e +@all makes a
			// user with every right. WHOAMI (the user's name only), CAT
			// (the command categories, no user data), GENPASS (a random
			// string from Redis) and HELP reveal and change nothing.
			Name:     "allow-acl-self",
			Commands: []string{"acl|whoami", "acl|cat", "acl|genpass", "acl|help"},
			Action:   Allow,
		},
		{
			Name:     "deny-acl",
			Commands: []string{"acl"},
			Action:   Deny,
			Message:  "ACL commands that read or change Redis users are refused: rproxy's clients share its upstream user; manage users on Redis directly, as a Redis admin (ACL WHOAMI and ACL CAT are allowed)",
		},
		{
			// CONFIG GET * or *pass* returns requirepass and masterauth in
			// clear: the upstream password that rproxy keeps out of its own
			// /config and logs. A pattern that cannot match a secret
			// (CONFIG GET save, appendonly, maxmemory: what
			// redis-benchmark and monitoring ask) goes through.
			Name:     "deny-config-get-secrets",
			Commands: []string{"config|get"},
			Patterns: SecretParams,
			Action:   Deny,
			Message:  "CONFIG GET of a pattern that can match a password parameter (requirepass, masterauth, masteruser, tls-key-file-pass, tls-client-key-file-pass) is refused; name the parameters you need (CONFIG GET maxmemory), or read secrets on Redis directly, as a Redis admin",
		},
		{
			// Persistence on demand: SAVE blocks Redis for the whole dump;
			// BGSAVE and BGREWRITEAOF fork, which on a large dataset stalls
			// Redis for the fork and can double its memory under writes.
			// The schedule belongs to the operator (save, appendonly).
			Name:     "deny-persistence",
			Commands: []string{"save", "bgsave", "bgrewriteaof"},
			Action:   Deny,
			Message:  "SAVE, BGSAVE and BGREWRITEAOF are operator actions (they block or fork Redis); run them on the Redis server directly, or ask the operator for a policy rule allowing them",
		},
		{
			// Commands that change what every other client sees: SWAPDB
			// swaps two databases under every client; CLIENT PAUSE freezes
			// every client, rproxy's own shared connections included (and
			// UNPAUSE ends an operator's pause, e.g. during a failover);
			// SCRIPT FLUSH and FUNCTION FLUSH delete the scripts and
			// libraries other clients' EVALSHA and FCALL need, FUNCTION
			// RESTORE replaces them; CONFIG RESETSTAT zeroes the server's
			// statistics that monitoring reads.
			Name: "deny-server-wide",
			Commands: []string{"swapdb", "client|pause", "client|unpause", "script|flush", "function|flush",
				"function|restore", "config|resetstat"},
			Action:  Deny,
			Message: "this command affects every client of the Redis server; run it on the Redis server directly, as an admin, or ask the operator for a policy rule allowing it",
		},
		{
			// Cluster writes change slot ownership or membership: a wrong
			// one loses slots (RESET, FORGET, FLUSHSLOTS) or splits the
			// cluster, and the proxy's routing is stale until it refreshes.
			Name: "deny-cluster-admin",
			Commands: []string{"cluster|addslots", "cluster|addslotsrange", "cluster|delslots",
				"cluster|delslotsrange", "cluster|flushslots", "cluster|failover", "cluster|forget",
				"cluster|meet", "cluster|replicate", "cluster|reset", "cluster|setslot",
				"cluster|saveconfig", "cluster|bumpepoch", "cluster|set-config-epoch"},
			Action:  Deny,
			Message: "cluster topology changes are restricted; run them on the Redis nodes directly (redis-cli --cluster), or ask the operator for a policy rule allowing them",
		},
		{
			// PROXY RELOAD re-reads the configuration file, changing the
			// policy for every client: an operator action, allowed from
			// the node itself (where rproxy runs as a per-node daemon).
			Name:     "allow-proxy-reload-local",
			Commands: []string{"proxy|reload"},
			Addrs:    []string{"127.0.0.0/8", "::1/128"},
			Action:   Allow,
		},
		{
			Name:     "deny-proxy-reload",
			Commands: []string{"proxy|reload"},
			Action:   Deny,
			Message:  "PROXY RELOAD is allowed from the node itself only; use 127.0.0.1, SIGHUP or POST /reload on the admin address",
		},
		{
			// CLIENT KILL ID is answered by the proxy for the caller's own
			// session (ids are the proxy's); let it through to that code.
			Name:     "allow-client-kill-id",
			Commands: []string{"client|kill"},
			Args:     []string{"id"},
			Action:   Allow,
		},
		{
			// Behind a proxy every client of Redis is one of the proxy's
			// shared connections: CLIENT KILL by ADDR, USER, LADDR or
			// the old ip:port form would close a connection that
			// thousands of other clients' requests ride on.
			Name:     "deny-client-kill",
			Commands: []string{"client|kill"},
			Action:   Deny,
			Message:  "CLIENT KILL by address or user would close rproxy's shared connections to Redis; use CLIENT KILL ID with your own id (CLIENT ID), or QUIT",
		},
	}
}

// problems lists what is wrong with r, without the index (the caller adds
// it) and without checks across rules.
func (r *Rule) problems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	if r.Name == "" {
		add("name is required")
	} else if !validName(r.Name) {
		add("name %q must be 1 to 64 letters, digits, '-', '_', '.' or ':'", r.Name)
	}
	if len(r.Commands) == 0 {
		add("commands is required (e.g. [keys], or [config|set] for a subcommand)")
	}
	seen := make(map[string]bool, len(r.Commands))
	for _, c := range r.Commands {
		if !validCommand(c) {
			add("command %q must be a name or name|subcommand, without spaces", c)
			continue
		}
		if l := asciiLower(c); seen[l] {
			add("command %q is listed twice", c)
		} else {
			seen[l] = true
		}
	}
	for _, k := range r.Keys {
		if k == "" {
			add("keys: an empty pattern matches only the empty key; use * for any key")
		}
	}
	for _, n := range r.Patterns {
		if n == "" {
			add("patterns: an empty name matches nothing")
		}
	}
	for _, a := range r.Addrs {
		if _, err := parsePrefix(a); err != nil {
			add("addrs: %v", err)
		}
	}

	switch r.Action {
	case Allow, Deny, Rewrite:
		if r.LogAction != "" {
			add("log_action is only for action log (got action %s)", r.Action)
		}
	case Log:
		if r.LogAction != Deny && r.LogAction != Rewrite {
			add("action log needs log_action deny or rewrite, got %q", r.LogAction)
		}
	case "":
		add("action is required: allow, deny, rewrite or log")
	default:
		add("action must be allow, deny, rewrite or log, got %q", r.Action)
	}
	effective := r.effective()
	if r.Message != "" {
		if effective != Deny {
			add("message is only for deny rules (and log rules with log_action deny)")
		} else if strings.ContainsFunc(r.Message, isControl) {
			add("message must not contain control characters such as CR or LF")
		}
	}
	if effective == Rewrite {
		if r.RewriteTo == "" {
			add("rewrite needs rewrite_to, the new command name (e.g. unlink)")
		} else if !validWord(r.RewriteTo) {
			add("rewrite_to %q must be a command name without spaces or '|'", r.RewriteTo)
		}
	} else if r.RewriteTo != "" {
		add("rewrite_to is only for rewrite rules (and log rules with log_action rewrite)")
	}
	return out
}

// effective is the action the rule takes or, for a dry run, would take.
func (r *Rule) effective() Action {
	if r.Action == Log {
		return r.LogAction
	}
	return r.Action
}

// compiledRule is a Rule ready for matching: lower-cased arguments, parsed
// prefixes, the reply and the counter resolved once.
type compiledRule struct {
	name      string
	action    Action
	logAction Action
	args      []string // lower-case (ASCII)
	keys      []glob
	patterns  []string // lower-case (ASCII)
	users     []string
	addrs     []netip.Prefix
	reply     []byte
	rewriteTo []byte
	count     prometheus.Counter
}

// entry is one command of a rule in the index; sub is the lower-case
// subcommand ("" when the rule names the whole command).
type entry struct {
	rule *compiledRule
	sub  string
}

func compile(r *Rule, m *Metrics) (*compiledRule, error) {
	c := &compiledRule{name: r.Name, action: r.Action, logAction: r.LogAction, users: r.Users}
	for _, a := range r.Args {
		c.args = append(c.args, asciiLower(a))
	}
	for _, k := range r.Keys {
		c.keys = append(c.keys, glob(k))
	}
	for _, n := range r.Patterns {
		c.patterns = append(c.patterns, asciiLower(n))
	}
	for _, a := range r.Addrs {
		pfx, err := parsePrefix(a)
		if err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, pfx)
	}
	switch r.effective() {
	case Deny:
		msg := r.Message
		if msg == "" {
			msg = "command refused by policy rule " + r.Name
		}
		c.reply = []byte("-DENIED " + msg + "\r\n")
	case Rewrite:
		c.rewriteTo = []byte(r.RewriteTo)
	}
	label := string(r.Action)
	if r.Action == Log {
		label = "log_" + string(r.LogAction)
	}
	c.count = m.decisions.WithLabelValues(r.Name, label)
	return c, nil
}

// match reports whether r is a command this entry's rule covers. The
// cheap tests come first; globs last.
func (e *entry) match(r *Request) bool {
	off := 1
	if e.sub != "" {
		if len(r.Args) < 2 || !equalFoldLower(r.Args[1], e.sub) {
			return false
		}
		off = 2
	}
	c := e.rule
	if len(c.args) > 0 {
		if len(r.Args) < off+len(c.args) {
			return false
		}
		for i, a := range c.args {
			if !equalFoldLower(r.Args[off+i], a) {
				return false
			}
		}
	}
	if len(c.users) > 0 && !containsString(c.users, r.User) {
		return false
	}
	if len(c.addrs) > 0 && !c.addrMatch(r.Addr) {
		return false
	}
	if len(c.keys) > 0 && !anyKeyMatches(c.keys, r.Keys) {
		return false
	}
	if len(c.patterns) > 0 && !anyPatternMatches(r.Args[min(off, len(r.Args)):], c.patterns) {
		return false
	}
	return true
}

// anyPatternMatches reports whether one of args, read as a glob pattern
// matched case-insensitively (as CONFIG GET matches parameter names),
// matches one of names (lower-case). Only rules with Patterns get here,
// so the lower-casing copy is not on the path of other commands.
func anyPatternMatches(args [][]byte, names []string) bool {
	for _, a := range args {
		g := glob(asciiLower(string(a)))
		for _, n := range names {
			if g.match([]byte(n)) {
				return true
			}
		}
	}
	return false
}

func (c *compiledRule) addrMatch(a netip.Addr) bool {
	if !a.IsValid() {
		return false // e.g. a unix socket client: no address to match
	}
	a = a.Unmap() // ::ffff:10.0.0.1 is the IPv4 client 10.0.0.1
	for _, p := range c.addrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func anyKeyMatches(pats []glob, keys [][]byte) bool {
	for _, k := range keys {
		for _, g := range pats {
			if g.match(k) {
				return true
			}
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// parsePrefix accepts an address ("10.0.0.1", "::1") or a prefix
// ("10.0.0.0/8"); host bits in a prefix are dropped.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
		}
		if p.Addr().Is4In6() {
			return netip.Prefix{}, fmt.Errorf("%q: write IPv4-mapped prefixes as plain IPv4", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: zones are not supported", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// splitCommand turns "CONFIG|Set" into ("config", "set").
func splitCommand(c string) (top, sub string) {
	top, sub, _ = strings.Cut(asciiLower(c), "|")
	return top, sub
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

func validCommand(s string) bool {
	top, sub, hasSub := strings.Cut(s, "|")
	return validWord(top) && (!hasSub || validWord(sub))
}

// validWord: a command or subcommand name, printable ASCII without spaces
// or '|' (real names are letters, digits, '-' and '_').
func validWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '|' {
			return false
		}
	}
	return true
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// asciiLower lower-cases A-Z only, as Redis compares command names.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// equalFoldLower compares b with lower, which is already lower-case,
// folding A-Z in b only. No allocation: this is on the hot path.
func equalFoldLower(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
