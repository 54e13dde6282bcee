package policy

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// BigKeyConfig limits deletes and writes that block Redis.
//
// DEL frees a value in the calling command: a hash of a million fields
// keeps Redis from serving anyone else for the whole free. UNLINK answers at
// once and frees in a background thread. The proxy probes DEL's keys (TYPE
// and the length) when BigKeyCheck says so and asks DelVerdict.
type BigKeyConfig struct {
	DelMaxElements int64  // DEL of a list, set, zset, hash or stream with more elements is over; 0 = off (DefaultConfig: 10000)
	DelMaxBytes    int64  // DEL of a string longer than this is over; 0 = off (DefaultConfig: 1 MiB)
	Action         Action // what the proxy does with an over DEL: deny ("" means deny) or rewrite (to UNLINK)
	MaxValueBytes  int64  // writes with a value argument longer than this are refused; 0 = off (the default)
}

func (b BigKeyConfig) problems() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.DelMaxElements < 0 {
		add("big_keys.del_max_elements must be >= 0 (0 turns the check off), got %d", b.DelMaxElements)
	}
	if b.DelMaxBytes < 0 {
		add("big_keys.del_max_bytes must be >= 0 (0 turns the check off), got %d", b.DelMaxBytes)
	}
	if b.MaxValueBytes < 0 {
		add("big_keys.max_value_bytes must be >= 0 (0 turns the check off), got %d", b.MaxValueBytes)
	}
	if b.Action != "" && b.Action != Deny && b.Action != Rewrite {
		add("big_keys.action must be deny or rewrite, got %q", b.Action)
	}
	return errs
}

type bigKeys struct {
	maxElements, maxBytes, maxValue int64
	action                          Action
	delCount, valueCount            prometheus.Counter
}

func newBigKeys(c BigKeyConfig, m *Metrics) bigKeys {
	b := bigKeys{maxElements: c.DelMaxElements, maxBytes: c.DelMaxBytes, maxValue: c.MaxValueBytes, action: c.Action}
	if b.action == "" {
		b.action = Deny
	}
	b.delCount = m.decisions.WithLabelValues(bigKeyRule, string(b.action))
	b.valueCount = m.decisions.WithLabelValues(maxValueRule, string(Deny))
	return b
}

// BigKeyCheck reports whether DEL needs a size probe at all.
func (p *Policy) BigKeyCheck() bool { return p.big.maxElements > 0 || p.big.maxBytes > 0 }

// BigKeyAction is what the proxy does with a DEL that DelVerdict finds
// over: Deny (send the reply) or Rewrite (send UNLINK with the same keys).
func (p *Policy) BigKeyAction() Action { return p.big.action }

// DelVerdict says whether deleting key, of redisType (as TYPE answers:
// string, list, set, zset, hash, stream) and size (STRLEN for a string, the
// element count otherwise), is over the limits. Other types (none, module
// types) are never over. For the deny action, reply is the complete
// "-DENIED ..." error naming the key, its type and size and suggesting
// UNLINK; for rewrite it is nil. Each over key is counted under the rule
// "bigkey-del".
func (p *Policy) DelVerdict(key []byte, redisType string, size int64) (over bool, reply []byte) {
	b := &p.big
	var unit string
	switch redisType {
	case "string":
		over, unit = b.maxBytes > 0 && size > b.maxBytes, "bytes"
	case "list", "set", "zset", "hash", "stream":
		over, unit = b.maxElements > 0 && size > b.maxElements, "elements"
	}
	if !over {
		return false, nil
	}
	b.delCount.Inc()
	if ce := p.log.Check(zap.DebugLevel, "policy: big key delete"); ce != nil {
		ce.Write(zap.String("rule", bigKeyRule), zap.String("type", redisType), zap.Int64("size", size),
			zap.String("action", string(b.action)), zap.ByteString("key", key))
	}
	if b.action != Deny {
		return true, nil
	}
	reply = fmt.Appendf(nil, "-DENIED DEL of %s (%s, %d %s) would block Redis while it frees the value; use UNLINK, which frees it in the background (rule %s)\r\n",
		quoteKey(key), redisType, size, unit, bigKeyRule)
	return true, reply
}

// quoteKey renders a key for an error reply: quoted, escaped (so no CR or
// LF can end the RESP error early) and cut to a readable length.
func quoteKey(key []byte) string {
	const max = 64
	if len(key) > max {
		return strconv.QuoteToASCII(string(key[:max])) + "..."
	}
	return strconv.QuoteToASCII(string(key))
}

// valueArgs says where the value arguments of a value-writing command are:
// args[start], then every step-th after it (step 0: only args[start]).
// The list is the common writes of one value a client might make too big:
//
//	set, setnx, getset, append           key value
//	setex, psetex                        key ttl value
//	setrange                             key offset value
//	lset                                 key index value
//	hsetnx                               key field value
//	linsert                              key BEFORE|AFTER pivot value
//	mset, msetnx                         key value [key value ...]
//	hset, hmset                          key field value [field value ...]
//	lpush, rpush, lpushx, rpushx, sadd   key value [value ...]
func valueArgs(name string) (start, step int, ok bool) {
	switch name {
	case "set", "setnx", "getset", "append":
		return 2, 0, true
	case "setex", "psetex", "setrange", "lset", "hsetnx":
		return 3, 0, true
	case "linsert":
		return 4, 0, true
	case "mset", "msetnx":
		return 2, 2, true
	case "hset", "hmset":
		return 3, 2, true
	case "lpush", "rpush", "lpushx", "rpushx", "sadd":
		return 2, 1, true
	}
	return 0, 0, false
}

// CheckValueSize refuses a write whose value argument is longer than
// MaxValueBytes (see valueArgs for the commands covered). A big value costs
// Redis and the network on every read of it, and a single one can stall a
// replica's or a cluster migration's transfer. Counted under "max-value".
func (p *Policy) CheckValueSize(r *Request) (reply []byte, denied bool) {
	limit := p.big.maxValue
	if limit <= 0 {
		return nil, false
	}
	start, step, ok := valueArgs(r.Name)
	if !ok {
		return nil, false
	}
	for i := start; i < len(r.Args); i += step {
		if n := int64(len(r.Args[i])); n > limit {
			p.big.valueCount.Inc()
			if ce := p.log.Check(zap.DebugLevel, "policy: value too big"); ce != nil {
				ce.Write(zap.String("rule", maxValueRule), zap.String("command", r.Name), zap.Int64("size", n),
					zap.ByteString("key", firstKey(r.Keys)))
			}
			return fmt.Appendf(nil, "-DENIED %s value of %d bytes is over the limit of %d bytes; store large values elsewhere or split them (rule %s)\r\n",
				r.Name, n, limit, maxValueRule), true
		}
		if step == 0 {
			break
		}
	}
	return nil, false
}
