package tier

import (
	"github.com/rproxy/rproxy/command"
)

// tierReads are the read-only single-key commands, besides GET, that the
// local tier holds and coalescing shares for a hot key: their reply is a
// function of the key's value alone (and the protocol), so client tracking's
// per-key invalidations keep a copy exact. The command table's flags are
// not enough to choose them: readonly single-key commands also include
// replies that depend on chance (SRANDMEMBER, HRANDFIELD, ZRANDMEMBER), on
// time (TTL, PTTL, EXPIRETIME, OBJECT IDLETIME/FREQ), or on other keys
// (SORT_RO's BY and GET), and Redis 7 keeps "nondeterministic" in command
// tips, which the table does not carry. So this list, checked against the
// flags too (Cacheable).
var tierReads = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range []string{
		// strings
		"strlen", "getrange", "substr", "getbit", "bitcount", "bitpos", "bitfield_ro",
		// hashes
		"hget", "hmget", "hgetall", "hkeys", "hvals", "hlen", "hexists", "hstrlen",
		// sets
		"smembers", "sismember", "smismember", "scard",
		// sorted sets
		"zrange", "zrevrange", "zrangebyscore", "zrevrangebyscore", "zrangebylex", "zrevrangebylex",
		"zscore", "zmscore", "zcard", "zcount", "zlexcount", "zrank", "zrevrank",
		// lists
		"lrange", "llen", "lindex", "lpos",
		// streams and geo
		"xlen", "xrange", "xrevrange", "geopos", "geodist", "geohash",
		// keys
		"exists", "type",
	} {
		m[name] = true
	}
	return m
}()

// Cacheable reports whether a command is one of tierReads with exactly one
// key, args[1], as the table describes it: readonly, not blocking, keys at
// fixed positions. The tier holds such a command's reply for a hot key
// (LookupVariant, RequestFillVariant).
func Cacheable(info *command.Info, args [][]byte) bool {
	if len(args) < 2 || !tierReads[info.Name] || info.Subcommands != nil ||
		!info.Has(command.ReadOnly) || info.Flags&(command.Write|command.Blocking|command.MovableKeys) != 0 ||
		info.FirstKey != 1 {
		return false
	}
	// EXISTS takes any number of keys: one only here.
	return info.LastKey == 1 || len(args) == 2
}
