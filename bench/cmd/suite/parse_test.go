package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
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
	if len(c.scenarios) != len(allScenarios(defaultIdleConns)) || !slices.Equal(c.targets, []string{"redis", "twemproxy", "rproxy"}) {
		t.Errorf("default scenarios/targets: %v %v", c.scenarios, c.targets)
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
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): want an error", bad)
		}
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
