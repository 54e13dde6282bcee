package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Action is what a rule does with a matching command.
type Action string

const (
	// Allow forwards the command unchanged.
	Allow Action = "allow"
	// Deny answers the client with "-DENIED <message>" and forwards nothing.
	Deny Action = "deny"
	// Rewrite replaces the command name (args[0]) and forwards the result.
	Rewrite Action = "rewrite"
	// Log is a dry run: the rule's LogAction is counted and logged, and the
	// command goes on to the next rules as if the rule were absent.
	Log Action = "log"
)

// Config is the whole policy: rules, big-key limits and TTL jitter.
type Config struct {
	Rules      []Rule // checked in order, before the defaults; first match wins
	NoDefaults bool   // true: DefaultRules are not appended
	BigKeys    BigKeyConfig
	Jitter     JitterConfig
	// Passthrough is auth.mode passthrough: a client that has AUTHed runs
	// as one of Redis's own ACL users and Redis decides what it may read
	// of Redis's users and settings, so the default credential rules
	// (deny-acl, deny-config-get-secrets) apply only to clients that have
	// not AUTHed (User ""), whose commands run as rproxy's upstream user.
	Passthrough bool
}

// DefaultConfig is the configuration a fresh install should run with: the
// default rules, big-key DEL checks on (10000 elements, 1 MiB, deny) and
// TTL jitter of up to 10%.
func DefaultConfig() Config {
	return Config{
		BigKeys: BigKeyConfig{DelMaxElements: 10000, DelMaxBytes: 1 << 20, Action: Deny},
		Jitter:  JitterConfig{MaxFraction: defaultMaxFraction},
	}
}

// Request is one client command as the proxy parsed it.
type Request struct {
	Name string   // lower-case canonical command name ("config", not "config|set")
	Args [][]byte // the arguments as sent; Args[0] is the command name in any case
	Keys [][]byte // the key arguments, from the command table's key specs (needed only when NeedsKeys)
	User string   // proxy user; "" when unauthenticated or the default user
	Addr netip.Addr
}

// Decision is the outcome of Check. Reply and the elements of Args may be
// shared with the Policy and other decisions: read them, never modify them.
type Decision struct {
	Action Action   // Allow, Deny or Rewrite; never Log
	Rule   string   // the deciding rule; for Allow, "" if no rule matched (or a dry-run rule's name)
	Reply  []byte   // Deny: the complete RESP error, "-DENIED <message>\r\n"
	Args   [][]byte // Rewrite: a new argument slice, args[0] replaced
}

// Policy is a compiled Config. It is immutable after New and safe for
// concurrent use; on reload the proxy builds a new one and swaps it in.
type Policy struct {
	index map[string][]entry // by top-level command name, in rule order
	// keyed: commands that some rule matches by key, so Request.Keys
	// matters for them; for the others the caller may leave Keys empty.
	keyed map[string]bool
	rules []*compiledRule // in order, operator rules then defaults
	log   *zap.Logger
	m     *Metrics

	big    bigKeys
	jitter jitter
}

// Metrics are the policy's Prometheus collectors. They outlive a Policy:
// create them once and pass them to every New.
type Metrics struct {
	decisions  *prometheus.CounterVec
	jitter     prometheus.Counter
	defaultTTL prometheus.Counter
}

// NewMetrics creates the collectors and registers them on reg (nil: not
// registered, as in tests). Like every stage, call it once per registry.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "policy",
			Name: "decisions_total",
			Help: "Commands a policy rule matched, by rule and action (allow, deny, rewrite; log_deny or log_rewrite for dry runs)."},
			[]string{"rule", "action"}),
		jitter: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "policy",
			Name: "jitter_applied_total", Help: "Cache writes whose TTL jitter spread below the one asked for."}),
		defaultTTL: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "rproxy", Subsystem: "policy",
			Name: "default_ttl_applied_total", Help: "SETs without a TTL that were given the default TTL."}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.jitter, m.defaultTTL)
	}
	return m
}

// Validate reports every problem in c at once (joined with errors.Join),
// each naming the rule by index and name or the setting by its path.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	reserved := map[string]string{bigKeyRule: "the big-key check", maxValueRule: "the value-size check"}
	if !c.NoDefaults {
		for _, r := range DefaultRules() {
			reserved[r.Name] = "a default rule (rename yours, or set policy.defaults: false)"
		}
	}
	seen := make(map[string]int, len(c.Rules))
	for i, r := range c.Rules {
		at := fmt.Sprintf("rules[%d] (%s)", i, r.Name)
		for _, e := range r.problems() {
			add("%s: %s", at, e)
		}
		if r.Name == "" {
			continue
		}
		if j, dup := seen[r.Name]; dup {
			add("%s: name already used by rules[%d]", at, j)
		} else {
			seen[r.Name] = i
		}
		if what, ok := reserved[r.Name]; ok {
			add("%s: name is taken by %s", at, what)
		}
	}
	errs = append(errs, c.BigKeys.problems()...)
	errs = append(errs, c.Jitter.problems()...)
	return errors.Join(errs...)
}

// New compiles cfg. m may be nil (unregistered metrics) and log may be nil
// (no logging); log is named "policy" here.
func New(cfg Config, m *Metrics, log *zap.Logger) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = zap.NewNop()
	}
	p := &Policy{index: make(map[string][]entry), keyed: make(map[string]bool), log: log.Named("policy"), m: m}

	rules := slices.Clip(cfg.Rules)
	if !cfg.NoDefaults {
		for _, r := range DefaultRules() {
			if cfg.Passthrough && credentialRules[r.Name] {
				r.Users = []string{""}
			}
			rules = append(rules, r)
		}
	}
	for i := range rules {
		c, err := compile(&rules[i], m)
		if err != nil { // Validate accepted it, so this is a bug here
			return nil, fmt.Errorf("policy: rule %q: %w", rules[i].Name, err)
		}
		p.rules = append(p.rules, c)
		for _, cmd := range rules[i].Commands {
			top, sub := splitCommand(cmd)
			p.index[top] = append(p.index[top], entry{rule: c, sub: sub})
			if len(c.keys) > 0 {
				p.keyed[top] = true
			}
		}
	}
	p.big = newBigKeys(cfg.BigKeys, m)
	p.jitter = newJitter(cfg.Jitter)
	return p, nil
}

// NeedsKeys reports whether a rule matches the command name by key, i.e.
// whether Check needs Request.Keys filled in. Extracting keys for every
// command would be work on the hot path that no rule looks at.
func (p *Policy) NeedsKeys(name string) bool {
	return len(p.keyed) > 0 && p.keyed[name] // no key rules (the defaults): no lookup
}

// Names reports whether a rule names the command (by its lower-case name):
// only then may Check refuse or rewrite it.
func (p *Policy) Names(name string) bool { return len(p.index[name]) > 0 }

// Check decides what to do with one command: the first matching rule's
// action, operator rules before the defaults. A dry-run (Log) rule that
// matches is counted and logged and does not stop the search, so turning a
// rule into a dry run never changes what happens to a command. A command no
// rule names costs one map lookup and allocates nothing.
func (p *Policy) Check(r *Request) Decision {
	entries := p.index[r.Name]
	var dry *compiledRule
	for i := range entries {
		e := &entries[i]
		if !e.match(r) {
			continue
		}
		c := e.rule
		c.count.Inc()
		switch c.action {
		case Log:
			p.logDryRun(c, r)
			if dry == nil {
				dry = c
			}
			continue
		case Deny:
			p.logDecision(c, r)
			return Decision{Action: Deny, Rule: c.name, Reply: c.reply}
		case Rewrite:
			p.logDecision(c, r)
			return Decision{Action: Rewrite, Rule: c.name, Args: rewriteArgs(r.Args, c.rewriteTo)}
		default:
			return Decision{Action: Allow, Rule: c.name}
		}
	}
	if dry != nil {
		return Decision{Action: Allow, Rule: dry.name}
	}
	return Decision{Action: Allow}
}

// rewriteArgs returns a copy of args with the name replaced; the caller's
// slice is left alone (it may be a parser buffer the session still reads).
func rewriteArgs(args [][]byte, name []byte) [][]byte {
	if len(args) == 0 {
		return [][]byte{name}
	}
	out := slices.Clone(args)
	out[0] = name
	return out
}

// logDryRun says what a Log rule would have done. Info, because an
// operator running a dry run wants to see it; never keys or values (they
// may be personal data), which appear at Debug only.
func (p *Policy) logDryRun(c *compiledRule, r *Request) {
	if ce := p.log.Check(zap.InfoLevel, "policy dry run: rule matched"); ce != nil {
		ce.Write(zap.String("rule", c.name), zap.String("would", string(c.logAction)),
			zap.String("command", r.Name), zap.String("user", r.User), zap.String("addr", addrString(r.Addr)))
	}
	p.debugKey(c, r)
}

// logDecision records an enforced deny or rewrite at Debug: the client
// already gets the message, and the counter is the operator's signal.
func (p *Policy) logDecision(c *compiledRule, r *Request) {
	if ce := p.log.Check(zap.DebugLevel, "policy rule applied"); ce != nil {
		ce.Write(zap.String("rule", c.name), zap.String("action", string(c.action)),
			zap.String("command", r.Name), zap.String("user", r.User), zap.String("addr", addrString(r.Addr)),
			zap.ByteString("key", firstKey(r.Keys)))
	}
}

func (p *Policy) debugKey(c *compiledRule, r *Request) {
	if len(r.Keys) == 0 {
		return
	}
	if ce := p.log.Check(zap.DebugLevel, "policy dry run: key"); ce != nil {
		ce.Write(zap.String("rule", c.name), zap.ByteString("key", r.Keys[0]))
	}
}

func firstKey(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
