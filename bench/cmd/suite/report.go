package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// chartFile is a chart written next to the report.
type chartFile struct {
	title string
	svg   string // file name of the SVG, relative to the report
	png   string // file name of a PNG copy, "" if none could be made
}

// Sample fields, for series.
func ops(s sample) float64        { return s.ops }
func p50(s sample) float64        { return s.p50 }
func p99(s sample) float64        { return s.p99 }
func p999(s sample) float64       { return s.p999 }
func proxyCPU(s sample) float64   { return s.proxyCPU }
func redisCPU(s sample) float64   { return s.redisCPU }
func upstream(s sample) float64   { return s.upstream }
func nulls(s sample) float64      { return s.nulls }
func rssPerConn(s sample) float64 { return s.rssPerConn }

// renderReport returns the Markdown report.
func renderReport(m meta, scs []scenario, targets []string, res *results, charts []chartFile) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# rproxy benchmark suite\n\n")
	p("- date: %s\n", m.date.Format(time.RFC3339))
	p("- machine: %d CPUs (nproc), %s; load average %s at start, %s at end\n", m.nproc, m.cpu, m.loadStart, m.loadEnd)
	if m.pinning != "" {
		p("- pinning: %s\n", m.pinning)
	}
	p("- %s\n", m.redis)
	if m.nutcracker != "" {
		p("- %s\n", m.nutcracker)
	} else if slices.Contains(targets, "twemproxy") {
		p("- nutcracker: not installed\n")
	}
	if m.rproxy != "" {
		p("- rproxy: `%s` (%s; default config except `limits.max_clients: %d`, for the idle connections)\n",
			m.rproxy, m.rproxyBuild, m.maxClients)
	}
	p("- %d interleaved rounds, target order rotated each round; each run measures %v after a %v warm-up; total %v\n",
		m.rounds, m.duration, m.warmup, m.took.Round(time.Second))
	if m.rounds < 3 {
		p("- **fewer than 3 rounds**: medians and spreads need at least 3 to mean much\n")
	}
	if m.quick {
		p("- **quick mode**: short runs, so CPU per request and the tails are coarse; use `make bench` for figures to quote\n")
	}
	p("\n")

	renderHeadline(&b, scs, targets, res)
	scalingNoted := false
	for _, sc := range scs {
		switch sc.kind {
		case kindList:
			renderList(&b, sc, targets, res.lists, m.listN)
		case kindScaling:
			renderScaling(&b, sc, scenarioTargets(sc, targets, m.procs), res.runs[sc.name], m, !scalingNoted)
			scalingNoted = true
		default:
			renderScenario(&b, sc, targets, res.runs[sc.name], m.rounds)
		}
	}
	if len(charts) > 0 {
		p("## Charts\n\n")
		for _, c := range charts {
			p("![%s](%s)\n\n", c.title, c.svg)
			if c.png != "" {
				p("(PNG: [%s](%s))\n\n", c.png, c.png)
			}
		}
	}
	p("## Method\n\n")
	p("- Every figure is the median over rounds; min..max is the spread over rounds. Ratios are medians of " +
		"per-round ratios, so a round in which the shared machine was busy counts against no target in particular.\n")
	p("- Load comes from bench/load in the suite's own process, closed loop; latencies are client-side, " +
		"from each command's send to its reply, in µs (for pipeline 16, per command of a 16-command batch).\n")
	p("- CPU µs/req: utime+stime of the process (all threads, /proc/PID/stat) over the run, warm-up included, " +
		"divided by the requests sent in it. The clock tick is 10 ms, so short runs give coarse figures.\n")
	p("- Redis calls /100 req: GET and SET calls in Redis's INFO commandstats (reset before each run) per 100 " +
		"client requests (stampede: GETs only, the writer's SETs are not counted). Direct Redis is 100 by definition; " +
		"below 100 means coalescing or the local tier answered without Redis.\n")
	p("- Errors: error replies plus failed or broken connections, summed over rounds.\n")
	return b.String()
}

// renderHeadline writes the ratios of every scenario in one table.
func renderHeadline(b *strings.Builder, scs []scenario, targets []string, res *results) {
	hasRedis, hasTwem := slices.Contains(targets, "redis"), slices.Contains(targets, "twemproxy")
	type col struct {
		head  string
		value func(runs map[string][]sample) string
	}
	var cols []col
	ratioCol := func(t, base string) col {
		return col{t + " vs " + base, func(runs map[string][]sample) string {
			return bold(fmtRatio(ratioMedian(series(runs[t], ops), series(runs[base], ops))))
		}}
	}
	for _, t := range targets {
		if t != "redis" && hasRedis {
			cols = append(cols, ratioCol(t, "redis"))
		}
	}
	if hasTwem && slices.Contains(targets, "rproxy") {
		cols = append(cols, ratioCol("rproxy", "twemproxy"))
	}
	// Direct Redis is 100 by definition; only the proxies' counts say something.
	for _, t := range targets {
		if t == "redis" {
			continue
		}
		cols = append(cols, col{"Redis calls /100 req: " + t, func(runs map[string][]sample) string {
			return fmtCalls(median(series(runs[t], upstream)))
		}})
	}
	var idle []string
	for _, sc := range scs {
		if runs := res.runs[sc.name]; sc.kind == kindIdle && runs != nil {
			for _, t := range targets {
				kb := "skipped"
				if v := median(series(runs[t], rssPerConn)); !math.IsNaN(v) {
					kb = fmtNum(v, 1) + " KB"
				}
				idle = append(idle, t+" "+kb)
			}
		}
	}
	// The scaling scenarios have no plain rproxy row; their own sections
	// give their ratios.
	var rows []scenario
	for _, sc := range scs {
		if sc.kind != kindList && sc.kind != kindScaling && res.runs[sc.name] != nil {
			rows = append(rows, sc)
		}
	}
	table := len(cols) > 0 && len(rows) > 0
	if !table && len(idle) == 0 && len(res.lists) == 0 {
		return // nothing to sum up, as when only the scaling scenarios ran
	}
	b.WriteString("## Headline\n\n")
	if table {
		b.WriteString("Throughput relative to direct Redis and to twemproxy (above 1 = more requests per second), " +
			"and how many requests reached Redis per 100 client requests.\n\n| scenario |")
		for _, c := range cols {
			b.WriteString(" " + c.head + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
		for _, sc := range rows {
			runs := res.runs[sc.name]
			fmt.Fprintf(b, "| %s |", sc.label)
			for _, c := range cols {
				b.WriteString(" " + c.value(runs) + " |")
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	if len(idle) > 0 {
		fmt.Fprintf(b, "Memory per idle connection (RSS growth): %s.\n\n", strings.Join(idle, ", "))
	}
	if len(res.lists) > 0 {
		var pass []string
		for _, t := range targets {
			if o, ok := res.lists[t]; ok {
				pass = append(pass, fmt.Sprintf("%s %d/%d", t, len(o.rps), len(o.rps)+len(o.failed)))
			}
		}
		fmt.Fprintf(b, "redis-benchmark default list, tests passed: %s.\n\n", strings.Join(pass, ", "))
	}
}

// renderScenario writes one scenario's table: a row per target.
func renderScenario(b *strings.Builder, sc scenario, targets []string, runs map[string][]sample, rounds int) {
	fmt.Fprintf(b, "## %s: %s\n\n%s.\n\n", sc.name, sc.title, sc.what)
	head := "| target | ops/s | min..max | vs redis | vs twemproxy | p50 µs | p99 µs | p99.9 µs " +
		"| proxy CPU µs/req | redis CPU µs/req | Redis calls /100 req | errors |"
	align := "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if sc.kind == kindStampede {
		head += " null GETs /100 |"
		align += "---:|"
	}
	if sc.kind == kindIdle {
		head += " RSS KB/idle conn | min..max |"
		align += "---:|---:|"
	}
	b.WriteString(head + "\n" + align + "\n")
	for _, t := range targets {
		ss := runs[t]
		if len(ss) == 0 {
			continue
		}
		done := slices.DeleteFunc(slices.Clone(ss), func(s sample) bool { return s.skip != "" })
		if len(done) == 0 {
			fmt.Fprintf(b, "| %s | skipped: %s |\n", t, escape(ss[0].skip))
			continue
		}
		name := t
		if len(done) < len(ss) {
			name = fmt.Sprintf("%s (%d of %d rounds)", t, len(done), rounds)
		}
		o := series(ss, ops)
		lo, hi := spread(o)
		var errs int64
		for _, s := range done {
			errs += s.errors
		}
		vsRedis, vsTwem := "-", "-"
		if t != "redis" {
			vsRedis = bold(fmtRatio(ratioMedian(o, series(runs["redis"], ops))))
		}
		if t != "twemproxy" {
			vsTwem = bold(fmtRatio(ratioMedian(o, series(runs["twemproxy"], ops))))
		}
		fmt.Fprintf(b, "| %s | %s | %s..%s | %s | %s | %s | %s | %s | %s | %s | %s | %d |", name,
			fmtNum(median(o), 0), fmtNum(lo, 0), fmtNum(hi, 0), vsRedis, vsTwem,
			fmtNum(median(series(ss, p50)), 0), fmtNum(median(series(ss, p99)), 0), fmtNum(median(series(ss, p999)), 0),
			fmtNum(median(series(ss, proxyCPU)), 2), fmtNum(median(series(ss, redisCPU)), 2),
			fmtCalls(median(series(ss, upstream))), errs)
		if sc.kind == kindStampede {
			fmt.Fprintf(b, " %s |", fmtNum(median(series(ss, nulls)), 2))
		}
		if sc.kind == kindIdle {
			r := series(ss, rssPerConn)
			lo, hi := spread(r)
			fmt.Fprintf(b, " %s | %s..%s |", fmtNum(median(r), 1), fmtNum(lo, 1), fmtNum(hi, 1))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// totalCPU is the CPU per request of the whole path: proxy plus Redis,
// or Redis alone for direct Redis.
func totalCPU(s sample) float64 {
	if math.IsNaN(s.proxyCPU) {
		return s.redisCPU
	}
	return s.proxyCPU + s.redisCPU
}

// renderScaling writes a scaling scenario's table: a row per target, with
// the rproxy rows one per procs value, and CPU per request as ratios too.
// note adds, for the first scaling section, which procs values ran and why.
func renderScaling(b *strings.Builder, sc scenario, targets []string, runs map[string][]sample, m meta, note bool) {
	fmt.Fprintf(b, "## %s: %s\n\n%s.\n\n", sc.name, sc.title, sc.what)
	if note {
		why := fmt.Sprintf("1, 2 and 4 where they do not exceed the machine's %d CPUs, and %d itself", m.nproc, m.nproc)
		if !slices.Equal(m.procs, defaultProcs(m.nproc)) {
			why = "from -procs"
		}
		fmt.Fprintf(b, "rproxy-procsN is rproxy with `procs: N` in its config (GOMAXPROCS; checked in its start-up log), "+
			"the suite's rproxy config otherwise; one process per value, all on the same Redis. Values: %s (%s). "+
			"The plain rproxy target (procs auto: the CPUs less one, with Redis local) is not run here. "+
			"CPU ratios are medians of per-round ratios, like throughput: proxy CPU against twemproxy's, "+
			"and proxy plus Redis CPU against direct Redis's own.\n\n", joinInts(m.procs), why)
	}
	b.WriteString("| target | ops/s | min..max | vs redis | vs twemproxy | p50 µs | p99 µs | proxy CPU µs/req " +
		"| proxy CPU vs twemproxy | proxy+redis CPU µs/req | proxy+redis CPU vs redis | Redis calls /100 req | errors |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ratio := func(t, base string, f func(sample) float64) string {
		if t == base {
			return "-"
		}
		return bold(fmtRatio(ratioMedian(series(runs[t], f), series(runs[base], f))))
	}
	for _, t := range targets {
		ss := runs[t]
		if len(ss) == 0 {
			continue
		}
		o := series(ss, ops)
		lo, hi := spread(o)
		var errs int64
		for _, s := range ss {
			errs += s.errors
		}
		cpuVsTwem := "-"
		if t != "redis" {
			cpuVsTwem = ratio(t, "twemproxy", proxyCPU)
		}
		fmt.Fprintf(b, "| %s | %s | %s..%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", t,
			fmtNum(median(o), 0), fmtNum(lo, 0), fmtNum(hi, 0), ratio(t, "redis", ops), ratio(t, "twemproxy", ops),
			fmtNum(median(series(ss, p50)), 0), fmtNum(median(series(ss, p99)), 0),
			fmtNum(median(series(ss, proxyCPU)), 2), cpuVsTwem,
			fmtNum(median(series(ss, totalCPU)), 2), ratio(t, "redis", totalCPU),
			fmtCalls(median(series(ss, upstream))), errs)
	}
	b.WriteString("\n")
}

// renderList writes the default-list verdicts: a row per test, a column per target.
func renderList(b *strings.Builder, sc scenario, targets []string, lists map[string]listOutcome, n int) {
	var ts []string
	for _, t := range targets {
		if _, ok := lists[t]; ok {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(b, "## %s: %s\n\n`redis-benchmark -q -n %d` without `-t` (50 clients): requests per second of each "+
		"test, or the error that ended it. redis-benchmark stops at the first error, so after one it is run again "+
		"with `-t` naming the tests not yet run.\n\n| test |", sc.name, sc.title, n)
	for _, t := range ts {
		b.WriteString(" " + t + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(ts)) + "\n")
	b.WriteString("| **passed** |")
	for _, t := range ts {
		o := lists[t]
		fmt.Fprintf(b, " **%d/%d** |", len(o.rps), len(o.rps)+len(o.failed))
	}
	b.WriteString("\n")
	for _, d := range defaultTests() {
		fmt.Fprintf(b, "| %s |", d.name)
		for _, t := range ts {
			o := lists[t]
			if v, ok := o.rps[d.name]; ok {
				fmt.Fprintf(b, " %.0f |", v)
			} else if msg, ok := o.failed[d.name]; ok {
				b.WriteString(" ERROR: " + escape(msg) + " |")
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, t := range ts {
		for _, note := range lists[t].notes {
			fmt.Fprintf(b, "Note: against %s, redis-benchmark printed: %s\n\n", t, escape(note))
		}
	}
}

// fmtNum formats x with the given decimals, "-" for NaN.
func fmtNum(x float64, decimals int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, x)
}

func fmtRatio(x float64) string { return fmtNum(x, 2) }

// fmtCalls shows upstream calls per 100 requests: two decimals below 1,
// where the interesting values (0.05 vs 0.5) live.
func fmtCalls(x float64) string {
	if x < 1 {
		return fmtNum(x, 2)
	}
	return fmtNum(x, 1)
}

func bold(s string) string {
	if s == "-" {
		return s
	}
	return "**" + s + "**"
}

// escape keeps text from breaking a Markdown table row.
func escape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
