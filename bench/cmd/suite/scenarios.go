package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rproxy/rproxy/bench/load"
)

// kind says how a scenario is run.
type kind int

const (
	kindLoad     kind = iota // one load.Run
	kindStampede             // load.Run while a writer re-SETs the key
	kindIdle                 // load.Run with idle connections held open, on a fresh stack
	kindList                 // redis-benchmark's default test list, once per target
	kindScaling              // one load.Run, against rproxy at each procs value instead of the plain rproxy target
)

// scalingGroup is the -scenarios name that selects every scaling scenario.
const scalingGroup = "scaling"

// scenario is one benchmark case, run against every target.
type scenario struct {
	name  string // -scenarios name
	title string // heading in the report
	label string // short name in charts
	what  string // what it measures, for the report
	kind  kind
	load  load.Config // Addr, Duration and Warmup are set per run

	// counted lists the commands whose INFO commandstats calls are the
	// upstream calls of a run. The stampede writer's own SETs are not
	// client requests, so the stampede counts GETs only.
	counted []string

	latencyChart  bool // show p50/p99/p99.9 in the latency chart
	upstreamChart bool // show upstream calls in the upstream chart (read scenarios)

	// optional scenarios run only when named in -scenarios: the scaling
	// runs add a third to make bench and answer a question about the
	// machine rather than about a change.
	optional bool
}

// Key spaces. Uniform and Zipf share the "key:" prefix, so one
// prepopulation of 1M keys serves both.
const (
	uniformKeys = 100_000
	zipfKeys    = 1_000_000
	largeKeys   = 200
	largeValue  = 100 << 10
	stampedeKey = "stampede:0"
	stampedeTTL = time.Second
)

// defaultIdleConns is the idle scenario's connection count, the 10,000.
const defaultIdleConns = 10_000

// allScenarios returns every scenario in report order; idle is the number
// of idle connections of the idle scenario.
func allScenarios(idle int) []scenario {
	base := load.DefaultConfig()
	base.Clients, base.Pipeline = 50, 1
	base.Dist, base.Keys, base.KeyPrefix = load.DistUniform, uniformKeys, "key:"
	base.ReadRatio, base.ValueSize = 1, 32
	base.Seed = 1

	with := func(f func(c *load.Config)) load.Config {
		c := base
		f(&c)
		return c
	}
	getSet := []string{"get", "set"}
	return []scenario{
		{name: "get-p1", title: "GET, uniform over 100k keys, pipeline 1", label: "GET -P 1",
			what: "50 clients, one GET in flight each: per-request proxy overhead",
			load: base, counted: getSet, upstreamChart: true},
		{name: "get-p16", title: "GET, uniform over 100k keys, pipeline 16", label: "GET -P 16",
			what: "50 clients, 16 GETs per write: batching through the proxy",
			load: with(func(c *load.Config) { c.Pipeline = 16 }), counted: getSet, upstreamChart: true},
		{name: "set-p1", title: "SET, uniform over 100k keys, pipeline 1", label: "SET -P 1",
			what: "50 clients, 32-byte values",
			load: with(func(c *load.Config) { c.ReadRatio = 0 }), counted: getSet},
		{name: "set-p16", title: "SET, uniform over 100k keys, pipeline 16", label: "SET -P 16",
			what: "50 clients, 16 SETs per write",
			load: with(func(c *load.Config) { c.ReadRatio, c.Pipeline = 0, 16 }), counted: getSet},
		{name: "hot", title: "GET, one hot key", label: "hot key",
			what:    "50 clients GET the same key: coalescing and the local tier take it off Redis",
			load:    with(func(c *load.Config) { c.Dist, c.KeyPrefix, c.Keys = load.DistHot, "hot:", 1 }),
			counted: getSet, latencyChart: true, upstreamChart: true},
		{name: "zipf-0.99", title: "GET, Zipf(0.99) over 1M keys", label: "Zipf 0.99",
			what: "50 clients, key ranks scrambled: a realistic skew, a few keys hot enough for the tier",
			load: with(func(c *load.Config) {
				c.Dist, c.ZipfS, c.Keys, c.Scramble = load.DistZipf, 0.99, zipfKeys, true
			}),
			counted: getSet, latencyChart: true, upstreamChart: true},
		{name: "zipf-1.2", title: "GET, Zipf(1.2) over 1M keys", label: "Zipf 1.2",
			what: "50 clients, a steeper skew: most reads fall on a few keys",
			load: with(func(c *load.Config) {
				c.Dist, c.ZipfS, c.Keys, c.Scramble = load.DistZipf, 1.2, zipfKeys, true
			}),
			counted: getSet, upstreamChart: true},
		{name: "stampede", title: "500 clients GET one expiring key", label: "stampede",
			what:    "500 clients GET one key that has a 1 s TTL and is re-SET straight on Redis every second",
			kind:    kindStampede,
			load:    with(func(c *load.Config) { c.Clients, c.Dist, c.KeyPrefix, c.Keys = 500, load.DistHot, "stampede:", 1 }),
			counted: []string{"get"}, upstreamChart: true},
		{name: "large-get", title: "GET of 100 KB values", label: "100 KB GET",
			what: "10 clients, uniform over 200 keys of 100 KB: copying large replies",
			load: with(func(c *load.Config) {
				c.Clients, c.KeyPrefix, c.Keys, c.ValueSize = 10, "big:", largeKeys, largeValue
			}),
			counted: getSet, upstreamChart: true},
		{name: "large-set", title: "SET of 100 KB values", label: "100 KB SET",
			what: "10 clients, uniform over 200 keys: copying large requests",
			load: with(func(c *load.Config) {
				c.Clients, c.KeyPrefix, c.Keys, c.ValueSize, c.ReadRatio = 10, "big:", largeKeys, largeValue, 0
			}),
			counted: getSet},
		{name: "idle-10k", title: fmt.Sprintf("%s idle connections plus GET load", thousands(idle)),
			label: fmt.Sprintf("%s idle + GET", short(idle)),
			what: fmt.Sprintf("%s connections that each sent one PING stay open while 50 clients GET uniformly; "+
				"memory per idle connection is the target's RSS growth divided by %s", thousands(idle), thousands(idle)),
			kind: kindIdle, load: base, counted: getSet},
		{name: "defaultlist", title: "redis-benchmark default test list", label: "default list",
			what: "redis-benchmark -q -n N without -t: which of its tests work through each target",
			kind: kindList},
		// The scaling scenarios repeat get-p1's and get-p16's load, so their
		// rows compare with those scenarios' rows.
		{name: "scaling-p1", title: "GET -P 1 against rproxy at each procs value", label: "scaling -P 1",
			what: "The get-p1 load (50 clients, one GET in flight each) against one rproxy per `procs` value",
			kind: kindScaling, load: base, counted: getSet, optional: true},
		{name: "scaling-p16", title: "GET -P 16 against rproxy at each procs value", label: "scaling -P 16",
			what: "The get-p16 load (50 clients, 16 GETs per write) against one rproxy per `procs` value",
			kind: kindScaling, load: with(func(c *load.Config) { c.Pipeline = 16 }), counted: getSet, optional: true},
	}
}

// scalingTarget names the rproxy started with procs n.
func scalingTarget(n int) string { return "rproxy-procs" + strconv.Itoa(n) }

// scenarioTargets returns the targets sc runs against, in order: targets
// itself, except that a scaling scenario runs one rproxy per procs value
// where targets has rproxy. The plain rproxy (procs auto: the CPUs less
// one, with Redis local) is left out there; -procs can name its value.
func scenarioTargets(sc scenario, targets []string, procs []int) []string {
	if sc.kind != kindScaling {
		return targets
	}
	var out []string
	for _, t := range targets {
		if t != "rproxy" {
			out = append(out, t)
			continue
		}
		for _, n := range procs {
			out = append(out, scalingTarget(n))
		}
	}
	return out
}

// defaultProcs is the scaling scenarios' procs list on a machine with
// ncpu CPUs: 1, 2 and 4 where they do not exceed ncpu, and ncpu itself.
func defaultProcs(ncpu int) []int {
	var out []int
	for _, n := range []int{1, 2, 4} {
		if n <= ncpu {
			out = append(out, n)
		}
	}
	if !slices.Contains(out, ncpu) {
		out = append(out, ncpu)
	}
	return out
}

// parseProcs parses -procs: a comma-separated list of procs values, in
// rproxy's range 1..1024 (0, auto, is the plain rproxy target), sorted and
// deduplicated. "" gives defaultProcs(ncpu).
func parseProcs(s string, ncpu int) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("-procs: %q is not a number from 1 to 1024", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return defaultProcs(ncpu), nil
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// thousands formats n with comma separators: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// short formats n for a chart label: 10k, 1500.
func short(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
