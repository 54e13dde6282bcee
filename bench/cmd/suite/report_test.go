package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeRun is a sample with the given throughput and upstream calls and
// fixed other figures.
func fakeRun(target string, ops, up float64) sample {
	s := sample{ops: ops, p50: 500, p99: 1500, p999: 3000, proxyCPU: 9, redisCPU: 7, upstream: up,
		nulls: math.NaN(), rssPerConn: math.NaN()}
	if target == "redis" {
		s.proxyCPU = math.NaN()
	}
	return s
}

// fakeResults returns three rounds of made-up results for a few scenarios.
func fakeResults() ([]scenario, []string, *results) {
	var scs []scenario
	for _, sc := range allScenarios(defaultIdleConns) {
		if slices.Contains([]string{"get-p1", "hot", "stampede", "idle-10k", "defaultlist"}, sc.name) {
			scs = append(scs, sc)
		}
	}
	targets := []string{"redis", "twemproxy", "rproxy"}
	res := newResults()
	ops := map[string][]float64{
		"redis":     {100000, 80000, 120000},
		"twemproxy": {70000, 60000, 90000}, // per-round ratios 0.70 0.75 0.75
		"rproxy":    {90000, 72000, 96000}, // 0.90 0.90 0.80; vs twemproxy 1.29 1.20 1.07
	}
	up := map[string]float64{"redis": 100, "twemproxy": 100, "rproxy": 0.05}
	for _, sc := range scs {
		if sc.kind == kindList {
			continue
		}
		for _, t := range targets {
			for round := range 3 {
				s := fakeRun(t, ops[t][round], up[t])
				switch sc.kind {
				case kindStampede:
					s.nulls = float64(round)
				case kindIdle:
					s.rssPerConn = 9.5 + float64(round)
					if t == "rproxy" && round == 1 {
						s = sample{skip: "rproxy may open only 1024 files"}
					}
				}
				res.add(sc.name, t, s)
			}
		}
	}
	all := map[string]float64{}
	for _, d := range defaultTests() {
		all[d.name] = 90000
	}
	res.lists["redis"] = listOutcome{rps: all, failed: map[string]string{}}
	twem := map[string]float64{}
	for k, v := range all {
		twem[k] = v
	}
	delete(twem, "PING_INLINE")
	res.lists["twemproxy"] = listOutcome{rps: twem, failed: map[string]string{"PING_INLINE": "Error: closed | gone"},
		notes: []string{"WARNING: Could not fetch server CONFIG"}}
	res.lists["rproxy"] = listOutcome{rps: all, failed: map[string]string{}}
	return scs, targets, res
}

func fakeMeta() meta {
	return meta{date: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), nproc: 2, cpu: "AMD EPYC",
		loadStart: "1.00 1.00 1.00", loadEnd: "2.00 2.00 2.00", redis: "Redis server v=7.0.15",
		nutcracker: "This is nutcracker-0.5.0", rproxy: "rproxy -listen x", rounds: 3,
		duration: 3 * time.Second, warmup: 500 * time.Millisecond, idleConns: 10000, listN: 20000, took: 7 * time.Minute}
}

func TestReportTables(t *testing.T) {
	scs, targets, res := fakeResults()
	charts := []chartFile{{title: "Throughput", svg: "throughput.svg", png: "throughput.png"}}
	r := renderReport(fakeMeta(), scs, targets, res, charts)
	for _, want := range []string{
		"- machine: 2 CPUs (nproc), AMD EPYC",
		"- Redis server v=7.0.15",
		"- This is nutcracker-0.5.0",
		"- 3 interleaved rounds",
		// Headline: medians of per-round ratios, bold.
		"| GET -P 1 | **0.75** | **0.90** | **1.20** | 100.0 | 0.05 |",
		// Scenario table: median, spread, ratios, latencies, CPU, calls, errors.
		"| redis | 100000 | 80000..120000 | - | **1.33** | 500 | 1500 | 3000 | - | 7.00 | 100.0 | 0 |",
		"| rproxy | 90000 | 72000..96000 | **0.90** | **1.20** | 500 | 1500 | 3000 | 9.00 | 7.00 | 0.05 | 0 |",
		// Stampede adds null GETs; idle adds memory per connection and marks the skipped round.
		"| 0.05 | 0 | 1.00 |",
		"| rproxy (2 of 3 rounds) |",
		"| 10.5 | 9.5..11.5 |",
		"Memory per idle connection (RSS growth): redis 10.5 KB, twemproxy 10.5 KB, rproxy 10.5 KB.",
		// Default list: verdicts, escaped error, counts.
		"| **passed** | **20/20** | **19/20** | **20/20** |",
		`| PING_INLINE | 90000 | ERROR: Error: closed \| gone | 90000 |`,
		"tests passed: redis 20/20, twemproxy 19/20, rproxy 20/20",
		"Note: against twemproxy, redis-benchmark printed: WARNING: Could not fetch server CONFIG",
		"![Throughput](throughput.svg)",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(r)
	}
	checkTableShapes(t, r)
}

// checkTableShapes fails if a Markdown table row has more cells than its
// header, or fewer without saying why (a skipped target).
func checkTableShapes(t *testing.T, md string) {
	t.Helper()
	cells := func(row string) int {
		return strings.Count(strings.ReplaceAll(row, `\|`, ""), "|") - 1
	}
	header := 0
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			header = 0
			continue
		}
		if header == 0 {
			header = cells(l)
			continue
		}
		if n := cells(l); n > header || (n < header && !strings.Contains(l, "skipped")) {
			t.Errorf("row has %d cells, header %d: %s", n, header, l)
		}
	}
}

func TestReportSkippedTarget(t *testing.T) {
	scs, targets, res := fakeResults()
	for i := range res.runs["idle-10k"]["twemproxy"] {
		res.runs["idle-10k"]["twemproxy"][i] = sample{skip: "nutcracker may open only 1024 files"}
	}
	r := renderReport(fakeMeta(), scs, targets, res, nil)
	if !strings.Contains(r, "| twemproxy | skipped: nutcracker may open only 1024 files |") ||
		!strings.Contains(r, "twemproxy skipped, rproxy 10.5 KB") {
		t.Errorf("report does not show the skip:\n%s", r)
	}
	if strings.Contains(r, "## Charts") {
		t.Error("a Charts section without charts")
	}
	checkTableShapes(t, r)
}

func TestReportWithoutTwemproxy(t *testing.T) {
	scs, _, res := fakeResults()
	r := renderReport(fakeMeta(), scs, []string{"redis", "rproxy"}, res, nil)
	if !strings.Contains(r, "| GET -P 1 | **0.90** | 0.05 |") {
		t.Errorf("headline without twemproxy:\n%s", r)
	}
	checkTableShapes(t, r)
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtNum(math.NaN(), 2), "-"},
		{fmtNum(1.234, 1), "1.2"},
		{fmtCalls(0.049), "0.05"},
		{fmtCalls(88.26), "88.3"},
		{bold("-"), "-"},
		{bold("0.90"), "**0.90**"},
		{escape("a|b\nc"), `a\|b c`},
		{fmtOps(83612), "83.6k/s"},
		{fmtOps(1040000), "1.04M/s"},
		{fmtOps(950), "950/s"},
		{fmtMicros(490), "490 µs"},
		{fmtMicros(2397), "2.4 ms"},
		{fmtMicros(12000), "12 ms"},
		{thousands(10000), "10,000"},
		{thousands(1234567), "1,234,567"},
		{thousands(200), "200"},
		{short(10000), "10k"},
		{short(1500), "1500"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestReportScaling checks the scaling sections: a row per procs value,
// throughput and CPU per request as ratios to twemproxy and direct Redis,
// and no scaling rows in the headline or the charts.
func TestReportScaling(t *testing.T) {
	var scs []scenario
	for _, sc := range allScenarios(defaultIdleConns) {
		if slices.Contains([]string{"get-p1", "scaling-p1", "scaling-p16"}, sc.name) {
			scs = append(scs, sc)
		}
	}
	targets := []string{"redis", "twemproxy", "rproxy"}
	m := fakeMeta()
	m.procs = []int{1, 2}
	ops := map[string][]float64{
		"redis":         {100000, 80000, 120000},
		"twemproxy":     {70000, 60000, 90000},
		"rproxy":        {90000, 72000, 96000},
		"rproxy-procs1": {90000, 72000, 96000},
		"rproxy-procs2": {45000, 36000, 48000},
	}
	res := newResults()
	for _, sc := range scs {
		for _, tg := range scenarioTargets(sc, targets, m.procs) {
			for round := range 3 {
				s := fakeRun(tg, ops[tg][round], 100)
				if tg == "rproxy-procs2" {
					s.proxyCPU = 18 // twice twemproxy's 9
				}
				res.add(sc.name, tg, s)
			}
		}
	}
	r := renderReport(m, scs, targets, res, nil)
	for _, want := range []string{
		"## scaling-p1: GET -P 1 against rproxy at each procs value",
		"## scaling-p16: GET -P 16 against rproxy at each procs value",
		"Values: 1,2 (1, 2 and 4 where they do not exceed the machine's 2 CPUs, and 2 itself)",
		"| redis | 100000 | 80000..120000 | - | **1.33** | 500 | 1500 | - | - | 7.00 | - | 100.0 | 0 |",
		"| twemproxy | 70000 | 60000..90000 | **0.75** | - | 500 | 1500 | 9.00 | - | 16.00 | **2.29** | 100.0 | 0 |",
		"| rproxy-procs1 | 90000 | 72000..96000 | **0.90** | **1.20** | 500 | 1500 | 9.00 | **1.00** | 16.00 | **2.29** | 100.0 | 0 |",
		"| rproxy-procs2 | 45000 | 36000..48000 | **0.45** | **0.60** | 500 | 1500 | 18.00 | **2.00** | 25.00 | **3.57** | 100.0 | 0 |",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if n := strings.Count(r, "rproxy-procsN is rproxy"); n != 1 {
		t.Errorf("the procs note appears %d times, want once", n)
	}
	if strings.Contains(r, "| scaling -P 1 |") || strings.Count(r, "| rproxy |") != 1 { // get-p1's row only
		t.Error("scaling rows in the headline, or a plain rproxy row in a scaling table")
	}
	if t.Failed() {
		t.Log(r)
	}
	checkTableShapes(t, r)
	if tp := buildCharts(scs, targets, res)["throughput"]; len(tp.groups) != 1 || tp.groups[0].label != "GET -P 1" {
		t.Errorf("throughput chart groups %+v, want GET -P 1 only", tp.groups)
	}

	m.procs = []int{1, 2, 4, 8, 15}
	if r := renderReport(m, scs, targets, res, nil); !strings.Contains(r, "Values: 1,2,4,8,15 (from -procs)") {
		t.Error("a -procs list is not named as such")
	}
	// Scaling alone: no headline without rows.
	if r := renderReport(m, scs[1:], targets, res, nil); strings.Contains(r, "| scenario |") || strings.Contains(r, "## Headline") {
		t.Errorf("a headline without rows:\n%s", r)
	}
}
