package main

import (
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	rconfig "github.com/rproxy/rproxy/config"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_get:calls=1234,usec=567,usec_per_call=0.46,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_set:calls=7,usec=8,usec_per_call=1.14,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=20,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if got["get"] != 1234 || got["set"] != 7 || got["config|resetstat"] != 1 {
		t.Errorf("parseCommandStats = %v", got)
	}
	if _, err := parseCommandStats("cmdstat_get:calls=x,usec=1\r\n"); err == nil {
		t.Error("bad calls: want an error")
	}
}

func TestParseQuiet(t *testing.T) {
	out := "PING_INLINE: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\r                  \r" +
		"PING_INLINE: 88888.89 requests per second, p50=0.279 msec\n" +
		"SET: rps=16984.0 (overall: 75821.4) avg_msec=0.384 (overall: 0.384)\r" +
		"SET: 82644.62 requests per second, p50=0.287 msec\n" +
		"LRANGE_100 (first 100 elements): 40000.00 requests per second, p50=0.9 msec\n" +
		"WARNING: Could not fetch server CONFIG\n" +
		"Error: Server closed the connection\n"
	res, other := parseQuiet(out)
	want := []quietResult{{"PING_INLINE", 88888.89}, {"SET", 82644.62}, {"LRANGE_100 (first 100 elements)", 40000}}
	if !slices.Equal(res, want) {
		t.Errorf("results = %v, want %v", res, want)
	}
	if !slices.Equal(other, []string{"WARNING: Could not fetch server CONFIG", "Error: Server closed the connection"}) {
		t.Errorf("other = %q", other)
	}
	for _, d := range defaultTests() {
		if strings.Contains(d.name, ": ") {
			t.Errorf("test name %q would not parse", d.name)
		}
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.rounds != 3 || c.duration != fullDuration || c.warmup != fullWarmup || c.listN != fullListN {
		t.Errorf("defaults: %+v", c)
	}
	var defaults []string
	for _, sc := range allScenarios(defaultIdleConns) {
		if !sc.optional {
			defaults = append(defaults, sc.name)
		}
	}
	if !slices.Equal(c.scenarios, defaults) || slices.Contains(c.scenarios, "scaling-p1") ||
		!slices.Equal(c.targets, []string{"redis", "twemproxy", "rproxy"}) {
		t.Errorf("default scenarios/targets: %v %v", c.scenarios, c.targets)
	}
	if !slices.Equal(c.procs, defaultProcs(runtime.NumCPU())) {
		t.Errorf("default procs %v, want %v", c.procs, defaultProcs(runtime.NumCPU()))
	}
	c, err = parseFlags([]string{"-scenarios", "get-p1,scaling,scaling-p16", "-procs", "8, 2,1,2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.scenarios, []string{"get-p1", "scaling-p1", "scaling-p16"}) || !slices.Equal(c.procs, []int{1, 2, 8}) {
		t.Errorf("-scenarios get-p1,scaling,scaling-p16 -procs 8,2,1,2: %v %v", c.scenarios, c.procs)
	}
	c, err = parseFlags([]string{"-quick", "-scenarios", "hot, get-p1,hot", "-targets", "redis"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != quickDuration || c.warmup != quickWarmup || c.listN != quickListN ||
		!slices.Equal(c.scenarios, []string{"hot", "get-p1"}) {
		t.Errorf("-quick: %+v", c)
	}
	c, err = parseFlags([]string{"-quick", "-duration", "2s"}, io.Discard)
	if err != nil || c.duration != 2*time.Second || c.warmup != quickWarmup {
		t.Errorf("-quick -duration 2s: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"-targets", "memcached"}, {"-scenarios", "nope"}, {"-rounds", "0"}, {"-duration", "1ms"}, {"extra"},
		{"-procs", "0"}, {"-procs", "two"}, {"-procs", "2000"},
		{"-scenarios", "scaling", "-targets", "redis,twemproxy"}, // no rproxy to scale
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): want an error", bad)
		}
	}
}

func TestDefaultProcs(t *testing.T) {
	for _, c := range []struct {
		ncpu int
		want []int
	}{
		{1, []int{1}}, {2, []int{1, 2}}, {3, []int{1, 2, 3}}, {4, []int{1, 2, 4}}, {6, []int{1, 2, 4, 6}},
		{16, []int{1, 2, 4, 16}},
	} {
		if got := defaultProcs(c.ncpu); !slices.Equal(got, c.want) {
			t.Errorf("defaultProcs(%d) = %v, want %v", c.ncpu, got, c.want)
		}
		if got, err := parseProcs(" ", c.ncpu); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseProcs(\" \", %d) = %v, %v; want %v", c.ncpu, got, err, c.want)
		}
	}
	// An explicit list is taken as given, above the CPU count too.
	if got, err := parseProcs("15,8,4,2,1", 16); err != nil || !slices.Equal(got, []int{1, 2, 4, 8, 15}) {
		t.Errorf("parseProcs(15,8,4,2,1) = %v, %v", got, err)
	}
	if got, err := parseProcs("4", 2); err != nil || !slices.Equal(got, []int{4}) {
		t.Errorf("parseProcs(4) on 2 CPUs = %v, %v", got, err)
	}
}

func TestScenarioTargets(t *testing.T) {
	byName := map[string]scenario{}
	for _, sc := range allScenarios(defaultIdleConns) {
		byName[sc.name] = sc
	}
	all := []string{"redis", "twemproxy", "rproxy"}
	for _, c := range []struct {
		scenario string
		targets  []string
		procs    []int
		want     []string
	}{
		{"get-p1", all, []int{1, 2}, all},
		{"scaling-p1", all, []int{1, 2}, []string{"redis", "twemproxy", "rproxy-procs1", "rproxy-procs2"}},
		{"scaling-p16", all, []int{1, 2, 4, 8, 15},
			[]string{"redis", "twemproxy", "rproxy-procs1", "rproxy-procs2", "rproxy-procs4", "rproxy-procs8", "rproxy-procs15"}},
		{"scaling-p1", []string{"rproxy", "redis"}, []int{2}, []string{"rproxy-procs2", "redis"}},
	} {
		if got := scenarioTargets(byName[c.scenario], c.targets, c.procs); !slices.Equal(got, c.want) {
			t.Errorf("scenarioTargets(%s, %v, %v) = %v, want %v", c.scenario, c.targets, c.procs, got, c.want)
		}
	}
	// The scaling scenarios run get-p1's and get-p16's load, so that their
	// rows compare with those scenarios'.
	if byName["scaling-p1"].load != byName["get-p1"].load || byName["scaling-p16"].load != byName["get-p16"].load {
		t.Error("scaling loads differ from get-p1's and get-p16's")
	}
}

func TestRproxyConfig(t *testing.T) {
	if got, want := rproxyConfig(20000, 0), "limits:\n  max_clients: 20000\n"; got != want {
		t.Errorf("rproxyConfig(20000, 0) = %q, want %q", got, want)
	}
	if got, want := rproxyConfig(20000, 4), "limits:\n  max_clients: 20000\nprocs: 4\n"; got != want {
		t.Errorf("rproxyConfig(20000, 4) = %q, want %q", got, want)
	}
	// rproxy itself takes it: the keys are spelled as its config wants.
	c, err := rconfig.Parse([]byte(rproxyConfig(20000, 4)), "rproxy.yaml")
	if err != nil || c.Procs != 4 || c.Limits.MaxClients != 20000 {
		t.Errorf("config.Parse(rproxyConfig(20000, 4)): procs %d, max_clients %d, %v", c.Procs, c.Limits.MaxClients, err)
	}
}

func TestScenarioConfigsAreValid(t *testing.T) {
	names := map[string]bool{}
	for _, sc := range allScenarios(defaultIdleConns) {
		if names[sc.name] {
			t.Errorf("duplicate scenario %q", sc.name)
		}
		names[sc.name] = true
		if sc.kind == kindList {
			continue
		}
		cfg := sc.load
		cfg.Addr, cfg.Duration = "127.0.0.1:1", time.Second
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", sc.name, err)
		}
		if len(sc.counted) == 0 {
			t.Errorf("%s counts no upstream command", sc.name)
		}
	}
}
