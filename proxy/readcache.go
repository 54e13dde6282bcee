package proxy

import (
	"github.com/cespare/xxhash/v2"

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
// flags too (tierRead).
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

// tierRead reports whether a command is one of tierReads with exactly one
// key, args[1], as the table describes it: readonly, not blocking, keys at
// fixed positions.
func tierRead(info *command.Info, args [][]byte) bool {
	if len(args) < 2 || !tierReads[info.Name] || info.Subcommands != nil ||
		!info.Has(command.ReadOnly) || info.Flags&(command.Write|command.Blocking|command.MovableKeys) != 0 ||
		info.FirstKey != 1 {
		return false
	}
	// EXISTS takes any number of keys: one only here.
	return info.LastKey == 1 || len(args) == 2
}

// tierReadCmd counts a tierRead command on its key, queues the tier's copy
// of its reply when it holds one, and else asks for a fill when the key is
// hot or under a cached prefix. The copy's variant is the protocol and the
// command's exact bytes. served: the reply is queued; hot: the key is hot
// or cached, so the read is worth coalescing.
//
// ss.flights.key is used as scratch: readMaybeJoined rebuilds it.
func (s *Server) tierReadCmd(ss *session, key, raw []byte) (served, hot bool) {
	hot, fill := s.hot.observe(key, xxhash.Sum64(key))
	ss.flights.key = append(append(ss.flights.key[:0], byte(ss.proto)), raw...)
	if r, ok := s.hot.lookupVariant(key, ss.flights.key); ok {
		s.replyShared(ss, r)
		return true, true
	}
	if fill {
		s.hot.requestFillVariant(key, ss.flights.key)
	}
	return false, hot || fill
}
