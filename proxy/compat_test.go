package proxy_test

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// The compatibility test sends the same corpus of commands to a redis-server
// directly (A) and to an identical redis-server through rproxy (B), and
// requires byte-identical replies.

// compareMode says how the two replies of a corpus entry are compared.
type compareMode uint8

const (
	// exact: the raw reply bytes must be identical.
	exact compareMode = iota
	// unordered: the replies must be equal up to the order of elements in
	// aggregates (replies that list a hash-table-encoded set or the keyspace:
	// Redis seeds its dict hash randomly at startup, so two identical servers
	// iterate such collections in different orders).
	unordered
	// typeOnly: the reply is random (HRANDFIELD with a negative count, ...):
	// only the reply type, null-ness and element count must agree.
	typeOnly
)

// compatCase is one command of the corpus.
type compatCase struct {
	args []string
	mode compareMode
	// huge marks the 100 MB commands: run once (RESP2, one by one), left
	// out of the pipelined variant.
	huge bool
	// replySize is the expected reply size, when it is large.
	replySize int
	// bug, when set, names a known proxy bug this case reveals, so its
	// failure message says so. (No case is marked at the moment.)
	bug string
}

func cmd(args ...string) compatCase          { return compatCase{args: args} }
func unorderedCmd(args ...string) compatCase { return compatCase{args: args, mode: unordered} }
func randomCmd(args ...string) compatCase    { return compatCase{args: args, mode: typeOnly} }

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// dumpOfV is DUMP of the string "v" as Redis 7.0 (RDB 10) encodes it; newer
// servers restore it too.
const dumpOfV = "\x00\x01v\n\x00\x91\x08\xce\xb2\x198\x8a\xce"

const (
	scriptLoaded = "return 'loaded'"
	compatLib    = "#!lua name=compatlib\n" +
		"redis.register_function('echo1', function(keys, args) return args[1] end)\n" +
		"redis.register_function{function_name='getk', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}}\n" +
		"redis.register_function('tbl', function(keys, args) return {1, 'two', {3, {ok='FINE'}}} end)\n"
)

// compatCorpus returns the corpus. The 100 MB entries are included only when
// withHuge is set.
func compatCorpus(withHuge bool) []compatCase {
	mb := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	var bigHash []string
	bigHash = append(bigHash, "HSET", "h:big")
	for i := 0; i < 200; i++ {
		bigHash = append(bigHash, "field"+strconv.Itoa(i), "value"+strconv.Itoa(i))
	}
	var bigSet []string
	bigSet = append(bigSet, "SADD", "st:big")
	for i := 0; i < 300; i++ {
		bigSet = append(bigSet, strconv.Itoa(i*7))
	}

	c := []compatCase{
		// Connection-level commands that are plain forwards.
		cmd("PING"),
		cmd("PING", "hello world"),
		cmd("ECHO", "bin\x00ary\r\n"),
		cmd("ECHO", ""),
		cmd("SELECT", "0"),
		cmd("DBSIZE"),

		// Strings.
		cmd("SET", "s:1", "hello"),
		cmd("GET", "s:1"),
		cmd("GET", "nokey"),
		cmd("SET", "s:bin", "a\r\nb\x00c\xff"),
		cmd("GET", "s:bin"),
		cmd("STRLEN", "s:bin"),
		cmd("SET", "s:empty", ""),
		cmd("GET", "s:empty"),
		cmd("SET", "s:1", "world", "GET"),
		cmd("SET", "s:1", "x", "NX"),
		cmd("SET", "s:1", "y", "XX"),
		cmd("SET", "s:none", "y", "XX"),
		cmd("SET", "s:none", "y", "NX", "GET"),
		cmd("GET", "s:1"),
		cmd("SET", "s:ex", "v", "EX", "100000"),
		cmd("TTL", "s:ex"),
		cmd("SET", "s:ex", "v2", "KEEPTTL"),
		cmd("TTL", "s:ex"),
		cmd("SET", "s:exat", "v", "EXAT", "4102444800"),
		cmd("EXPIRETIME", "s:exat"),
		cmd("PEXPIRETIME", "s:exat"),
		cmd("SETEX", "s:setex", "100000", "v"),
		cmd("TTL", "s:setex"),
		cmd("PSETEX", "s:psetex", "100000000", "v"),
		cmd("TTL", "s:psetex"),
		cmd("GETEX", "s:1"),
		cmd("GETEX", "s:1", "EXAT", "4102444800"),
		cmd("EXPIRETIME", "s:1"),
		cmd("GETEX", "s:1", "PERSIST"),
		cmd("TTL", "s:1"),
		cmd("GETEX", "nokey"),
		cmd("GETDEL", "s:1"),
		cmd("GETDEL", "s:1"),
		cmd("EXISTS", "s:1"),
		cmd("APPEND", "s:app", "foo"),
		cmd("APPEND", "s:app", "bar"),
		cmd("GET", "s:app"),
		cmd("STRLEN", "s:app"),
		cmd("STRLEN", "nokey"),
		cmd("SETRANGE", "s:rng", "5", "hello"),
		cmd("GET", "s:rng"),
		cmd("SETRANGE", "s:rng", "0", "HE"),
		cmd("GETRANGE", "s:rng", "0", "-1"),
		cmd("GETRANGE", "s:rng", "3", "7"),
		cmd("GETRANGE", "s:rng", "-3", "-1"),
		cmd("GETRANGE", "s:rng", "100", "200"),
		cmd("SUBSTR", "s:rng", "0", "2"),
		cmd("MSET", "m:1", "a", "m:2", "b", "m:3", "c"),
		cmd("MGET", "m:1", "m:2", "nokey", "m:3"),
		cmd("MGET", "nokey1", "nokey2"),
		cmd("SETNX", "m:1", "z"),
		cmd("SETNX", "m:4", "d"),
		cmd("MSETNX", "m:4", "x", "m:5", "y"),
		cmd("MSETNX", "m:5", "x", "m:6", "y"),
		cmd("MGET", "m:4", "m:5", "m:6"),
		cmd("GETSET", "m:1", "newval"),
		cmd("GETSET", "m:new", "v"),
		cmd("MSET", "lcs:1", "ohmytext", "lcs:2", "mynewtext"),
		cmd("LCS", "lcs:1", "lcs:2"),
		cmd("LCS", "lcs:1", "lcs:2", "LEN"),
		cmd("LCS", "lcs:1", "lcs:2", "IDX", "MINMATCHLEN", "2", "WITHMATCHLEN"),
		cmd("OBJECT", "ENCODING", "m:1"),
		cmd("OBJECT", "ENCODING", "s:app"),

		// Counters.
		cmd("INCR", "c:1"),
		cmd("INCR", "c:1"),
		cmd("INCRBY", "c:1", "10"),
		cmd("DECR", "c:1"),
		cmd("DECRBY", "c:1", "5"),
		cmd("INCRBY", "c:1", "-100"),
		cmd("GET", "c:1"),
		cmd("OBJECT", "ENCODING", "c:1"),
		cmd("INCR", "s:app"),
		cmd("SET", "c:big", "9223372036854775807"),
		cmd("INCR", "c:big"),
		cmd("DECRBY", "c:neg", "-9223372036854775808"),
		cmd("INCRBYFLOAT", "c:f", "10.5"),
		cmd("INCRBYFLOAT", "c:f", "0.1"),
		cmd("INCRBYFLOAT", "c:f", "-5"),
		cmd("INCRBYFLOAT", "c:f", "5.0e3"),
		cmd("INCRBYFLOAT", "c:f", "1.23e-5"),
		cmd("INCRBYFLOAT", "c:f", "abc"),
		cmd("SET", "c:f2", "3.0"),
		cmd("INCRBYFLOAT", "c:f2", "0"),
		cmd("INCRBYFLOAT", "c:f3", "1e300"),
		cmd("INCRBYFLOAT", "c:f3", "1e308"),
		cmd("GET", "c:f2"),
		cmd("GET", "c:f"),

		// Bitmaps.
		cmd("SETBIT", "b:1", "7", "1"),
		cmd("SETBIT", "b:1", "100", "1"),
		cmd("SETBIT", "b:1", "7", "0"),
		cmd("SETBIT", "b:1", "6", "1"),
		cmd("GETBIT", "b:1", "6"),
		cmd("GETBIT", "b:1", "8"),
		cmd("GETBIT", "b:1", "100000"),
		cmd("BITCOUNT", "b:1"),
		cmd("BITCOUNT", "b:1", "0", "0"),
		cmd("BITCOUNT", "b:1", "0", "7", "BIT"),
		cmd("BITPOS", "b:1", "1"),
		cmd("BITPOS", "b:1", "0"),
		cmd("BITPOS", "b:1", "1", "2", "-1"),
		cmd("BITPOS", "b:1", "1", "7", "200", "BIT"),
		cmd("SET", "b:2", "\xff\xf0\x00"),
		cmd("BITOP", "AND", "b:and", "b:1", "b:2"),
		cmd("BITOP", "OR", "b:or", "b:1", "b:2"),
		cmd("BITOP", "XOR", "b:xor", "b:1", "b:2"),
		cmd("BITOP", "NOT", "b:not", "b:2"),
		cmd("GET", "b:and"),
		cmd("GET", "b:or"),
		cmd("GET", "b:xor"),
		cmd("GET", "b:not"),
		cmd("BITFIELD", "b:bf", "SET", "u8", "0", "255", "GET", "u8", "0", "INCRBY", "u4", "8", "3"),
		cmd("BITFIELD", "b:bf", "OVERFLOW", "SAT", "INCRBY", "i8", "0", "200"),
		cmd("BITFIELD", "b:bf", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "200"),
		cmd("BITFIELD_RO", "b:bf", "GET", "u16", "0"),
		cmd("SETBIT", "b:1", "-1", "1"),
		cmd("SETBIT", "b:1", "1", "2"),

		// Hashes.
		cmd("HSET", "h:1", "f1", "v1", "f2", "v2", "f3", "3"),
		cmd("HSET", "h:1", "f1", "v1b"),
		cmd("HGET", "h:1", "f1"),
		cmd("HGET", "h:1", "nofield"),
		cmd("HMGET", "h:1", "f1", "nofield", "f2"),
		cmd("HGETALL", "h:1"),
		cmd("HGETALL", "nokey"),
		cmd("HINCRBY", "h:1", "f3", "10"),
		cmd("HINCRBY", "h:1", "f1", "1"),
		cmd("HINCRBYFLOAT", "h:1", "f4", "2.5"),
		cmd("HINCRBYFLOAT", "h:1", "f4", "1e2"),
		cmd("HINCRBYFLOAT", "h:1", "f4", "-0.0001"),
		cmd("HDEL", "h:1", "f2", "nofield"),
		cmd("HLEN", "h:1"),
		cmd("HKEYS", "h:1"),
		cmd("HVALS", "h:1"),
		cmd("HEXISTS", "h:1", "f1"),
		cmd("HSETNX", "h:1", "f1", "x"),
		cmd("HSETNX", "h:1", "f5", "x"),
		cmd("HSTRLEN", "h:1", "f1"),
		cmd("HMSET", "h:2", "a", "1", "b", "2"),
		cmd("HRANDFIELD", "h:1", "100"),
		cmd("HRANDFIELD", "h:1", "100", "WITHVALUES"),
		randomCmd("HRANDFIELD", "h:1"),
		randomCmd("HRANDFIELD", "h:1", "2"),
		randomCmd("HRANDFIELD", "h:1", "-5", "WITHVALUES"),
		cmd("HRANDFIELD", "nokey", "3"),
		cmd("HSCAN", "h:1", "0"),
		cmd("HSCAN", "h:1", "0", "MATCH", "f*", "COUNT", "100"),
		cmd("OBJECT", "ENCODING", "h:1"),
		cmd(bigHash...),
		cmd("HLEN", "h:big"),
		cmd("HGET", "h:big", "field150"),
		unorderedCmd("HGETALL", "h:big"),
		unorderedCmd("HKEYS", "h:big"),
		cmd("OBJECT", "ENCODING", "h:big"),

		// Lists.
		cmd("LPUSH", "l:1", "a", "b", "c"),
		cmd("RPUSH", "l:1", "d", "e", "f"),
		cmd("LRANGE", "l:1", "0", "-1"),
		cmd("LRANGE", "l:1", "1", "3"),
		cmd("LRANGE", "l:1", "-2", "-1"),
		cmd("LRANGE", "nokey", "0", "-1"),
		cmd("LPOP", "l:1"),
		cmd("LPOP", "l:1", "2"),
		cmd("RPOP", "l:1"),
		cmd("LPOP", "nokey", "2"),
		cmd("LINDEX", "l:1", "0"),
		cmd("LINDEX", "l:1", "99"),
		cmd("LINSERT", "l:1", "BEFORE", "d", "X"),
		cmd("LINSERT", "l:1", "AFTER", "nope", "Y"),
		cmd("LSET", "l:1", "0", "Z"),
		cmd("LSET", "l:1", "99", "Z"),
		cmd("LRANGE", "l:1", "0", "-1"),
		cmd("LLEN", "l:1"),
		cmd("RPUSH", "l:2", "a", "b", "a", "c", "a"),
		cmd("LREM", "l:2", "2", "a"),
		cmd("LREM", "l:2", "-1", "a"),
		cmd("LRANGE", "l:2", "0", "-1"),
		cmd("RPUSH", "l:3", "1", "2", "3", "4", "5", "6"),
		cmd("LTRIM", "l:3", "1", "-2"),
		cmd("LRANGE", "l:3", "0", "-1"),
		cmd("RPUSH", "l:pos", "a", "b", "c", "1", "2", "3", "c", "c"),
		cmd("LPOS", "l:pos", "c"),
		cmd("LPOS", "l:pos", "c", "RANK", "-1"),
		cmd("LPOS", "l:pos", "c", "COUNT", "0"),
		cmd("LPOS", "l:pos", "c", "RANK", "2", "MAXLEN", "3"),
		cmd("LPOS", "l:pos", "zzz"),
		cmd("LMOVE", "l:3", "l:4", "LEFT", "RIGHT"),
		cmd("LMOVE", "l:3", "l:4", "RIGHT", "LEFT"),
		cmd("LRANGE", "l:4", "0", "-1"),
		cmd("LMPOP", "2", "nokey", "l:4", "LEFT", "COUNT", "10"),
		cmd("LMPOP", "1", "nokey", "RIGHT"),
		cmd("LPUSHX", "nokey", "a"),
		cmd("RPUSHX", "l:3", "z"),
		cmd("RPOPLPUSH", "l:3", "l:5"),
		cmd("LRANGE", "l:5", "0", "-1"),
		cmd("OBJECT", "ENCODING", "l:3"),

		// Sets. Integer sets are intsets, iterated in order; string sets are
		// hash tables, iterated in a per-server random order.
		cmd("SADD", "st:i", "5", "3", "1", "4", "2"),
		cmd("SADD", "st:i", "3"),
		cmd("SMEMBERS", "st:i"),
		cmd("SSCAN", "st:i", "0"),
		cmd("OBJECT", "ENCODING", "st:i"),
		cmd("SADD", "st:s", "apple", "banana", "cherry", "date"),
		unorderedCmd("SMEMBERS", "st:s"),
		cmd("SMEMBERS", "nokey"),
		cmd("SISMEMBER", "st:s", "apple"),
		cmd("SISMEMBER", "st:s", "zzz"),
		cmd("SMISMEMBER", "st:s", "apple", "zzz", "cherry"),
		cmd("SCARD", "st:s"),
		cmd("SADD", "st:t", "banana", "cherry", "egg"),
		unorderedCmd("SINTER", "st:s", "st:t"),
		unorderedCmd("SUNION", "st:s", "st:t"),
		unorderedCmd("SDIFF", "st:s", "st:t"),
		cmd("SINTER", "st:s", "nokey"),
		cmd("SINTERCARD", "2", "st:s", "st:t"),
		cmd("SINTERCARD", "2", "st:s", "st:t", "LIMIT", "1"),
		cmd("SINTERSTORE", "st:d1", "st:s", "st:t"),
		cmd("SUNIONSTORE", "st:d2", "st:s", "st:t"),
		cmd("SDIFFSTORE", "st:d3", "st:s", "st:t"),
		unorderedCmd("SMEMBERS", "st:d2"),
		cmd("SREM", "st:s", "apple", "nope"),
		cmd("SMOVE", "st:s", "st:t", "banana"),
		cmd("SMOVE", "st:s", "st:t", "nope"),
		unorderedCmd("SMEMBERS", "st:t"),
		cmd("SMOVE", "st:i", "st:i2", "5"),
		cmd("SMEMBERS", "st:i2"),
		cmd("OBJECT", "ENCODING", "st:s"),
		randomCmd("SRANDMEMBER", "st:i"),
		randomCmd("SRANDMEMBER", "st:i", "-6"),
		cmd("SADD", "st:pop", "7", "8", "9"),
		randomCmd("SPOP", "st:pop", "10"), // pops everything: state stays identical
		cmd("EXISTS", "st:pop"),
		cmd(bigSet...),
		cmd("SCARD", "st:big"),
		cmd("SISMEMBER", "st:big", "700"),
		unorderedCmd("SMEMBERS", "st:big"),
		cmd("OBJECT", "ENCODING", "st:big"),

		// Sorted sets.
		cmd("ZADD", "z:1", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"),
		cmd("ZADD", "z:1", "NX", "10", "a", "6", "f"),
		cmd("ZADD", "z:1", "XX", "CH", "1.5", "a", "100", "nope"),
		cmd("ZADD", "z:1", "GT", "CH", "0", "b", "7", "c"),
		cmd("ZADD", "z:1", "LT", "1", "e"),
		cmd("ZADD", "z:1", "INCR", "2", "a"),
		cmd("ZADD", "z:1", "NX", "XX", "1", "a"),
		cmd("ZADD", "z:1", "1"),
		cmd("ZADD", "z:1", "notanumber", "a"),
		cmd("ZRANGE", "z:1", "0", "-1", "WITHSCORES"),
		cmd("ZRANGE", "z:1", "0", "-1", "REV"),
		cmd("ZRANGE", "z:1", "2", "6", "BYSCORE", "LIMIT", "1", "2", "WITHSCORES"),
		cmd("ZRANGE", "z:1", "(7", "-inf", "BYSCORE", "REV", "WITHSCORES"),
		cmd("ZRANGE", "z:1", "+inf", "-inf", "BYSCORE", "REV", "LIMIT", "0", "3"),
		cmd("ZRANGEBYSCORE", "z:1", "-inf", "+inf", "WITHSCORES", "LIMIT", "0", "2"),
		cmd("ZREVRANGEBYSCORE", "z:1", "+inf", "(2"),
		cmd("ZREVRANGE", "z:1", "0", "1", "WITHSCORES"),
		cmd("ZADD", "z:lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e"),
		cmd("ZRANGEBYLEX", "z:lex", "[b", "(e"),
		cmd("ZRANGEBYLEX", "z:lex", "-", "+", "LIMIT", "1", "2"),
		cmd("ZREVRANGEBYLEX", "z:lex", "+", "[c"),
		cmd("ZRANGE", "z:lex", "[b", "[d", "BYLEX"),
		cmd("ZLEXCOUNT", "z:lex", "-", "+"),
		cmd("ZSCORE", "z:1", "a"),
		cmd("ZSCORE", "z:1", "nope"),
		cmd("ZMSCORE", "z:1", "a", "nope", "c"),
		cmd("ZINCRBY", "z:1", "0.25", "b"),
		cmd("ZINCRBY", "z:1", "1e3", "b"),
		cmd("ZRANK", "z:1", "c"),
		cmd("ZREVRANK", "z:1", "c"),
		cmd("ZRANK", "z:1", "nope"),
		cmd("ZCOUNT", "z:1", "1", "5"),
		cmd("ZCOUNT", "z:1", "(1", "+inf"),
		cmd("ZCARD", "z:1"),
		cmd("ZPOPMIN", "z:1"),
		cmd("ZPOPMAX", "z:1", "2"),
		cmd("ZPOPMIN", "nokey"),
		cmd("ZADD", "z:2", "1", "a", "2", "d", "3", "x"),
		cmd("ZUNIONSTORE", "z:u", "2", "z:1", "z:2", "WEIGHTS", "2", "3", "AGGREGATE", "MAX"),
		cmd("ZRANGE", "z:u", "0", "-1", "WITHSCORES"),
		cmd("ZINTER", "2", "z:1", "z:2", "WITHSCORES"),
		cmd("ZINTERSTORE", "z:i", "2", "z:1", "z:2"),
		cmd("ZINTERCARD", "2", "z:1", "z:2"),
		cmd("ZDIFF", "2", "z:1", "z:2", "WITHSCORES"),
		cmd("ZDIFFSTORE", "z:d", "2", "z:1", "z:2"),
		cmd("ZUNION", "2", "z:1", "z:2", "AGGREGATE", "MIN", "WITHSCORES"),
		cmd("ZMPOP", "1", "z:2", "MIN", "COUNT", "2"),
		cmd("ZMPOP", "2", "nokey", "z:u", "MAX"),
		cmd("ZMPOP", "1", "nokey", "MAX"),
		cmd("ZRANGESTORE", "z:rs", "z:1", "0", "1"),
		cmd("ZRANGE", "z:rs", "0", "-1", "WITHSCORES"),
		cmd("ZREM", "z:1", "nope", "c"),
		cmd("ZREMRANGEBYSCORE", "z:u", "-inf", "2"),
		cmd("ZREMRANGEBYRANK", "z:u", "0", "0"),
		cmd("ZREMRANGEBYLEX", "z:lex", "[a", "[b"),
		cmd("ZADD", "z:inf", "+inf", "x", "-inf", "y"),
		cmd("ZRANGE", "z:inf", "0", "-1", "WITHSCORES"),
		cmd("ZADD", "z:f", "3.14159265358979", "pi", "0.1", "tenth", "1e-10", "tiny", "123456789012345678", "huge"),
		cmd("ZRANGE", "z:f", "0", "-1", "WITHSCORES"),
		cmd("ZSCORE", "z:f", "pi"),
		cmd("ZADD", "z:nan", "nan", "x"),
		randomCmd("ZRANDMEMBER", "z:1"),
		randomCmd("ZRANDMEMBER", "z:1", "-3", "WITHSCORES"),
		cmd("ZSCAN", "z:1", "0"),
		cmd("OBJECT", "ENCODING", "z:1"),

		// Streams (explicit IDs only).
		cmd("XADD", "x:1", "1-1", "f", "v"),
		cmd("XADD", "x:1", "1-2", "f2", "v2", "g", "w"),
		cmd("XADD", "x:1", "2-0", "f", "v3"),
		cmd("XADD", "x:1", "1-0", "f", "v"),
		cmd("XADD", "x:none", "NOMKSTREAM", "1-1", "f", "v"),
		cmd("XADD", "x:1", "MAXLEN", "10", "3-*", "a", "b"),
		cmd("XADD", "x:1", "4-5", "a", "b"),
		cmd("XADD", "x:1", "bad-id", "a", "b"),
		cmd("XLEN", "x:1"),
		cmd("XLEN", "nokey"),
		cmd("XRANGE", "x:1", "-", "+"),
		cmd("XRANGE", "x:1", "1-2", "+", "COUNT", "2"),
		cmd("XRANGE", "x:1", "(1-1", "(3-0"),
		cmd("XREVRANGE", "x:1", "+", "-", "COUNT", "2"),
		cmd("XREAD", "COUNT", "2", "STREAMS", "x:1", "0-0"),
		cmd("XREAD", "STREAMS", "x:1", "nokey", "0", "0"),
		cmd("XREAD", "STREAMS", "x:1", "$"),
		cmd("XGROUP", "CREATE", "x:1", "g1", "0"),
		cmd("XGROUP", "CREATE", "x:1", "g1", "0"),
		cmd("XGROUP", "CREATE", "x:nostream", "g1", "0"),
		cmd("XGROUP", "CREATE", "x:mk", "g", "$", "MKSTREAM"),
		cmd("XGROUP", "CREATECONSUMER", "x:1", "g1", "alice"),
		cmd("XREADGROUP", "GROUP", "g1", "alice", "COUNT", "2", "STREAMS", "x:1", ">"),
		cmd("XREADGROUP", "GROUP", "g1", "bob", "COUNT", "10", "STREAMS", "x:1", ">"),
		cmd("XREADGROUP", "GROUP", "g1", "alice", "STREAMS", "x:1", "0"),
		cmd("XREADGROUP", "GROUP", "nogroup", "alice", "STREAMS", "x:1", ">"),
		cmd("XPENDING", "x:1", "g1"),
		randomCmd("XPENDING", "x:1", "g1", "-", "+", "10"), // holds idle times
		cmd("XPENDING", "x:1", "g1", "IDLE", "100000000", "-", "+", "10"),
		cmd("XACK", "x:1", "g1", "1-1", "99-0"),
		cmd("XCLAIM", "x:1", "g1", "carol", "0", "1-2", "JUSTID"),
		cmd("XCLAIM", "x:1", "g1", "carol", "0", "2-0"),
		cmd("XAUTOCLAIM", "x:1", "g1", "dave", "0", "0-0", "COUNT", "10"),
		cmd("XAUTOCLAIM", "x:1", "g1", "erin", "0", "0-0", "COUNT", "1", "JUSTID"),
		cmd("XINFO", "STREAM", "x:1"),
		cmd("XINFO", "GROUPS", "x:1"),
		cmd("XINFO", "STREAM", "x:mk"),
		cmd("XGROUP", "SETID", "x:1", "g1", "0"),
		cmd("XDEL", "x:1", "2-0", "99-9"),
		cmd("XTRIM", "x:1", "MAXLEN", "3"),
		cmd("XTRIM", "x:1", "MINID", "4-0"),
		cmd("XRANGE", "x:1", "-", "+"),
		cmd("XGROUP", "DELCONSUMER", "x:1", "g1", "alice"),
		cmd("XGROUP", "DESTROY", "x:1", "g1"),
		cmd("XINFO", "STREAM", "x:1"),

		// HyperLogLog.
		cmd("PFADD", "hll:1", "a", "b", "c", "d"),
		cmd("PFADD", "hll:1", "a"),
		cmd("PFCOUNT", "hll:1"),
		cmd("PFADD", "hll:2", "c", "d", "e", "f"),
		cmd("PFCOUNT", "hll:1", "hll:2"),
		cmd("PFMERGE", "hll:3", "hll:1", "hll:2"),
		cmd("PFCOUNT", "hll:3"),
		cmd("GET", "hll:3"),
		cmd("PFADD", "s:app", "x"),

		// Geo.
		cmd("GEOADD", "g:1", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"),
		cmd("GEOADD", "g:1", "NX", "2.349014", "48.864716", "Paris"),
		cmd("GEODIST", "g:1", "Palermo", "Catania"),
		cmd("GEODIST", "g:1", "Palermo", "Catania", "km"),
		cmd("GEODIST", "g:1", "Palermo", "nope"),
		cmd("GEOPOS", "g:1", "Palermo", "nope", "Catania"),
		cmd("GEOHASH", "g:1", "Palermo", "Catania", "nope"),
		cmd("GEOSEARCH", "g:1", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC", "WITHCOORD", "WITHDIST", "WITHHASH"),
		cmd("GEOSEARCH", "g:1", "FROMMEMBER", "Palermo", "BYBOX", "400", "400", "km", "DESC", "COUNT", "1"),
		cmd("GEOSEARCHSTORE", "g:2", "g:1", "FROMLONLAT", "15", "37", "BYRADIUS", "500", "km", "ASC", "STOREDIST"),
		cmd("ZRANGE", "g:2", "0", "-1", "WITHSCORES"),
		cmd("GEORADIUS", "g:1", "15", "37", "200", "km", "ASC", "WITHDIST"),
		cmd("GEOADD", "g:1", "200", "100", "bad"),

		// Lua scripts: every Lua type and its conversion.
		cmd("EVAL", "return nil", "0"),
		cmd("EVAL", "return 42", "0"),
		cmd("EVAL", "return -7", "0"),
		cmd("EVAL", "return 'hello'", "0"),
		cmd("EVAL", "return {1, 2, {3, 'four', {5}}, 'six'}", "0"),
		cmd("EVAL", "return {1, 2, nil, 4}", "0"),
		cmd("EVAL", "return {}", "0"),
		// Replies Redis sends that a strict RESP3 reading refuses: nesting
		// to Lua's stack limit (about 8,000 levels), and a big number with
		// spaces in it.
		cmd("EVAL", "local t = {}; t[1] = t; return t", "0"),
		cmd("EVAL", "return {big_number='123  123'}", "0"),
		cmd("PING"),
		cmd("EVAL", "return 3.99", "0"),
		cmd("EVAL", "return -3.99", "0"),
		cmd("EVAL", "return true", "0"),
		cmd("EVAL", "return false", "0"),
		cmd("EVAL", "return {ok='FINE'}", "0"),
		cmd("EVAL", "return {err='MYERR something'}", "0"),
		cmd("EVAL", "return redis.error_reply('bad thing')", "0"),
		cmd("EVAL", "return redis.status_reply('GOOD')", "0"),
		cmd("EVAL", "return {1.5, 'x', {ok='S'}, {err='E inner'}, true, false}", "0"),
		cmd("EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "lua:k", "val"),
		cmd("EVAL", "return redis.call('GET', KEYS[1])", "1", "lua:k"),
		cmd("EVAL", "return redis.call('GET', KEYS[1])", "1", "nokey"),
		cmd("EVAL", "return redis.call('HGETALL', KEYS[1])", "1", "h:1"),
		cmd("EVAL", "redis.setresp(3); return redis.call('HGETALL', KEYS[1])", "1", "h:1"),
		cmd("EVAL", "redis.setresp(3); return redis.call('ZSCORE', KEYS[1], 'f')", "1", "z:1"),
		cmd("EVAL", "redis.setresp(3); return redis.call('SMEMBERS', KEYS[1])", "1", "st:i"),
		cmd("EVAL", "return redis.call('INCR', KEYS[1])", "1", "s:app"),
		cmd("EVAL", "local r = redis.pcall('INCR', KEYS[1]); return r", "1", "s:app"),
		cmd("EVAL", "return #ARGV", "0", "a", "b", "c"),
		cmd("EVAL", "return ARGV", "0", "a", "b\x00c", ""),
		cmd("EVAL", "syntax error here", "0"),
		cmd("EVAL", "return redis.call('nosuchcmd')", "0"),
		cmd("EVAL", "return 1", "notanumber"),
		cmd("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "lua:k"),
		cmd("EVAL_RO", "return redis.call('SET', KEYS[1], 'x')", "1", "lua:k"),
		cmd("SCRIPT", "LOAD", scriptLoaded),
		cmd("EVALSHA", sha1hex(scriptLoaded), "0"),
		cmd("EVALSHA_RO", sha1hex(scriptLoaded), "0"),
		cmd("EVALSHA", "0000000000000000000000000000000000000000", "0"),
		cmd("SCRIPT", "EXISTS", sha1hex(scriptLoaded), "0000000000000000000000000000000000000000"),

		// Functions.
		cmd("FUNCTION", "LOAD", compatLib),
		cmd("FUNCTION", "LOAD", compatLib),
		cmd("FCALL", "echo1", "0", "hi"),
		cmd("FCALL", "getk", "1", "lua:k"),
		cmd("FCALL_RO", "getk", "1", "lua:k"),
		cmd("FCALL", "tbl", "0"),
		cmd("FCALL", "nofunc", "0"),
		// A library keeps its functions in a dict: their order differs
		// between two servers.
		unorderedCmd("FUNCTION", "LIST"),
		unorderedCmd("FUNCTION", "LIST", "LIBRARYNAME", "compat", "WITHCODE"),
		cmd("FUNCTION", "DELETE", "compatlib"),
		cmd("FUNCTION", "DELETE", "compatlib"),
		cmd("FUNCTION", "LIST"),

		// Keyspace.
		cmd("TYPE", "s:app"),
		cmd("TYPE", "h:1"),
		cmd("TYPE", "l:1"),
		cmd("TYPE", "st:s"),
		cmd("TYPE", "z:1"),
		cmd("TYPE", "x:1"),
		cmd("TYPE", "hll:1"),
		cmd("TYPE", "nokey"),
		cmd("EXPIRE", "nokey", "100000"),
		cmd("SET", "k:e", "v"),
		cmd("TTL", "k:e"),
		cmd("PTTL", "k:e"),
		cmd("PTTL", "nokey"),
		cmd("EXPIRE", "k:e", "100000"),
		cmd("TTL", "k:e"),
		cmd("EXPIRE", "k:e", "200000", "NX"),
		cmd("EXPIRE", "k:e", "300000", "GT"),
		cmd("TTL", "k:e"),
		cmd("PERSIST", "k:e"),
		cmd("PERSIST", "k:e"),
		cmd("TTL", "k:e"),
		cmd("EXPIREAT", "k:e", "4102444800"),
		cmd("EXPIRETIME", "k:e"),
		cmd("PEXPIREAT", "k:e", "4102444800123"),
		cmd("PEXPIRETIME", "k:e"),
		cmd("EXPIRE", "k:e", "abc"),
		cmd("EXISTS", "s:app", "h:1", "nokey", "s:app"),
		cmd("DEL", "m:1", "m:2", "nokey"),
		cmd("UNLINK", "m:3", "nokey"),
		cmd("TOUCH", "s:app", "nokey"),
		cmd("RENAME", "s:app", "s:app2"),
		cmd("RENAME", "nokey", "x"),
		cmd("RENAMENX", "s:app2", "h:1"),
		cmd("COPY", "h:1", "h:copy"),
		cmd("COPY", "h:1", "h:copy"),
		cmd("COPY", "h:2", "h:copy", "REPLACE"),
		cmd("HGETALL", "h:copy"),
		cmd("SET", "k:dump", "v"),
		cmd("DUMP", "k:dump"),
		cmd("DUMP", "h:1"),
		cmd("DUMP", "nokey"),
		cmd("RESTORE", "k:rest", "0", dumpOfV),
		cmd("GET", "k:rest"),
		cmd("RESTORE", "k:rest", "0", dumpOfV),
		cmd("RESTORE", "k:rest", "0", dumpOfV, "REPLACE"),
		cmd("RESTORE", "k:bad", "0", "garbage"),
		cmd("RPUSH", "so:1", "3", "1", "2", "10"),
		cmd("SORT", "so:1"),
		cmd("SORT", "so:1", "DESC"),
		cmd("SORT", "so:1", "ALPHA"),
		cmd("SORT", "so:1", "LIMIT", "1", "2"),
		cmd("RPUSH", "so:s", "b", "a", "c"),
		cmd("SORT", "so:s"),
		cmd("SORT", "so:s", "ALPHA", "DESC"),
		cmd("MSET", "w_1", "30", "w_2", "10", "w_3", "20", "w_10", "0"),
		cmd("SORT", "so:1", "BY", "w_*"),
		cmd("SORT", "so:1", "BY", "w_*", "GET", "#", "GET", "w_*"),
		cmd("SORT", "so:1", "STORE", "so:dst"),
		cmd("LRANGE", "so:dst", "0", "-1"),
		cmd("SORT_RO", "so:1", "DESC"),
		cmd("SORT", "st:s", "ALPHA"),
		cmd("OBJECT", "FREQ", "s:app2"),
		cmd("OBJECT", "ENCODING", "nokey"),
		cmd("OBJECT", "REFCOUNT", "c:1"),
		cmd("DBSIZE"),
		unorderedCmd("KEYS", "s:*"),
		unorderedCmd("KEYS", "*"),
		unorderedCmd("SCAN", "0", "COUNT", "10000"),
		unorderedCmd("SCAN", "0", "MATCH", "h:*", "COUNT", "10000", "TYPE", "hash"),
		cmd("COMMAND", "COUNT"),
		cmd("COMMAND", "INFO", "GET", "ZADD"),
		cmd("COMMAND", "GETKEYS", "SET", "k", "v"),

		// Wrong-type errors.
		cmd("GET", "h:1"),
		cmd("LPUSH", "s:app2", "x"),
		cmd("HGET", "l:1", "f"),
		cmd("SADD", "z:1", "m"),
		cmd("ZADD", "st:s", "1", "m"),
		cmd("XADD", "h:1", "1-1", "f", "v"),
		cmd("INCR", "h:1"),
		cmd("SMEMBERS", "h:1"),
		cmd("ZRANGE", "l:1", "0", "-1"),
		cmd("XRANGE", "s:app2", "-", "+"),

		// Wrong arity.
		cmd("GET"),
		cmd("GET", "a", "b"),
		cmd("SET", "k"),
		cmd("HSET", "h:1", "f"),
		cmd("LPUSH", "l:1"),
		cmd("ZADD", "z:1"),
		cmd("XADD", "x:1"),
		cmd("EVAL"),
		cmd("OBJECT"),
		cmd("XINFO"),

		// Unknown commands and subcommands.
		cmd("FOOBAR"),
		cmd("FOOBAR", "a", "b"),
		cmd("NOTACOMMAND", strings.Repeat("x", 200)),
		cmd("OBJECT", "NOPE"),
		cmd("XINFO", "NOPE", "x:1"),
		cmd("CLIENT", "NOPE"),
		cmd("SCRIPT", "NOPE"),

		// Syntax errors.
		cmd("SET", "k", "v", "EX"),
		cmd("SET", "k", "v", "EX", "abc"),
		cmd("SET", "k", "v", "NX", "XX"),
		cmd("SET", "k", "v", "EX", "-5"),
		cmd("SETEX", "k", "-10", "v"),
		cmd("ZRANGE", "z:1", "0", "-1", "LIMIT", "1", "2"),
		cmd("LPOS", "l:1", "a", "RANK", "0"),
		cmd("BITCOUNT", "b:1", "0"),
		cmd("LRANGE", "l:1", "a", "b"),
		cmd("HINCRBYFLOAT", "h:1", "f4", "nan"),
		cmd("SCAN", "abc"),
		cmd("GEOSEARCH", "g:1", "FROMLONLAT", "15", "37"),
		cmd("XREAD", "STREAMS", "x:1"),
		cmd("SORT", "so:1", "LIMIT", "1"),

		// Large values.
		cmd("SET", "big:1m", mb),
		cmd("GET", "big:1m"),
		cmd("STRLEN", "big:1m"),
		cmd("APPEND", "big:1m", "tail"),
		cmd("GETRANGE", "big:1m", "1048570", "-1"),
		cmd("RPUSH", "l:bigv", mb, "small", mb),
		cmd("LRANGE", "l:bigv", "0", "-1"),
		cmd("HSET", "h:bigv", "f", mb),
		cmd("HGETALL", "h:bigv"),
		cmd("DEL", "big:1m", "l:bigv", "h:bigv"),
		cmd("DBSIZE"),
	}
	if withHuge {
		huge := strings.Repeat("rproxy-100MB-value-", (100<<20)/19+1)[:100<<20]
		c = append(c,
			compatCase{args: []string{"SET", "big:100m", huge}, huge: true},
			compatCase{args: []string{"STRLEN", "big:100m"}, huge: true},
			compatCase{args: []string{"GET", "big:100m"}, huge: true, replySize: len(huge) + 64},
			compatCase{args: []string{"DEL", "big:100m"}, huge: true},
		)
	}
	return c
}

// compatEnv is two identical redis-servers, A direct and B behind rproxy.
type compatEnv struct {
	a, b  *redistest.Server
	proxy *proxytest.Proxy
}

func startCompatEnv(t *testing.T) *compatEnv {
	t.Helper()
	a := redistest.Start(t)
	b := redistest.Start(t)
	p := proxytest.Start(t, b.Addr, func(c *proxy.Config) {
		// A 100 MB value takes a while to cross the proxy under -race.
		c.Upstream.Timeout = 30 * time.Second
	})
	return &compatEnv{a: a, b: b, proxy: p}
}

// reset empties both servers (data, functions and the script cache), going
// to B directly.
func (e *compatEnv) reset(t *testing.T) {
	t.Helper()
	for _, s := range []*redistest.Server{e.a, e.b} {
		for _, c := range [][]string{{"FLUSHALL"}, {"FUNCTION", "FLUSH"}, {"SCRIPT", "FLUSH"}} {
			if r := s.Do(t, c...); string(r) != "+OK\r\n" {
				t.Fatalf("%s %v: got %q", s.Addr, c, r)
			}
		}
	}
}

// rawConn is one raw RESP connection.
type rawConn struct {
	name string
	c    net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func dialRaw(t *testing.T, name, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s (%s): %v", name, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{name: name, c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}
}

// do sends one command and reads its reply.
func (rc *rawConn) do(t *testing.T, args ...string) []byte {
	t.Helper()
	return rc.doHint(t, 0, args...)
}

// doHint is do with the expected reply size, so a 100 MB reply is read into
// one allocation (growing it step by step is slow under -race).
func (rc *rawConn) doHint(t *testing.T, replySize int, args ...string) []byte {
	t.Helper()
	if err := rc.c.SetDeadline(time.Now().Add(90 * time.Second)); err != nil {
		t.Fatal(err)
	}
	size := 16
	for _, a := range args {
		size += len(a) + 16
	}
	if _, err := rc.w.Write(resp.AppendCommandString(make([]byte, 0, size), args...)); err != nil {
		t.Fatalf("%s: writing %s: %v", rc.name, fmtArgs(args), err)
	}
	if err := rc.w.Flush(); err != nil {
		t.Fatalf("%s: writing %s: %v", rc.name, fmtArgs(args), err)
	}
	r, err := resp.ReadReply(rc.r, make([]byte, 0, replySize))
	if err != nil {
		t.Fatalf("%s: reading the reply to %s: %v (read so far %s)", rc.name, fmtArgs(args), err, quote(r))
	}
	return r
}

// quote quotes b, truncated to 300 bytes.
func quote(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// fmtArgs renders a command for messages, shortening long arguments.
func fmtArgs(args []string) string {
	parts := make([]string, len(args))
	for i, a := range args {
		if len(a) > 60 {
			parts[i] = fmt.Sprintf("%q...(%d bytes)", a[:60], len(a))
		} else {
			parts[i] = strconv.Quote(a)
		}
	}
	s := "[" + strings.Join(parts, " ") + "]"
	if len(s) > 400 {
		s = s[:400] + fmt.Sprintf("... (%d args)]", len(args))
	}
	return s
}

// canonical renders a parsed reply; with sortAggr the elements of every
// aggregate (map entries as pairs) are sorted, so two replies that differ
// only in element order render the same.
func canonical(v resp.Value, sortAggr bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%c", v.Kind)
	if v.Null {
		b.WriteString("null")
		return b.String()
	}
	switch v.Kind {
	case '*', '~', '>', '%', '|':
		var elems []string
		if v.Kind == '%' || v.Kind == '|' {
			for i := 0; i+1 < len(v.Elems); i += 2 {
				elems = append(elems, canonical(v.Elems[i], sortAggr)+"=>"+canonical(v.Elems[i+1], sortAggr))
			}
		} else {
			for _, e := range v.Elems {
				elems = append(elems, canonical(e, sortAggr))
			}
		}
		if sortAggr {
			sort.Strings(elems)
		}
		fmt.Fprintf(&b, "%d[%s]", len(elems), strings.Join(elems, ","))
	case ':', '#':
		fmt.Fprintf(&b, "%d", v.Int)
	default:
		fmt.Fprintf(&b, "%q", v.Str)
	}
	return b.String()
}

// compareReplies returns "" if direct and proxied agree under mode, else a
// description of the difference.
func compareReplies(mode compareMode, direct, proxied []byte) string {
	if bytes.Equal(direct, proxied) {
		return ""
	}
	if mode == exact {
		return "replies differ"
	}
	dv, err := resp.Parse(direct)
	if err != nil {
		return fmt.Sprintf("direct reply does not parse: %v", err)
	}
	pv, err := resp.Parse(proxied)
	if err != nil {
		return fmt.Sprintf("proxied reply does not parse: %v", err)
	}
	switch mode {
	case unordered:
		if canonical(dv, true) != canonical(pv, true) {
			return "replies differ even ignoring element order"
		}
	case typeOnly:
		if dv.Kind != pv.Kind || dv.Null != pv.Null || len(dv.Elems) != len(pv.Elems) {
			return fmt.Sprintf("random replies differ in type or length (%c null=%v len=%d vs %c null=%v len=%d)",
				dv.Kind, dv.Null, len(dv.Elems), pv.Kind, pv.Null, len(pv.Elems))
		}
	}
	return ""
}

func reportMismatch(t *testing.T, i int, c compatCase, why string, direct, proxied []byte) {
	t.Helper()
	bug := ""
	if c.bug != "" {
		bug = "\n  KNOWN PROXY BUG: " + c.bug
	}
	t.Errorf("corpus[%d] %s: %s%s\n  direct redis: %s\n  via rproxy:   %s", i, fmtArgs(c.args), why, bug, quote(direct), quote(proxied))
}

// hello3 switches both connections to RESP3 and checks both got a map.
func hello3(t *testing.T, direct, proxied *rawConn) {
	t.Helper()
	d := direct.do(t, "HELLO", "3")
	p := proxied.do(t, "HELLO", "3")
	if len(d) == 0 || d[0] != '%' || len(p) == 0 || p[0] != '%' {
		t.Fatalf("HELLO 3: want a RESP3 map from both sides\n  direct redis: %s\n  via rproxy:   %s", quote(d), quote(p))
	}
	// The id field differs (rproxy gives its session's id,
	// TestHelloGivesSessionID), the rest must be the same.
	dv, _ := resp.Parse(d)
	pv, _ := resp.Parse(p)
	if len(dv.Elems) != len(pv.Elems) {
		t.Fatalf("HELLO 3 maps differ in size\n  direct redis: %s\n  via rproxy:   %s", quote(d), quote(p))
	}
	for i := 0; i+1 < len(dv.Elems); i += 2 {
		if string(dv.Elems[i].Str) == "id" {
			continue
		}
		if canonical(dv.Elems[i], false) != canonical(pv.Elems[i], false) || canonical(dv.Elems[i+1], false) != canonical(pv.Elems[i+1], false) {
			t.Errorf("HELLO 3 field %q differs\n  direct redis: %s\n  via rproxy:   %s", dv.Elems[i].Str, quote(d), quote(p))
		}
	}
}

func runCompatSequential(t *testing.T, e *compatEnv, proto int, corpus []compatCase) {
	e.reset(t)
	runCompatSequentialNoReset(t, e, proto, corpus)
}

// runCompatSequentialNoReset is runCompatSequential on servers the caller
// has emptied.
func runCompatSequentialNoReset(t *testing.T, e *compatEnv, proto int, corpus []compatCase) {
	direct := dialRaw(t, "direct redis", e.a.Addr)
	proxied := dialRaw(t, "rproxy", e.proxy.Addr)
	if proto == 3 {
		hello3(t, direct, proxied)
	}
	mismatches := 0
	for i, c := range corpus {
		t0 := time.Now()
		d := direct.doHint(t, c.replySize, c.args...)
		t1 := time.Now()
		p := proxied.doHint(t, c.replySize, c.args...)
		if c.huge {
			t.Logf("%s: direct %v, via rproxy %v", fmtArgs(c.args[:2]), t1.Sub(t0), time.Since(t1))
		}
		if why := compareReplies(c.mode, d, p); why != "" {
			reportMismatch(t, i, c, why, d, p)
			mismatches++
		}
	}
	t.Logf("RESP%d: %d commands compared one by one, %d mismatches", proto, len(corpus), mismatches)
}

// pipelineAll writes every command in one write (from a goroutine, so the
// replies are read while the commands are still being sent) and reads all
// replies.
func pipelineAll(t *testing.T, rc *rawConn, cmds [][]string) [][]byte {
	t.Helper()
	var buf []byte
	for _, c := range cmds {
		buf = resp.AppendCommandString(buf, c...)
	}
	if err := rc.c.SetDeadline(time.Now().Add(120 * time.Second)); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := rc.c.Write(buf)
		werr <- err
	}()
	replies := make([][]byte, 0, len(cmds))
	for i := range cmds {
		r, err := resp.ReadReply(rc.r, nil)
		if err != nil {
			t.Fatalf("%s: pipelined reply %d of %d (to %s): %v (read so far %s)", rc.name, i, len(cmds), fmtArgs(cmds[i]), err, quote(r))
		}
		replies = append(replies, r)
	}
	if err := <-werr; err != nil {
		t.Fatalf("%s: writing the pipeline: %v", rc.name, err)
	}
	return replies
}

func runCompatPipelined(t *testing.T, e *compatEnv, proto int, corpus []compatCase) {
	e.reset(t)
	runCompatPipelinedNoReset(t, e, proto, corpus)
}

// runCompatPipelinedNoReset is runCompatPipelined on servers the caller has
// emptied.
func runCompatPipelinedNoReset(t *testing.T, e *compatEnv, proto int, corpus []compatCase) {
	direct := dialRaw(t, "direct redis", e.a.Addr)
	proxied := dialRaw(t, "rproxy", e.proxy.Addr)
	var cmds [][]string
	if proto == 3 {
		// HELLO goes in the same write as the corpus.
		cmds = append(cmds, []string{"HELLO", "3"})
	}
	for _, c := range corpus {
		cmds = append(cmds, c.args)
	}
	dr := pipelineAll(t, direct, cmds)
	pr := pipelineAll(t, proxied, cmds)
	off := 0
	if proto == 3 {
		off = 1
		if dr[0][0] != '%' || pr[0][0] != '%' {
			t.Fatalf("pipelined HELLO 3: want a map from both sides\n  direct redis: %s\n  via rproxy:   %s", quote(dr[0]), quote(pr[0]))
		}
	}
	mismatches := 0
	for i, c := range corpus {
		if why := compareReplies(c.mode, dr[i+off], pr[i+off]); why != "" {
			reportMismatch(t, i, c, "pipelined: "+why, dr[i+off], pr[i+off])
			mismatches++
		}
	}
	t.Logf("RESP%d: %d commands compared in one pipeline, %d mismatches", proto, len(corpus), mismatches)
}

// TestCompatCorpusSize keeps the corpus from shrinking by accident.
func TestCompatCorpusSize(t *testing.T) {
	if n := len(compatCorpus(false)); n < 250 {
		t.Fatalf("compatibility corpus has %d commands, want at least 250", n)
	}
}

// TestCompat runs the corpus against direct Redis and through rproxy, one
// command at a time in RESP2 (with the 100 MB value) and in RESP3, then all
// in one pipeline in each protocol. Both servers are flushed between runs.
func TestCompat(t *testing.T) {
	e := startCompatEnv(t)
	full := compatCorpus(true)
	corpus := compatCorpus(false)
	t.Run("RESP2", func(t *testing.T) { runCompatSequential(t, e, 2, full) })
	t.Run("RESP3", func(t *testing.T) { runCompatSequential(t, e, 3, corpus) })
	t.Run("PipelinedRESP2", func(t *testing.T) { runCompatPipelined(t, e, 2, corpus) })
	t.Run("PipelinedRESP3", func(t *testing.T) { runCompatPipelined(t, e, 3, corpus) })
}

// TestCompatCompare checks the comparison itself, so the corpus run cannot
// pass by comparing too little.
func TestCompatCompare(t *testing.T) {
	for _, c := range []struct {
		mode       compareMode
		a, b       string
		wantDiffer bool
	}{
		{exact, "$1\r\na\r\n", "$1\r\na\r\n", false},
		{exact, "$1\r\na\r\n", "$1\r\nb\r\n", true},
		{exact, "*2\r\n$1\r\na\r\n$1\r\nb\r\n", "*2\r\n$1\r\nb\r\n$1\r\na\r\n", true},
		{unordered, "*2\r\n$1\r\na\r\n$1\r\nb\r\n", "*2\r\n$1\r\nb\r\n$1\r\na\r\n", false},
		{unordered, "*2\r\n$1\r\na\r\n$1\r\nb\r\n", "*2\r\n$1\r\na\r\n$1\r\nc\r\n", true},
		{unordered, "~2\r\n$1\r\na\r\n$1\r\nb\r\n", "*2\r\n$1\r\nb\r\n$1\r\na\r\n", true},
		{unordered, "%1\r\n$1\r\na\r\n$1\r\nb\r\n", "%1\r\n$1\r\nb\r\n$1\r\na\r\n", true},
		{typeOnly, "*2\r\n$1\r\na\r\n$1\r\nb\r\n", "*2\r\n$1\r\nc\r\n$1\r\nd\r\n", false},
		{typeOnly, "*2\r\n$1\r\na\r\n$1\r\nb\r\n", "*1\r\n$1\r\nc\r\n", true},
		{typeOnly, "$1\r\na\r\n", "$-1\r\n", true},
		{typeOnly, "$1\r\na\r\n", "-ERR x\r\n", true},
	} {
		why := compareReplies(c.mode, []byte(c.a), []byte(c.b))
		if (why != "") != c.wantDiffer {
			t.Errorf("compareReplies(mode %d, %q, %q) = %q, want differ=%v", c.mode, c.a, c.b, why, c.wantDiffer)
		}
	}
}
