package load

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Key distributions accepted in Config.Dist.
const (
	DistUniform = "uniform" // every key equally likely
	DistZipf    = "zipf"    // rank i with weight 1/(i+1)^ZipfS
	DistHot     = "hot"     // always key rank 0
	DistHotSet  = "hotset"  // HotKeys keys take HotFraction of requests, the rest uniform
)

// Config describes one load run. Its fields mirror the flags of
// bench/cmd/load; DefaultConfig gives the flags' defaults.
type Config struct {
	Addr     string `json:"addr"`     // host:port of the server or proxy
	Clients  int    `json:"clients"`  // connections, each driven by its own goroutine
	Pipeline int    `json:"pipeline"` // commands in flight per connection, sent in one write

	// The run measures for Duration, or until Requests commands have been
	// measured in total, whichever comes first; 0 disables a limit, and at
	// least one must be set. Warmup runs before either and is not measured.
	Duration time.Duration `json:"duration_ns"`
	Requests int64         `json:"requests"`
	Warmup   time.Duration `json:"warmup_ns"`

	// Rate is the total target in commands per second, spread evenly over
	// the clients (open loop). 0 means closed loop: each client sends its
	// next batch as soon as the previous one is answered.
	Rate float64 `json:"rate"`

	Dist        string  `json:"dist"`         // DistUniform, DistZipf, DistHot or DistHotSet
	ZipfS       float64 `json:"zipf_s"`       // Zipf exponent, any s > 0
	Keys        uint64  `json:"keys"`         // key space: ranks 0..Keys-1
	HotKeys     uint64  `json:"hot_keys"`     // hotset: how many keys are hot
	HotFraction float64 `json:"hot_fraction"` // hotset: share of requests to the hot keys

	// Key rank i is named KeyPrefix + decimal i. With Scramble, ranks are
	// first mapped through a fixed bijection so the hottest keys are not
	// key 0, 1, 2...
	KeyPrefix string `json:"key_prefix"`
	Scramble  bool   `json:"scramble"`

	ReadRatio float64 `json:"read_ratio"`  // share of GETs; the rest are SETs
	ValueSize int     `json:"value_size"`  // bytes per SET value
	TTL       int     `json:"ttl_seconds"` // if > 0, SETs carry EX TTL

	// Tracking makes each connection send HELLO 3 and CLIENT TRACKING ON
	// OPTIN before it is measured, as rueidis connects by default: through
	// rproxy such a session runs in stream mode. Its plain GETs are not
	// tracked (no CLIENT CACHING YES), as rueidis's Do.
	Tracking bool `json:"tracking"`

	// Seed fixes the random streams: client i draws from PCG(Seed, i), so
	// runs with the same Config issue the same commands per client.
	Seed uint64 `json:"seed"`

	// Prepopulate makes Run SET every key once before measuring (see
	// Prepopulate).
	Prepopulate bool `json:"prepopulate"`

	// Timeout bounds dialling, and how long after the end of the run
	// outstanding replies may take before their connections are cut.
	Timeout time.Duration `json:"timeout_ns"`
}

// DefaultConfig returns the defaults of bench/cmd/load's flags.
func DefaultConfig() Config {
	return Config{
		Addr:        "127.0.0.1:6380",
		Clients:     50,
		Pipeline:    1,
		Duration:    10 * time.Second,
		Dist:        DistUniform,
		ZipfS:       0.99,
		Keys:        100_000,
		HotKeys:     100,
		HotFraction: 0.9,
		KeyPrefix:   "key:",
		ReadRatio:   1,
		ValueSize:   32,
		Seed:        1,
		Timeout:     5 * time.Second,
	}
}

// maxValueSize is Redis's default proto-max-bulk-len (512 MB).
const maxValueSize = 512 << 20

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Addr == "" {
		bad("addr is empty")
	}
	if c.Clients < 1 {
		bad("clients %d: need at least 1", c.Clients)
	}
	if c.Pipeline < 1 {
		bad("pipeline %d: need at least 1", c.Pipeline)
	}
	if c.Duration < 0 || c.Requests < 0 || c.Warmup < 0 {
		bad("duration, requests and warmup must not be negative")
	}
	if c.Duration == 0 && c.Requests == 0 {
		bad("set a duration or a number of requests")
	}
	if !(c.Rate >= 0) || math.IsInf(c.Rate, 0) {
		bad("rate %v: must be >= 0 (0 = closed loop)", c.Rate)
	}
	if c.Keys == 0 {
		bad("keys: need at least 1")
	}
	switch c.Dist {
	case DistUniform, DistHot:
	case DistZipf:
		if !(c.ZipfS > 0) || math.IsInf(c.ZipfS, 0) {
			bad("zipf-s %v: must be > 0", c.ZipfS)
		}
	case DistHotSet:
		if c.HotKeys == 0 || c.HotKeys > c.Keys {
			bad("hot-keys %d: must be in [1, keys=%d]", c.HotKeys, c.Keys)
		}
		if !(c.HotFraction >= 0 && c.HotFraction <= 1) {
			bad("hot-fraction %v: must be in [0, 1]", c.HotFraction)
		}
	default:
		bad("dist %q: want uniform, zipf, hot or hotset", c.Dist)
	}
	if !(c.ReadRatio >= 0 && c.ReadRatio <= 1) {
		bad("read-ratio %v: must be in [0, 1]", c.ReadRatio)
	}
	if c.ValueSize < 0 || c.ValueSize > maxValueSize {
		bad("value-size %d: must be in [0, %d]", c.ValueSize, maxValueSize)
	}
	if c.TTL < 0 {
		bad("ttl %d: must be >= 0", c.TTL)
	}
	if c.Timeout <= 0 {
		bad("timeout %v: must be > 0", c.Timeout)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid load config: %w", err)
	}
	return nil
}

// KeyGen returns the key generator the config describes, scrambled if
// Scramble is set.
func (c Config) KeyGen() (KeyGen, error) {
	var g KeyGen
	var err error
	switch c.Dist {
	case DistUniform:
		g, err = NewUniform(c.Keys)
	case DistZipf:
		g, err = NewZipf(c.Keys, c.ZipfS)
	case DistHot:
		g = NewHot()
	case DistHotSet:
		g, err = NewHotSet(c.Keys, c.HotKeys, c.HotFraction)
	default:
		err = fmt.Errorf("unknown dist %q", c.Dist)
	}
	if err != nil {
		return nil, err
	}
	if c.Scramble {
		return NewScrambled(g, c.Keys)
	}
	return g, nil
}
