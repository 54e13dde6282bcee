package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// series is one line of the Prometheus text format: a name, its labels and
// a value.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format, as served on
// rproxy's /metrics: comments and blank lines are skipped, an optional
// timestamp after the value is ignored.
func parseMetrics(text string) ([]series, error) {
	var out []series
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSeries(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n+1, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSeries(line string) (series, error) {
	s := series{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			k, rest, ok := strings.Cut(line, `="`)
			if !ok {
				return s, fmt.Errorf("bad label")
			}
			var v strings.Builder
			for {
				if rest == "" {
					return s, fmt.Errorf("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					c, rest = rest[0], rest[1:]
					if c == 'n' {
						c = '\n'
					}
				}
				v.WriteByte(c)
			}
			s.labels[strings.TrimSpace(k)] = v.String()
			line = rest
		}
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64) // accepts +Inf, -Inf, NaN
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// sum adds the values of the series called name whose labels include
// every pair of labelPairs (name, value, name, value...). ok is false when
// no series matched: a renamed metric must not read as zero.
func sum(ss []series, name string, labelPairs ...string) (total float64, ok bool) {
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(labelPairs); i += 2 {
			if s.labels[labelPairs[i]] != labelPairs[i+1] {
				continue next
			}
		}
		total, ok = total+s.value, true
	}
	return total, ok
}

// parseCommandStats returns the calls= count of command cmd (lower case)
// in the text of INFO commandstats, 0 if Redis has not run it yet:
//
//	cmdstat_get:calls=1234,usec=567,usec_per_call=0.46,rejected_calls=0,failed_calls=0
func parseCommandStats(info, cmd string) (float64, error) {
	for _, l := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("commandstats line %q: %w", l, err)
				}
				return n, nil
			}
		}
		return 0, fmt.Errorf("commandstats line %q has no calls=", l)
	}
	return 0, nil
}

// sample is what one scrape read: rproxy's counters and gauges, and the
// GETs Redis has executed, at seconds since the scenario started.
type sample struct {
	at         float64
	clientCmds float64 // rproxy_proxy_commands_total{outcome=forwarded|local}
	denied     float64 // rproxy_policy_decisions_total{action="deny"}
	refused    float64 // rproxy_proxy_commands_total{outcome="refused"}
	tierHits   float64 // rproxy_hotkey_tier_hits_total
	serving    float64 // rproxy_hotkey_tier_serving
	entries    float64 // rproxy_hotkey_tier_entries
	stops      float64 // rproxy_hotkey_tier_stops_total
	hotKeys    float64 // rproxy_hotkey_hot_keys
	joins      float64 // rproxy_coalesce_joins_total
	misses     float64 // rproxy_hotkey_tier_misses_total
	fills      float64 // rproxy_hotkey_tier_fills_total
	upstream   float64 // rproxy_upstream_commands_total, every connection
	redisGets  float64 // INFO commandstats cmdstat_get calls
}

// newSample picks the series a sample needs out of one scrape, and fails
// naming the first that is missing.
func newSample(at float64, ss []series, redisGets float64) (sample, error) {
	s := sample{at: at, redisGets: redisGets}
	for _, f := range []struct {
		dst    *float64
		name   string
		labels []string
	}{
		{&s.denied, "rproxy_policy_decisions_total", []string{"action", "deny"}},
		{&s.refused, "rproxy_proxy_commands_total", []string{"outcome", "refused"}},
		{&s.tierHits, "rproxy_hotkey_tier_hits_total", nil},
		{&s.serving, "rproxy_hotkey_tier_serving", nil},
		{&s.entries, "rproxy_hotkey_tier_entries", nil},
		{&s.stops, "rproxy_hotkey_tier_stops_total", nil},
		{&s.hotKeys, "rproxy_hotkey_hot_keys", nil},
		{&s.joins, "rproxy_coalesce_joins_total", nil},
		{&s.misses, "rproxy_hotkey_tier_misses_total", nil},
		{&s.fills, "rproxy_hotkey_tier_fills_total", nil},
		{&s.upstream, "rproxy_upstream_commands_total", nil},
	} {
		v, ok := sum(ss, f.name, f.labels...)
		if !ok {
			return s, fmt.Errorf("rproxy does not expose %s%v", f.name, f.labels)
		}
		*f.dst = v
	}
	fwd, ok1 := sum(ss, "rproxy_proxy_commands_total", "outcome", "forwarded")
	local, ok2 := sum(ss, "rproxy_proxy_commands_total", "outcome", "local")
	if !ok1 || !ok2 {
		return s, fmt.Errorf("rproxy does not expose rproxy_proxy_commands_total{outcome=forwarded,local}")
	}
	s.clientCmds = fwd + local
	return s, nil
}

// rate is a counter's increase per second over (from, to].
type rate struct{ from, to, v float64 }

// rates turns a counter read from each sample into per-second rates between
// consecutive samples. A decrease (a counter reset) gives NaN.
func rates(ss []sample, counter func(sample) float64) []rate {
	var out []rate
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		v := (counter(b) - counter(a)) / (b.at - a.at)
		if v < 0 {
			v = math.NaN()
		}
		out = append(out, rate{a.at, b.at, v})
	}
	return out
}

// phaseMedian is the median of the rates whose interval lies within
// [from, to]; NaN if none does.
func phaseMedian(rs []rate, from, to float64) float64 {
	var vs []float64
	for _, r := range rs {
		if r.from >= from-1e-9 && r.to <= to+1e-9 && !math.IsNaN(r.v) {
			vs = append(vs, r.v)
		}
	}
	return median(vs)
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// samplesTSV lists the samples, one a line, under a header.
func samplesTSV(ss []sample) string {
	var b strings.Builder
	b.WriteString("at\tclient_cmds\tredis_gets\tupstream_cmds\ttier_hits\ttier_misses\tfills\tserving\tentries\tstops\thot_keys\tdenied\trefused\tjoins\n")
	for _, s := range ss {
		fmt.Fprintf(&b, "%.3f\t%g\t%g\t%g\t%g\t%g\t%g\t%g\t%g\t%g\t%g\t%g\t%g\t%g\n", s.at, s.clientCmds, s.redisGets, s.upstream,
			s.tierHits, s.misses, s.fills, s.serving, s.entries, s.stops, s.hotKeys, s.denied, s.refused, s.joins)
	}
	return b.String()
}
