// Package policy decides, for each client command, whether the proxy
// forwards it, refuses it or rewrites it, and adjusts the TTL of cache
// writes so that keys written together do not expire together.
//
// # Rules
//
// A Rule names commands ("keys", or "config|set" for a subcommand) and may
// narrow them by leading arguments (FLUSHALL ASYNC), key glob patterns (as
// Redis's KEYS matches them), proxy users and client addresses. Every
// dimension a rule sets must match; within one, any value may. The
// operator's rules are checked in order, then DefaultRules, and the first
// match decides:
//
//   - allow: forward unchanged (how an operator lets a user or an address
//     run a command a default rule refuses: the operator rule comes first);
//   - deny: answer "-DENIED <message>"; the message says what to do instead;
//   - rewrite: replace the command name (DEL to UNLINK) and forward;
//   - log: a dry run. The rule's LogAction is counted as log_deny or
//     log_rewrite and logged at Info, and the search goes on as if the
//     rule were absent, so a dry run never changes what a command gets.
//
// Rules are compiled once in New and indexed by command name: a command no
// rule names costs one map lookup and allocates nothing. A Policy is
// immutable; a reload builds a new one and the proxy swaps the pointer.
//
// # Defaults
//
// The defaults refuse what one client can use to hurt every other client
// of the same Redis (the comments in DefaultRules say why for each): KEYS
// (blocks Redis for the whole keyspace walk: use SCAN), FLUSHALL and
// FLUSHDB (irreversible; the operator allows them, e.g. only with ASYNC),
// server administration (DEBUG, SHUTDOWN, CONFIG SET and REWRITE, MONITOR,
// REPLICAOF, SLAVEOF, FAILOVER, MODULE LOAD), Redis's credentials (ACL
// subcommands that read or change users, CONFIG GET of a pattern that can
// match a password parameter: rproxy's clients share its upstream user),
// persistence on demand (SAVE, BGSAVE, BGREWRITEAOF), commands that change
// what every other client sees (SWAPDB, CLIENT PAUSE, SCRIPT FLUSH,
// FUNCTION FLUSH, ...), cluster topology changes (CLUSTER ADDSLOTS,
// SETSLOT, RESET, FORGET, MEET, ...) and CLIENT KILL other than by ID
// (behind a proxy it would close a shared connection), and PROXY RELOAD
// except from loopback. NoDefaults drops them all. With Passthrough the
// credential rules cover only clients that have not AUTHed: the others
// are Redis's own ACL users, and Redis decides.
//
// A rule's Patterns dimension is the reverse of Keys: the command's
// arguments are read as globs (as CONFIG GET reads them) and matched
// against the rule's names, so CONFIG GET * is refused by a rule naming
// requirepass.
//
// # Big keys
//
// DEL of a big collection or string frees it in the command and blocks
// Redis meanwhile; UNLINK frees it in the background. The proxy probes the
// keys of a DEL when BigKeyCheck says so, and DelVerdict decides; over the
// limit the DEL is refused with a message suggesting UNLINK, or rewritten to
// UNLINK. CheckValueSize refuses values over MaxValueBytes in the common
// value-writing commands. Both are counted like rules, as "bigkey-del" and
// "max-value".
//
// # TTL jitter
//
// Jitter lowers the TTL of cache writes (SET EX/PX, SETEX, PSETEX) by up to
// MaxFraction (10%), never to 0: never raised, so a key never lives longer
// than the client asked, and patterns that read TTL back (probabilistic
// early recomputation computes age as ttl - TTL(key)) or couple a key's
// TTL to another's (a tag set) keep working. Refreshes (GETEX, EXPIRE,
// PEXPIRE) are never touched: they drive sliding sessions and windows. SET
// NX/XX is left alone (locks and leases mean their exact lifetime), as are
// absolute expiries and KEEPTTL; the proxy skips commands inside MULTI/EXEC
// (TTLs set together there are coupled on purpose), and scripts' own calls
// are never seen. The spread is a function of the seed, the key, the
// TTL and its unit only, computed with integers: a retried write gets the
// same expiry, on any proxy with the same seed, on any platform. Anything
// the proxy does not fully understand is forwarded untouched, so Redis
// answers it as it would without the proxy.
//
// # Metrics and logs
//
// rproxy_policy_decisions_total{rule, action} counts rule matches;
// rproxy_policy_jitter_applied_total and
// rproxy_policy_default_ttl_applied_total count changed TTLs. Labels are
// rule names, never keys. Logs carry the rule, command, user and address;
// keys appear at Debug only, values never.
package policy
