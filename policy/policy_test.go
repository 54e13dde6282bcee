package policy

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// reqOpt sets a request field the command line does not give.
type reqOpt func(*Request)

func user(u string) reqOpt { return func(r *Request) { r.User = u } }
func addr(a string) reqOpt {
	return func(r *Request) { r.Addr = netip.MustParseAddr(a) }
}
func keys(k ...string) reqOpt {
	return func(r *Request) {
		for _, s := range k {
			r.Keys = append(r.Keys, []byte(s))
		}
	}
}

// cmd builds a request from words, the first the command; keys (the key
// arguments, as the proxy's command table would give them) come as an option.
func cmd(line string, opts ...reqOpt) *Request {
	r := &Request{}
	for _, w := range strings.Fields(line) {
		r.Args = append(r.Args, []byte(w))
	}
	r.Name = strings.ToLower(string(r.Args[0]))
	for _, o := range opts {
		o(r)
	}
	return r
}

func mustNew(t testing.TB, cfg Config) (*Policy, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p, err := New(cfg, NewMetrics(reg), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, reg
}

func counter(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestCheck(t *testing.T) {
	denyGet := Rule{Name: "no-get", Commands: []string{"get"}, Action: Deny}
	for _, tc := range []struct {
		name       string
		rules      []Rule
		noDefaults bool
		req        *Request
		action     Action
		rule       string
	}{
		// Commands.
		{"command matches", []Rule{denyGet}, true, cmd("GET k", keys("k")), Deny, "no-get"},
		{"command any case", []Rule{denyGet}, true, cmd("gEt k", keys("k")), Deny, "no-get"},
		{"other command", []Rule{denyGet}, true, cmd("SET k v", keys("k")), Allow, ""},
		{"one of several commands", []Rule{{Name: "r", Commands: []string{"get", "mget"}, Action: Deny}}, true,
			cmd("MGET a b", keys("a", "b")), Deny, "r"},
		{"rule command in upper case", []Rule{{Name: "r", Commands: []string{"GET"}, Action: Deny}}, true,
			cmd("get k"), Deny, "r"},

		// Subcommands.
		{"subcommand", []Rule{{Name: "r", Commands: []string{"config|get"}, Action: Deny}}, true,
			cmd("CONFIG GET maxmemory"), Deny, "r"},
		{"subcommand any case", []Rule{{Name: "r", Commands: []string{"config|get"}, Action: Deny}}, true,
			cmd("Config gEt maxmemory"), Deny, "r"},
		{"other subcommand", []Rule{{Name: "r", Commands: []string{"config|get"}, Action: Deny}}, true,
			cmd("CONFIG RESETSTAT"), Allow, ""},
		{"subcommand missing", []Rule{{Name: "r", Commands: []string{"config|get"}, Action: Deny}}, true,
			cmd("CONFIG"), Allow, ""},
		{"whole command covers subcommands", []Rule{{Name: "r", Commands: []string{"config"}, Action: Deny}}, true,
			cmd("CONFIG GET x"), Deny, "r"},

		// Args.
		{"args prefix", []Rule{{Name: "async", Commands: []string{"flushall"}, Args: []string{"async"}, Action: Allow}}, false,
			cmd("FLUSHALL ASYNC"), Allow, "async"},
		{"args any case", []Rule{{Name: "async", Commands: []string{"flushall"}, Args: []string{"ASYNC"}, Action: Allow}}, false,
			cmd("flushall Async"), Allow, "async"},
		{"args differ: default denies", []Rule{{Name: "async", Commands: []string{"flushall"}, Args: []string{"async"}, Action: Allow}}, false,
			cmd("FLUSHALL SYNC"), Deny, "deny-flushall"},
		{"args absent: default denies", []Rule{{Name: "async", Commands: []string{"flushall"}, Args: []string{"async"}, Action: Allow}}, false,
			cmd("FLUSHALL"), Deny, "deny-flushall"},
		{"args after subcommand", []Rule{{Name: "mm", Commands: []string{"config|set"}, Args: []string{"maxmemory-policy"}, Action: Allow}}, false,
			cmd("CONFIG SET MAXMEMORY-POLICY allkeys-lru"), Allow, "mm"},
		{"args after subcommand differ", []Rule{{Name: "mm", Commands: []string{"config|set"}, Args: []string{"maxmemory-policy"}, Action: Allow}}, false,
			cmd("CONFIG SET dir /tmp"), Deny, "deny-admin"},
		{"several args", []Rule{{Name: "r", Commands: []string{"client"}, Args: []string{"kill", "skipme"}, Action: Deny}}, true,
			cmd("CLIENT KILL SKIPME yes"), Deny, "r"},
		{"several args, one differs", []Rule{{Name: "r", Commands: []string{"client"}, Args: []string{"kill", "skipme"}, Action: Deny}}, true,
			cmd("CLIENT KILL ID 7"), Allow, ""},

		// Keys.
		{"key glob", []Rule{{Name: "r", Commands: []string{"get"}, Keys: []string{"secret:*"}, Action: Deny}}, true,
			cmd("GET secret:1", keys("secret:1")), Deny, "r"},
		{"key glob no match", []Rule{{Name: "r", Commands: []string{"get"}, Keys: []string{"secret:*"}, Action: Deny}}, true,
			cmd("GET public:1", keys("public:1")), Allow, ""},
		{"any key matches", []Rule{{Name: "r", Commands: []string{"mget"}, Keys: []string{"a", "secret:*"}, Action: Deny}}, true,
			cmd("MGET x secret:2", keys("x", "secret:2")), Deny, "r"},
		{"no keys never matches a key rule", []Rule{{Name: "r", Commands: []string{"ping"}, Keys: []string{"*"}, Action: Deny}}, true,
			cmd("PING"), Allow, ""},

		// Users.
		{"user listed", []Rule{{Name: "ops-keys", Commands: []string{"keys"}, Users: []string{"ops"}, Action: Allow}}, false,
			cmd("KEYS *", user("ops")), Allow, "ops-keys"},
		{"user not listed", []Rule{{Name: "ops-keys", Commands: []string{"keys"}, Users: []string{"ops"}, Action: Allow}}, false,
			cmd("KEYS *", user("app")), Deny, "deny-keys"},
		{"unauthenticated is not a listed user", []Rule{{Name: "ops-keys", Commands: []string{"keys"}, Users: []string{"ops"}, Action: Allow}}, false,
			cmd("KEYS *"), Deny, "deny-keys"},
		{"the empty user names the unauthenticated", []Rule{{Name: "anon", Commands: []string{"get"}, Users: []string{""}, Action: Deny}}, true,
			cmd("GET k"), Deny, "anon"},

		// Addresses.
		{"addr in CIDR", []Rule{{Name: "lan", Commands: []string{"keys"}, Addrs: []string{"10.0.0.0/8"}, Action: Allow}}, false,
			cmd("KEYS *", addr("10.1.2.3")), Allow, "lan"},
		{"IPv4-mapped addr in CIDR", []Rule{{Name: "lan", Commands: []string{"keys"}, Addrs: []string{"10.0.0.0/8"}, Action: Allow}}, false,
			cmd("KEYS *", addr("::ffff:10.1.2.3")), Allow, "lan"},
		{"addr outside CIDR", []Rule{{Name: "lan", Commands: []string{"keys"}, Addrs: []string{"10.0.0.0/8"}, Action: Allow}}, false,
			cmd("KEYS *", addr("192.168.1.1")), Deny, "deny-keys"},
		{"single address", []Rule{{Name: "me", Commands: []string{"keys"}, Addrs: []string{"::1", "127.0.0.1"}, Action: Allow}}, false,
			cmd("KEYS *", addr("::1")), Allow, "me"},
		{"no address (unix socket)", []Rule{{Name: "me", Commands: []string{"keys"}, Addrs: []string{"127.0.0.1"}, Action: Allow}}, false,
			cmd("KEYS *"), Deny, "deny-keys"},

		// Every set dimension must match.
		{"user and addr both match", []Rule{{Name: "r", Commands: []string{"keys"}, Users: []string{"ops"}, Addrs: []string{"10.0.0.0/8"}, Action: Allow}}, false,
			cmd("KEYS *", user("ops"), addr("10.0.0.1")), Allow, "r"},
		{"user matches, addr does not", []Rule{{Name: "r", Commands: []string{"keys"}, Users: []string{"ops"}, Addrs: []string{"10.0.0.0/8"}, Action: Allow}}, false,
			cmd("KEYS *", user("ops"), addr("11.0.0.1")), Deny, "deny-keys"},

		// Order.
		{"first match wins", []Rule{
			{Name: "allow-a", Commands: []string{"get"}, Keys: []string{"a*"}, Action: Allow},
			{Name: "deny-all", Commands: []string{"get"}, Action: Deny}}, true,
			cmd("GET abc", keys("abc")), Allow, "allow-a"},
		{"first match wins, later rule", []Rule{
			{Name: "allow-a", Commands: []string{"get"}, Keys: []string{"a*"}, Action: Allow},
			{Name: "deny-all", Commands: []string{"get"}, Action: Deny}}, true,
			cmd("GET bcd", keys("bcd")), Deny, "deny-all"},
		{"operator rule overrides a default", []Rule{{Name: "keys-ok", Commands: []string{"keys"}, Action: Allow}}, false,
			cmd("KEYS *"), Allow, "keys-ok"},
		{"no defaults", nil, true, cmd("KEYS *"), Allow, ""},

		// Dry runs.
		{"log rule allows", []Rule{{Name: "dry", Commands: []string{"get"}, Action: Log, LogAction: Deny}}, true,
			cmd("GET k"), Allow, "dry"},
		{"log rule does not shadow a later deny", []Rule{{Name: "dry", Commands: []string{"keys"}, Action: Log, LogAction: Rewrite, RewriteTo: "scan"}}, false,
			cmd("KEYS *"), Deny, "deny-keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := mustNew(t, Config{Rules: tc.rules, NoDefaults: tc.noDefaults})
			d := p.Check(tc.req)
			if d.Action != tc.action || d.Rule != tc.rule {
				t.Fatalf("got %s by %q, want %s by %q", d.Action, d.Rule, tc.action, tc.rule)
			}
			if (d.Action == Deny) != (d.Reply != nil) {
				t.Fatalf("action %s with reply %q", d.Action, d.Reply)
			}
		})
	}
}

func TestDenyReply(t *testing.T) {
	p, _ := mustNew(t, Config{NoDefaults: true, Rules: []Rule{
		{Name: "no-get", Commands: []string{"get"}, Action: Deny},
		{Name: "no-set", Commands: []string{"set"}, Action: Deny, Message: "writes are off during the migration"},
	}})
	if got := string(p.Check(cmd("GET k")).Reply); got != "-DENIED command refused by policy rule no-get\r\n" {
		t.Fatalf("default message: %q", got)
	}
	if got := string(p.Check(cmd("SET k v")).Reply); got != "-DENIED writes are off during the migration\r\n" {
		t.Fatalf("message: %q", got)
	}
}

// TestNames: Names says which commands a rule names (a subcommand rule
// names its container), without counting or logging a decision.
func TestNames(t *testing.T) {
	p, reg := mustNew(t, Config{NoDefaults: true, Rules: []Rule{
		{Name: "no-exec", Commands: []string{"exec"}, Action: Deny},
		{Name: "no-debug", Commands: []string{"script|debug"}, Action: Deny},
	}})
	for name, want := range map[string]bool{"exec": true, "script": true, "multi": false, "get": false} {
		if got := p.Names(name); got != want {
			t.Errorf("Names(%q) = %v, want %v", name, got, want)
		}
	}
	if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", "no-exec", "action", "deny"); got != 0 {
		t.Errorf("Names counted %v decisions", got)
	}
}

func TestRewrite(t *testing.T) {
	p, reg := mustNew(t, Config{Rules: []Rule{{Name: "del-unlink", Commands: []string{"del"}, Action: Rewrite, RewriteTo: "unlink"}}})
	r := cmd("DEL a b", keys("a", "b"))
	d := p.Check(r)
	if d.Action != Rewrite || d.Rule != "del-unlink" {
		t.Fatalf("got %+v", d)
	}
	if len(d.Args) != 3 || string(d.Args[0]) != "unlink" || string(d.Args[1]) != "a" || string(d.Args[2]) != "b" {
		t.Fatalf("args %q", d.Args)
	}
	if string(r.Args[0]) != "DEL" {
		t.Fatalf("the caller's args were modified: %q", r.Args)
	}
	if &d.Args[1][0] != &r.Args[1][0] {
		t.Fatal("the other args were copied, not reused")
	}
	if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", "del-unlink", "action", "rewrite"); got != 1 {
		t.Fatalf("rewrite counted %v times", got)
	}
}

func TestDefaults(t *testing.T) {
	p, _ := mustNew(t, Config{})
	for _, line := range []string{
		"KEYS *", "keys user:*", "FLUSHALL", "FLUSHALL ASYNC", "FLUSHDB", "flushdb sync",
		"DEBUG SLEEP 10", "SHUTDOWN NOSAVE", "CONFIG SET maxmemory 1", "config set dir /tmp", "MONITOR",
		"REPLICAOF host 6379", "SLAVEOF NO ONE",
		"CLUSTER ADDSLOTS 1", "cluster addslotsrange 1 2", "CLUSTER DELSLOTS 1", "CLUSTER DELSLOTSRANGE 1 2",
		"CLUSTER FLUSHSLOTS", "CLUSTER FAILOVER", "CLUSTER FORGET id", "CLUSTER MEET h 1", "CLUSTER REPLICATE id",
		"CLUSTER RESET HARD", "CLUSTER SETSLOT 1 NODE id", "CLUSTER SAVECONFIG", "CLUSTER BUMPEPOCH",
		"CLUSTER SET-CONFIG-EPOCH 1",
		// issue 17: credentials, and commands that affect every client
		"ACL LIST", "acl users", "ACL GETUSER default", "ACL SETUSER default resetpass >x",
		"ACL SETUSER evil on >e ~* +@all", "ACL DELUSER rproxy", "ACL SAVE", "ACL LOAD", "ACL LOG",
		"ACL DRYRUN default FLUSHALL", "ACL NOSUCHSUB",
		"CONFIG GET requirepass", "config get MasterAuth", "CONFIG GET *", "CONFIG GET *pass*",
		"CONFIG GET master*", "CONFIG GET maxmemory requirepass", "CONFIG GET tls-*", "CONFIG GET ?equirepass",
		"CONFIG GET [rm]*", "CONFIG REWRITE", "CONFIG RESETSTAT",
		"SWAPDB 0 1", "CLIENT PAUSE 1000", "client pause 1000 write", "CLIENT UNPAUSE",
		"SAVE", "BGSAVE", "BGSAVE SCHEDULE", "BGREWRITEAOF", "SCRIPT FLUSH", "script flush async",
		"FUNCTION FLUSH", "FUNCTION RESTORE payload", "FAILOVER", "MODULE LOAD /tmp/x.so", "MODULE UNLOAD m",
		"MODULE LOADEX /tmp/x.so",
	} {
		d := p.Check(cmd(line))
		if d.Action != Deny || !strings.HasPrefix(string(d.Reply), "-DENIED ") || !strings.HasSuffix(string(d.Reply), "\r\n") {
			t.Errorf("%s: got %s %q", line, d.Action, d.Reply)
		}
	}
	for _, line := range []string{
		"GET k", "SCAN 0 MATCH user:*", "CONFIG GET maxmemory", "CLUSTER INFO", "CLUSTER SLOTS",
		"cluster shards", "DEL k", "INFO", "PING",
		// what redis-benchmark, redis-py and go-redis send, and harmless ACL
		"CONFIG GET save", "CONFIG GET appendonly", "config get maxmemory-policy", "CONFIG GET max*",
		"CONFIG GET", "ACL WHOAMI", "ACL CAT", "acl cat dangerous", "ACL GENPASS", "ACL HELP",
		"CLIENT SETINFO lib-name redis-py", "CLIENT SETNAME app", "CLIENT LIST", "CLIENT ID",
		"SCRIPT LOAD x", "SCRIPT EXISTS x", "SCRIPT KILL", "FUNCTION LOAD x", "FUNCTION LIST", "FUNCTION KILL",
		"LASTSAVE", "MODULE LIST", "HELLO 3", "DBSIZE",
	} {
		if d := p.Check(cmd(line)); d.Action != Allow {
			t.Errorf("%s: got %s by %s", line, d.Action, d.Rule)
		}
	}
	if got := string(p.Check(cmd("KEYS *")).Reply); !strings.Contains(got, "SCAN") {
		t.Errorf("the KEYS message does not point to SCAN: %q", got)
	}
	if got := string(p.Check(cmd("FLUSHALL")).Reply); !strings.Contains(got, "async") {
		t.Errorf("the FLUSHALL message does not say how to allow it: %q", got)
	}
}

// In auth.mode passthrough a client that has AUTHed is one of Redis's own
// ACL users and Redis decides; a client that has not rides rproxy's
// upstream user and gets the credential rules. The other defaults apply
// to everyone.
func TestDefaultCredentialRulesPassthrough(t *testing.T) {
	p, _ := mustNew(t, Config{Passthrough: true})
	for _, line := range []string{"ACL LIST", "ACL SETUSER x on", "CONFIG GET requirepass"} {
		if d := p.Check(cmd(line)); d.Action != Deny {
			t.Errorf("%s before AUTH: %s, want deny", line, d.Action)
		}
		if d := p.Check(cmd(line, user("alice"))); d.Action != Allow {
			t.Errorf("%s as Redis user alice: %s by %s, want allow (Redis decides)", line, d.Action, d.Rule)
		}
	}
	if d := p.Check(cmd("SWAPDB 0 1", user("alice"))); d.Action != Deny {
		t.Errorf("SWAPDB as alice: %s, want deny (affects every client)", d.Action)
	}
	// In proxy mode every user shares rproxy's upstream user.
	p, _ = mustNew(t, Config{})
	if d := p.Check(cmd("ACL LIST", user("alice"))); d.Action != Deny {
		t.Errorf("ACL LIST as proxy user alice: %s, want deny", d.Action)
	}
	if got := string(p.Check(cmd("ACL LIST")).Reply); !strings.Contains(got, "Redis directly") {
		t.Errorf("the ACL message does not say where to do it: %q", got)
	}
	if got := string(p.Check(cmd("CONFIG GET *")).Reply); !strings.Contains(got, "Redis directly") {
		t.Errorf("the CONFIG GET message does not say where to do it: %q", got)
	}
}

// Patterns reads the command's arguments as globs and matches them against
// the rule's names, case-insensitively, after the subcommand only.
func TestRulePatterns(t *testing.T) {
	p, _ := mustNew(t, Config{NoDefaults: true, Rules: []Rule{
		{Name: "p", Commands: []string{"config|get"}, Patterns: []string{"Secret-Param"}, Action: Deny},
		{Name: "q", Commands: []string{"echo"}, Patterns: []string{"x"}, Action: Deny},
	}})
	for line, want := range map[string]Action{
		"CONFIG GET secret-param": Deny, "CONFIG GET SECRET-*": Deny, "CONFIG GET a b *": Deny,
		"CONFIG GET secret": Allow, "CONFIG GET s[a-d]cret-param": Allow, "CONFIG GET": Allow,
		"CONFIG GET get": Allow, "ECHO x": Deny, "ECHO y": Allow, "ECHO": Allow,
	} {
		if d := p.Check(cmd(line)); d.Action != want {
			t.Errorf("%s: %s, want %s", line, d.Action, want)
		}
	}
	if err := (Config{Rules: []Rule{{Name: "e", Commands: []string{"x"}, Patterns: []string{""}, Action: Deny}}}).Validate(); err == nil || !strings.Contains(err.Error(), "patterns") {
		t.Errorf("an empty pattern name: %v", err)
	}
}

// CLIENT KILL ID reaches the proxy's own handling; other filters are
// refused, in any case.
func TestDefaultClientKill(t *testing.T) {
	p, err := New(DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) Action {
		r := &Request{Name: "client"}
		for _, a := range args {
			r.Args = append(r.Args, []byte(a))
		}
		return p.Check(r).Action
	}
	if a := check("CLIENT", "KILL", "ID", "7"); a != Allow {
		t.Errorf("CLIENT KILL ID = %s", a)
	}
	for _, args := range [][]string{{"client", "kill", "addr", "1.2.3.4:5"}, {"CLIENT", "Kill", "USER", "x"}, {"client", "kill", "1.2.3.4:5"}} {
		if a := check(args...); a != Deny {
			t.Errorf("%v = %s, want deny", args, a)
		}
	}
	if a := check("CLIENT", "LIST"); a != Allow {
		t.Errorf("CLIENT LIST = %s", a)
	}
}

func TestDefaultRulesValid(t *testing.T) {
	if err := (Config{Rules: DefaultRules(), NoDefaults: true}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range DefaultRules() {
		if r.Message == "" && r.Action == Deny {
			t.Errorf("default rule %s has no message telling the user what to do", r.Name)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // each must appear in the error
	}{
		{"missing name, commands, action", Config{Rules: []Rule{{}}},
			[]string{"rules[0] (): name is required", "rules[0] (): commands is required", "rules[0] (): action is required"}},
		{"bad name", Config{Rules: []Rule{{Name: "has space", Commands: []string{"get"}, Action: Deny}}},
			[]string{`rules[0] (has space): name "has space"`}},
		{"duplicate names", Config{Rules: []Rule{
			{Name: "a", Commands: []string{"get"}, Action: Deny},
			{Name: "a", Commands: []string{"set"}, Action: Deny}}},
			[]string{"rules[1] (a): name already used by rules[0]"}},
		{"default rule name", Config{Rules: []Rule{{Name: "deny-keys", Commands: []string{"keys"}, Action: Allow}}},
			[]string{"rules[0] (deny-keys): name is taken by a default rule"}},
		{"default rule name free without defaults", Config{NoDefaults: true, Rules: []Rule{{Name: "deny-keys", Commands: []string{"keys"}, Action: Deny}}},
			nil},
		{"reserved name", Config{Rules: []Rule{{Name: "bigkey-del", Commands: []string{"del"}, Action: Deny}}},
			[]string{"rules[0] (bigkey-del): name is taken by the big-key check"}},
		{"bad commands", Config{Rules: []Rule{{Name: "r", Commands: []string{"a b", "x|", "a|b|c", "get", "GET"}, Action: Deny}}},
			[]string{`command "a b"`, `command "x|"`, `command "a|b|c"`, `command "GET" is listed twice`}},
		{"bad addr", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Addrs: []string{"10.0.0.0/33", "nope", "10.0.0.1"}, Action: Deny}}},
			[]string{`"10.0.0.0/33" is not`, `"nope" is not`}},
		{"empty key pattern", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Keys: []string{""}, Action: Deny}}},
			[]string{"keys: an empty pattern"}},
		{"bad action", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Action: "drop"}}},
			[]string{`action must be allow, deny, rewrite or log, got "drop"`}},
		{"log without log_action", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Action: Log}}},
			[]string{"action log needs log_action deny or rewrite"}},
		{"log_action on a non-log rule", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Action: Deny, LogAction: Deny}}},
			[]string{"log_action is only for action log"}},
		{"message with CRLF", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Action: Deny, Message: "a\r\n+OK"}}},
			[]string{"message must not contain control characters"}},
		{"message on allow", Config{Rules: []Rule{{Name: "r", Commands: []string{"get"}, Action: Allow, Message: "x"}}},
			[]string{"message is only for deny rules"}},
		{"rewrite without target", Config{Rules: []Rule{{Name: "r", Commands: []string{"del"}, Action: Rewrite}}},
			[]string{"rewrite needs rewrite_to"}},
		{"log rewrite without target", Config{Rules: []Rule{{Name: "r", Commands: []string{"del"}, Action: Log, LogAction: Rewrite}}},
			[]string{"rewrite needs rewrite_to"}},
		{"bad rewrite target", Config{Rules: []Rule{{Name: "r", Commands: []string{"del"}, Action: Rewrite, RewriteTo: "un link"}}},
			[]string{`rewrite_to "un link"`}},
		{"rewrite_to on deny", Config{Rules: []Rule{{Name: "r", Commands: []string{"del"}, Action: Deny, RewriteTo: "unlink"}}},
			[]string{"rewrite_to is only for rewrite rules"}},
		{"big keys", Config{BigKeys: BigKeyConfig{DelMaxElements: -1, DelMaxBytes: -1, MaxValueBytes: -1, Action: Allow}},
			[]string{"big_keys.del_max_elements", "big_keys.del_max_bytes", "big_keys.max_value_bytes", "big_keys.action must be deny or rewrite"}},
		{"jitter", Config{Jitter: JitterConfig{MaxFraction: 1.5, Exclude: []string{""}}},
			[]string{"jitter.max_fraction must be between 0 and 1", "jitter.exclude: an empty pattern"}},
		{"default ttl without keys", Config{Jitter: JitterConfig{DefaultTTL: 3600e9}},
			[]string{"jitter.default_ttl needs default_ttl_keys"}},
		{"default ttl keys without ttl", Config{Jitter: JitterConfig{DefaultTTLKeys: []string{"*"}}},
			[]string{"jitter.default_ttl_keys is set but default_ttl is 0"}},
		{"default ttl not in ms", Config{Jitter: JitterConfig{DefaultTTL: 1500, DefaultTTLKeys: []string{"*"}}},
			[]string{"jitter.default_ttl must be a whole number of milliseconds"}},
		{"default config", DefaultConfig(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if _, nerr := New(tc.cfg, nil, nil); nerr == nil || !strings.HasPrefix(nerr.Error(), "policy: ") {
				t.Errorf("New accepted it or lacks context: %v", nerr)
			}
		})
	}
}

func TestMetricsAndDryRunLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p, err := New(Config{Rules: []Rule{
		{Name: "dry-get", Commands: []string{"get"}, Keys: []string{"user:*"}, Action: Log, LogAction: Deny},
		{Name: "allow-set", Commands: []string{"set"}, Action: Allow},
	}}, m, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	p.Check(cmd("GET user:1", keys("user:1"), user("app"), addr("10.0.0.7")))
	p.Check(cmd("GET user:2", keys("user:2")))
	p.Check(cmd("GET other", keys("other")))
	p.Check(cmd("SET k v", keys("k")))
	p.Check(cmd("KEYS *"))

	for _, c := range []struct {
		rule, action string
		want         float64
	}{{"dry-get", "log_deny", 2}, {"allow-set", "allow", 1}, {"deny-keys", "deny", 1}} {
		if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", c.rule, "action", c.action); got != c.want {
			t.Errorf("%s/%s counted %v, want %v", c.rule, c.action, got, c.want)
		}
	}

	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d log entries, want 2 (one per dry-run match): %v", len(entries), entries)
	}
	f := entries[0].ContextMap()
	if entries[0].Level != zapcore.InfoLevel || f["rule"] != "dry-get" || f["would"] != "deny" ||
		f["command"] != "get" || f["user"] != "app" || f["addr"] != "10.0.0.7" {
		t.Fatalf("dry-run entry: %v %v", entries[0].Level, f)
	}
	for _, e := range entries {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "user:") {
				t.Fatalf("a key reached the Info log in field %s: %v", k, e)
			}
		}
	}

	// A reload builds a new Policy on the same Metrics: counts continue.
	p2, err := New(Config{}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2.Check(cmd("KEYS *"))
	if got := counter(t, reg, "rproxy_policy_decisions_total", "rule", "deny-keys", "action", "deny"); got != 2 {
		t.Fatalf("after reload deny-keys counted %v, want 2", got)
	}
}

// TestConcurrentCheck: a Policy is shared by every session without locks.
func TestConcurrentCheck(t *testing.T) {
	p, _ := mustNew(t, Config{Rules: []Rule{
		{Name: "del-unlink", Commands: []string{"del"}, Action: Rewrite, RewriteTo: "unlink"},
		{Name: "dry", Commands: []string{"get"}, Action: Log, LogAction: Deny},
	}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				p.Check(cmd("DEL a", keys("a")))
				p.Check(cmd("GET a", keys("a")))
				p.Check(cmd("KEYS *"))
			}
		})
	}
	wg.Wait()
}

func TestCheckAllocsNothingWhenAllowed(t *testing.T) {
	p, _ := mustNew(t, Config{Rules: []Rule{
		{Name: "secret", Commands: []string{"get"}, Keys: []string{"secret:*"}, Users: []string{"app"}, Addrs: []string{"10.0.0.0/8"}, Action: Deny},
	}})
	for _, r := range []*Request{
		cmd("SET k v", keys("k")),
		cmd("GET public:1", keys("public:1"), user("app"), addr("10.0.0.1")),
		cmd("KEYS *"), // the deny path too: the reply is prebuilt
	} {
		if n := testing.AllocsPerRun(100, func() { p.Check(r) }); n != 0 {
			t.Errorf("%s: %v allocs per Check", r.Args[0], n)
		}
	}
}

func BenchmarkCheckNoRule(b *testing.B) {
	p, _ := mustNew(b, DefaultConfig())
	r := cmd("GET user:12345", keys("user:12345"), user("app"), addr("10.0.0.1"))
	b.ReportAllocs()
	for b.Loop() {
		p.Check(r)
	}
}

// BenchmarkCheckKeyRule: GET has a key rule that does not match, the
// common shape of a rule that guards a few keys of a hot command.
func BenchmarkCheckKeyRule(b *testing.B) {
	p, _ := mustNew(b, Config{Rules: []Rule{
		{Name: "secret", Commands: []string{"get", "set"}, Keys: []string{"secret:*", "*:token"}, Action: Deny},
	}})
	r := cmd("GET user:12345:profile", keys("user:12345:profile"), user("app"), addr("10.0.0.1"))
	b.ReportAllocs()
	for b.Loop() {
		if p.Check(r).Action != Allow {
			b.Fatal("denied")
		}
	}
}

func BenchmarkCheckDeny(b *testing.B) {
	p, _ := mustNew(b, DefaultConfig())
	r := cmd("KEYS *")
	b.ReportAllocs()
	for b.Loop() {
		p.Check(r)
	}
}

// NeedsKeys is true only for commands some rule matches by key, so the
// proxy extracts keys only where a rule looks at them.
func TestNeedsKeys(t *testing.T) {
	p, err := New(Config{Rules: []Rule{{Name: "r", Commands: []string{"get", "config|set"}, Keys: []string{"s:*"}, Action: Deny}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"get": true, "config": true, "set": false, "keys": false} {
		if got := p.NeedsKeys(name); got != want {
			t.Errorf("NeedsKeys(%q) = %v, want %v", name, got, want)
		}
	}
}
