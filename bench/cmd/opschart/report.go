package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rproxy/rproxy/bench/load"
)

// phase is a stretch of the timeline for the report's table, in seconds.
type phase struct {
	name     string
	from, to float64
}

var phases = []phase{
	{"uniform", 0, 15},
	{"uniform + hot key", 15, 25},
	{"uniform + hot key, after the kill", 25, 35},
	{"uniform + KEYS every 100 ms", 35, 50},
	{"uniform only again", 50, 60},
}

// Okabe-Ito colours, distinguishable with the common colour blindnesses.
const (
	colorClient = "#0072B2"
	colorRedis  = "#E69F00"
	colorTier   = "#009E73"
	colorDenied = "#D55E00"
)

// figures are the per-second rates the chart and the table show.
type figures struct {
	client, redisGets, tierHits, denied []rate
}

func newFigures(ss []sample) figures {
	return figures{
		client:    rates(ss, func(s sample) float64 { return s.clientCmds }),
		redisGets: rates(ss, func(s sample) float64 { return s.redisGets }),
		tierHits:  rates(ss, func(s sample) float64 { return s.tierHits }),
		denied:    rates(ss, func(s sample) float64 { return s.denied }),
	}
}

// buildChart lays out the run's chart: rates in the main panel, the tier's
// serving state as a strip, denials in a small panel.
func buildChart(rec *record, f figures, subtitle string) chart {
	mid := func(rs []rate) []point {
		pts := make([]point, len(rs))
		for i, r := range rs {
			pts[i] = point{(r.from + r.to) / 2, r.v}
		}
		return pts
	}
	serving := make([]point, len(rec.samples))
	for i, s := range rec.samples {
		serving[i] = point{s.at, s.serving}
	}
	var marks []mark
	for _, o := range rec.outages {
		marks = append(marks, mark{o.from, o.to, colorDenied, fmt.Sprintf("stopped %s (rproxy log)", fmtDuration(o.to-o.from))})
	}
	return chart{
		title:    "rproxy over one scripted minute: client load, Redis load, hot-key tier, policy",
		subtitle: subtitle,
		xMax:     scenarioLen.Seconds(),
		xLabel:   "seconds since the start (rates between scrapes 0.5 s apart)",
		panels: []panel{
			{yLabel: "commands per second", height: 250, tick: fmtK, lines: []line{
				{name: "client commands/s (forwarded + local)", color: colorClient, pts: mid(f.client), width: 4.5},
				{name: "GETs reaching Redis/s (INFO commandstats)", color: colorRedis, pts: mid(f.redisGets)},
				{name: "tier hits/s (served from rproxy memory)", color: colorTier, pts: mid(f.tierHits)},
			}},
			{yLabel: "tier serving", height: 18, marks: marks,
				strip: &line{name: "tier serving (rproxy_hotkey_tier_serving = 1)", color: colorTier, pts: serving}},
			{yLabel: "denied/s", height: 64, tick: fmtK, lines: []line{
				{name: "KEYS denied/s (rproxy_policy_decisions_total{action=\"deny\"})", color: colorDenied, pts: mid(f.denied)},
			}},
		},
		events: []event{
			{hotFrom.Seconds(), "hot key joins (+30 clients)"},
			{rec.killedAt, "tracking connection killed"},
			{keysFrom.Seconds(), "hot key leaves, KEYS client joins"},
			{keysTo.Seconds(), "KEYS client leaves"},
		},
	}
}

// meta describes the run for the report.
type meta struct {
	date, machine, redis, rproxy, chartFile string
	tierStart                               time.Duration // from rproxy answering PING to its tier serving
	others, steal                           float64       // shares of the machine's CPU during the run
}

// renderReport writes ops.md: the chart, the scenario, a table of medians
// per phase and what the run showed around its events.
func renderReport(m meta, rec *record, f figures) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# rproxy's metrics over one scripted minute\n\n")
	p("![rproxy metrics over time](%s)\n\n", m.chartFile)
	p("Made by `go run ./bench/cmd/opschart` on %s. Machine: %s. Redis %s; rproxy %s with the default config (`-admin` added), in front of a private redis-server without persistence. Load from bench/load in the same process, closed loop, pipeline 1.\n\n",
		m.date, m.machine, m.redis, m.rproxy)
	p("## Scenario\n\n")
	p("- 0-60 s: %d clients GET uniformly over %d keys (`key:0` ... `key:%d`, SET beforehand straight to Redis).\n", uniformClients, keyCount, keyCount-1)
	p("- 15-35 s: %d more clients GET one key, `key:0`: the detector names it hot and the tier serves it.\n", hotClients)
	p("- %.1f s: the tier's tracking connection (the one with `flags=t` in Redis's CLIENT LIST) is killed from Redis's side with CLIENT KILL ID.\n", rec.killedAt)
	p("- 35-50 s: one more client sends `KEYS *` every 100 ms; the default policy refuses it (DENIED).\n")
	p("- 50-60 s: the uniform clients only.\n\n")
	p("rproxy's /metrics and Redis's `INFO commandstats` (`cmdstat_get` calls) are read every 0.5 s; rates are differences between consecutive reads. The tier's stops are also read from rproxy's log, which has their exact times.\n\n")
	p("During the run other processes took %.0f%% of the machine's CPU time and the hypervisor stole %.0f%% (/proc/stat, less the CPU time of this program, rproxy and redis-server); anything else running shows in the figures.\n\n",
		100*m.others, 100*m.steal)

	p("## Medians per phase\n\n")
	p("Medians of the 0.5 s rates whose interval lies within the phase.\n\n")
	p("| phase | seconds | client commands/s | GETs reaching Redis/s | tier hits/s | KEYS denied/s |\n")
	p("|---|---|---:|---:|---:|---:|\n")
	for _, ph := range phases {
		p("| %s | %g-%g | %s | %s | %s | %s |\n", ph.name, ph.from, ph.to,
			fmtRate(phaseMedian(f.client, ph.from, ph.to)), fmtRate(phaseMedian(f.redisGets, ph.from, ph.to)),
			fmtRate(phaseMedian(f.tierHits, ph.from, ph.to)), fmtRate(phaseMedian(f.denied, ph.from, ph.to)))
	}
	p("\n## What the run showed\n\n")
	p("- At start-up rproxy's tier served %s after rproxy first answered PING (the scenario waits for it).\n", fmtDuration(m.tierStart.Seconds()))
	for _, l := range observations(rec, f) {
		p("- %s\n", l)
	}
	return b.String()
}

// observations are facts of the run worth reading next to the chart:
// when the hot key was named, when the tier stopped and came back, what
// the KEYS client got, and the load generator's own totals.
func observations(rec *record, f figures) []string {
	ss := rec.samples
	if len(ss) == 0 {
		return []string{"No samples."}
	}
	first, last := ss[0], ss[len(ss)-1]
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	// firstAt is the time of the first sample at or after t that ok accepts.
	firstAt := func(t float64, ok func(i int) bool) string {
		for i, s := range ss {
			if s.at >= t && ok(i) {
				return fmt.Sprintf("%.1f s", s.at)
			}
		}
		return "never"
	}
	hits := func(i int) bool { return i > 0 && ss[i].tierHits > ss[i-1].tierHits }

	coldMax := 0.0
	for _, s := range ss {
		if s.at < hotFrom.Seconds() || s.at > hotTo.Seconds()+2 {
			coldMax = max(coldMax, s.hotKeys)
		}
	}
	cold := "stayed 0"
	if coldMax > 0 {
		cold = fmt.Sprintf("reached %g", coldMax)
	}
	add("Hot key: rproxy_hotkey_hot_keys first read 1 or more at %s, the first tier hits were counted by %s; after the hot clients left, hot_keys read 0 again at %s. Under uniform load alone hot_keys %s.",
		firstAt(hotFrom.Seconds(), func(i int) bool { return ss[i].hotKeys >= 1 }),
		firstAt(hotFrom.Seconds(), hits),
		firstAt(hotTo.Seconds(), func(i int) bool { return ss[i].hotKeys == 0 }), cold)

	before, during := phaseMedian(f.redisGets, 0, hotFrom.Seconds()), phaseMedian(f.redisGets, hotFrom.Seconds(), hotTo.Seconds())
	add("While the hot clients ran, GETs reaching Redis (the uniform clients' GETs, plus the tier's few fills) fell from a median of %s/s (0-15 s) to %s/s (15-35 s): %s/s per uniform client against %s/s per hot client served from the tier. Closed-loop clients share the machine's CPUs with rproxy and Redis, and a GET answered from rproxy's memory costs less than one forwarded to Redis, so the hot clients take most of the turns.",
		fmtRate(before), fmtRate(during), fmtRate(during/uniformClients), fmtRate(phaseMedian(f.tierHits, hotFrom.Seconds(), hotTo.Seconds())/hotClients))
	add("Tracking connection killed at %.2f s: `%s`.", rec.killedAt, clientFields(rec.killedLine, "id", "addr", "age", "flags", "cmd", "resp"))
	if len(rec.outages) == 0 {
		add("rproxy's log shows no stop of the tier after the kill.")
	}
	for _, o := range rec.outages {
		add("rproxy's log: the tier emptied and stopped at %.3f s (%s) and served again at %.3f s: off for %s.",
			o.from, o.why, o.to, fmtDuration(o.to-o.from))
	}
	var off []string
	for _, s := range ss {
		if s.serving < 0.5 {
			off = append(off, fmt.Sprintf("%.1f", s.at))
		}
	}
	if len(off) == 0 {
		add("rproxy_hotkey_tier_serving read 1 in every scrape; rproxy_hotkey_tier_stops_total rose by %g. An outage shorter than the 0.5 s between scrapes is seen only in the counter and the log.",
			last.stops-first.stops)
	} else {
		add("rproxy_hotkey_tier_serving read 0 at %s s; rproxy_hotkey_tier_stops_total rose by %g.", strings.Join(off, ", "), last.stops-first.stops)
	}
	// The first scrape after the tier served again, or after the kill if
	// the log has no outage.
	k, back := rec.killedAt, rec.killedAt
	if len(rec.outages) > 0 {
		back = rec.outages[0].to
	}
	add("After the kill the first scrape with the tier serving again, holding an entry and counting new hits was at %s. Tier hits/s, median of the 2 s before the kill: %s; of the 2 s after: %s; of 27-35 s: %s.",
		firstAt(back+1e-3, func(i int) bool { return ss[i].serving == 1 && ss[i].entries > 0 && hits(i) }),
		fmtRate(phaseMedian(f.tierHits, k-2, k)), fmtRate(phaseMedian(f.tierHits, k, k+2)), fmtRate(phaseMedian(f.tierHits, k+2, hotTo.Seconds())))

	add("KEYS client: %d sent, %d answered DENIED; over the run rproxy counted %g policy denials (rproxy_policy_decisions_total{action=\"deny\"}) and %g refused commands (rproxy_proxy_commands_total{outcome=\"refused\"}).",
		rec.keysSent, rec.keysDenied, last.denied-first.denied, last.refused-first.refused)
	if rec.keysOther != "" {
		add("Unexpected KEYS reply: %s.", rec.keysOther)
	}
	for _, r := range []struct {
		name string
		res  load.Result
	}{{"uniform clients", rec.uniform}, {"hot-key clients", rec.hot}} {
		add("Load generator, %s: %d commands in %.1f s (%s/s), %d error replies, %d connection errors.",
			r.name, r.res.Ops, r.res.Seconds, fmtRate(r.res.OpsPerSec), r.res.Errors, r.res.ConnErrors)
	}
	add("Coalesced GETs over the run (rproxy_coalesce_joins_total): %g.", last.joins-first.joins)
	return out
}

// clientFields keeps the named fields of a CLIENT LIST line.
func clientFields(line string, names ...string) string {
	var kept []string
	for _, kv := range strings.Fields(line) {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(names, k) {
			kept = append(kept, kv)
		}
	}
	return strings.Join(kept, " ")
}

// fmtDuration is seconds as a short duration: 52 ms, 1.3 s.
func fmtDuration(sec float64) string {
	if sec < 1 {
		return fmt.Sprintf("%.0f ms", sec*1000)
	}
	return fmt.Sprintf("%.1f s", sec)
}

// fmtRate is a compact rate: 83.6k, 950, 9.8.
func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
