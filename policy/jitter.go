package policy

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
)

// JitterConfig spreads the expiry of cache writes. Keys written together
// with the same TTL (a cache warmed in one go, a batch job) otherwise expire
// together, and their misses all land on the database at once. The spread
// is always below the TTL the client asked for: a key never lives longer
// than asked.
type JitterConfig struct {
	Disabled       bool          // true: TTLs are never changed (DefaultTTL still applies)
	MaxFraction    float64       // a TTL is lowered by a fraction in [0, MaxFraction], in whole units (EX 9 at 0.10 has no room and stays 9), never to 0; 0 means the default 0.10; at most 1
	Exclude        []string      // glob patterns of keys never jittered
	DefaultTTL     time.Duration // SET with no TTL option, on a key matching DefaultTTLKeys, gets this TTL (jittered below it); 0 = off
	DefaultTTLKeys []string      // glob patterns; required with DefaultTTL
	Seed           uint64        // part of the hash: give every proxy of one deployment the same seed
}

const (
	defaultMaxFraction = 0.10
	// maxTTL: larger TTLs are left alone. Redis refuses an expire time that
	// overflows once converted to milliseconds and added to now; 2^40
	// seconds (~35,000 years), even doubled and in ms, is far from that.
	maxTTL = 1 << 40
	ppm    = 1_000_000
)

func (j JitterConfig) problems() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if math.IsNaN(j.MaxFraction) || j.MaxFraction < 0 || j.MaxFraction > 1 {
		add("jitter.max_fraction must be between 0 and 1 (0.1 spreads TTLs over the 10%% below the one asked for), got %v", j.MaxFraction)
	}
	for _, f := range []struct {
		name string
		pats []string
	}{{"exclude", j.Exclude}, {"default_ttl_keys", j.DefaultTTLKeys}} {
		if slices.Contains(f.pats, "") {
			add("jitter.%s: an empty pattern matches only the empty key; use * for any key", f.name)
		}
	}
	switch d := j.DefaultTTL; {
	case d < 0:
		add("jitter.default_ttl must be >= 0 (0 turns it off), got %v", d)
	case d > 0 && d%time.Millisecond != 0:
		add("jitter.default_ttl must be a whole number of milliseconds, got %v", d)
	case d > 0 && len(j.DefaultTTLKeys) == 0:
		add("jitter.default_ttl needs default_ttl_keys, the keys it applies to (* for every key)")
	case d == 0 && len(j.DefaultTTLKeys) > 0:
		add("jitter.default_ttl_keys is set but default_ttl is 0")
	}
	return errs
}

// jitter is a compiled JitterConfig.
type jitter struct {
	on          bool
	ppm         uint64 // MaxFraction in millionths: integer math, so every platform agrees
	seed        uint64
	exclude     []glob
	defaultKeys []glob
	defaultOpt  []byte // "EX" or "PX"; nil: no default TTL
	defaultTTL  uint64 // in the unit of defaultOpt
	defaultUnit byte
}

func newJitter(c JitterConfig) jitter {
	f := c.MaxFraction
	if f == 0 {
		f = defaultMaxFraction
	}
	j := jitter{on: !c.Disabled, ppm: uint64(math.Round(f * ppm)), seed: c.Seed,
		exclude: globs(c.Exclude), defaultKeys: globs(c.DefaultTTLKeys)}
	if d := c.DefaultTTL; d > 0 {
		if d%time.Second == 0 {
			j.defaultOpt, j.defaultTTL, j.defaultUnit = []byte("EX"), uint64(d/time.Second), 's'
		} else {
			j.defaultOpt, j.defaultTTL, j.defaultUnit = []byte("PX"), uint64(d/time.Millisecond), 'm'
		}
	}
	return j
}

func globs(pats []string) []glob {
	out := make([]glob, len(pats))
	for i, p := range pats {
		out[i] = glob(p)
	}
	return out
}

// Jitter spreads the TTL of a cache write below the one asked for, by a
// deterministic fraction, or adds the default TTL to a SET without one.
// name is the lower-case command name and args the command as sent
// (args[1] the key). It returns a new slice (the caller's is untouched;
// unchanged arguments are shared) and true when it changed anything, else
// args and false. What it touches, and only this (cache writes):
//
//	SET k v [EX s | PX ms] [GET]   not with NX or XX (locks and leases need
//	                               their exact lifetime), KEEPTTL, EXAT, PXAT
//	                               (absolute times mean a moment)
//	SETEX k s v, PSETEX k ms v
//
// Never GETEX or EXPIRE/PEXPIRE/EXPIREAT: those refresh a key's life
// (sliding sessions, rate-limit windows) and mean exactly what they say.
// The caller skips commands inside MULTI/EXEC, where TTLs set together are
// coupled on purpose; scripts are never seen here (only their EVAL).
//
// A TTL that does not parse as Redis would accept it, is not positive, or
// is above 2^40 is left alone, and so is a command with an option this
// does not know: Redis then answers exactly as it would without the proxy.
func (p *Policy) Jitter(name string, args [][]byte) (out [][]byte, applied bool) {
	switch name {
	case "set":
		return p.jitterSet(args)
	case "setex", "psetex":
		if len(args) != 4 {
			return args, false
		}
		return p.jitterAt(args, 2, unitOf(name == "setex"))
	}
	return args, false
}

func unitOf(seconds bool) byte {
	if seconds {
		return 's'
	}
	return 'm'
}

// jitterSet handles SET k v [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL].
func (p *Policy) jitterSet(args [][]byte) ([][]byte, bool) {
	if len(args) < 3 {
		return args, false
	}
	ttlAt, unit := -1, byte(0)
	var cond, otherTTL bool // NX/XX; KEEPTTL, EXAT or PXAT
	for i := 3; i < len(args); i++ {
		a := args[i]
		switch {
		case equalFoldLower(a, "nx"), equalFoldLower(a, "xx"):
			cond = true
		case equalFoldLower(a, "get"):
		case equalFoldLower(a, "keepttl"):
			otherTTL = true
		case equalFoldLower(a, "ex"), equalFoldLower(a, "px"), equalFoldLower(a, "exat"), equalFoldLower(a, "pxat"):
			if i+1 >= len(args) || ttlAt >= 0 {
				return args, false // Redis reports the syntax error
			}
			if len(a) == 2 {
				ttlAt, unit = i+1, unitOf(a[0]|0x20 == 'e')
			} else {
				otherTTL = true
			}
			i++
		default:
			return args, false // unknown option (a newer Redis?): hands off
		}
	}
	switch {
	case otherTTL:
		return args, false
	case ttlAt >= 0:
		if cond {
			return args, false
		}
		return p.jitterAt(args, ttlAt, unit)
	}
	return p.addDefaultTTL(args, cond)
}

// jitterAt lowers the TTL in args[at], of unit 's' or 'm', for key args[1].
func (p *Policy) jitterAt(args [][]byte, at int, unit byte) ([][]byte, bool) {
	j := &p.jitter
	if !j.on {
		return args, false
	}
	ttl, ok := parseTTL(args[at])
	if !ok || matchAny(j.exclude, args[1]) {
		return args, false
	}
	n := j.lower(args[1], ttl, unit)
	if n == ttl {
		return args, false
	}
	out := slices.Clone(args)
	out[at] = strconv.AppendUint(nil, n, 10)
	p.m.jitter.Inc()
	return out, true
}

// addDefaultTTL appends EX/PX with the default TTL to a SET without one,
// jittered unless the SET is conditional (NX/XX) or the key excluded.
func (p *Policy) addDefaultTTL(args [][]byte, cond bool) ([][]byte, bool) {
	j := &p.jitter
	if j.defaultOpt == nil || !matchAny(j.defaultKeys, args[1]) {
		return args, false
	}
	ttl := j.defaultTTL
	if j.on && !cond && !matchAny(j.exclude, args[1]) {
		if n := j.lower(args[1], ttl, j.defaultUnit); n != ttl {
			ttl = n
			p.m.jitter.Inc()
		}
	}
	out := make([][]byte, len(args), len(args)+2)
	copy(out, args)
	out = append(out, j.defaultOpt, strconv.AppendUint(nil, ttl, 10))
	p.m.defaultTTL.Inc()
	return out, true
}

// lower returns ttl - floor(ttl * f), with f in [0, MaxFraction] a
// function of the seed, key, ttl and unit only: a retried write (or the
// same write through another proxy with the same seed) gets the same
// expiry, and different keys written with the same TTL spread evenly over
// [ttl - ttl*MaxFraction, ttl]. The result is never above ttl and never
// below 1.
func (j *jitter) lower(key []byte, ttl uint64, unit byte) uint64 {
	maxDec := min(ttl*j.ppm/ppm, ttl-1) // ttl <= 2^40, ppm <= 2^20: no overflow
	if maxDec == 0 {
		return ttl
	}
	var d xxhash.Digest
	d.ResetWithSeed(j.seed)
	d.Write(key)
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:], ttl)
	b[8] = unit
	d.Write(b[:])
	dec, _ := bits.Mul64(d.Sum64(), maxDec+1) // uniform in [0, maxDec]
	return ttl - dec
}

// parseTTL accepts what Redis's string2ll accepts and is positive, up to
// maxTTL: decimal digits without sign, leading zeros or spaces.
func parseTTL(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 13 || b[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n <= maxTTL
}

func matchAny(pats []glob, key []byte) bool {
	for _, g := range pats {
		if g.match(key) {
			return true
		}
	}
	return false
}
