package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// benchRow is one result line of `redis-benchmark --csv`.
type benchRow struct {
	Test     string
	RPS      float64
	P50, P99 float64 // milliseconds
}

// parseCSV splits redis-benchmark --csv output into result rows and the
// other, non-CSV lines (such as "Error from server: ..."). Redis 7.0 prints
//
//	"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
//	"GET","90909.09","0.270","0.072","0.271","0.351","0.415","0.455"
//
// Columns are found by header name, so added columns do not break parsing.
func parseCSV(out string) (rows []benchRow, other []string, err error) {
	var csvLines []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		// Progress lines end in \r; keep only the final state of a line.
		if i := strings.LastIndexByte(line, '\r'); i >= 0 {
			line = strings.TrimSpace(line[i+1:])
		}
		switch {
		case line == "":
		case strings.HasPrefix(line, `"`):
			csvLines = append(csvLines, line)
		default:
			other = append(other, line)
		}
	}
	if len(csvLines) == 0 {
		return nil, other, fmt.Errorf("no CSV output")
	}
	r := csv.NewReader(strings.NewReader(strings.Join(csvLines, "\n")))
	records, err := r.ReadAll()
	if err != nil {
		return nil, other, fmt.Errorf("bad CSV: %v", err)
	}
	col := map[string]int{}
	for i, name := range records[0] {
		col[name] = i
	}
	for _, name := range []string{"test", "rps", "p50_latency_ms", "p99_latency_ms"} {
		if _, ok := col[name]; !ok {
			return nil, other, fmt.Errorf("CSV header %q lacks column %q", csvLines[0], name)
		}
	}
	for i, rec := range records[1:] {
		num := func(name string) float64 {
			v, perr := strconv.ParseFloat(rec[col[name]], 64)
			if perr != nil && err == nil {
				err = fmt.Errorf("CSV line %q: bad %s %q", csvLines[i+1], name, rec[col[name]])
			}
			return v
		}
		rows = append(rows, benchRow{Test: rec[col["test"]], RPS: num("rps"),
			P50: num("p50_latency_ms"), P99: num("p99_latency_ms")})
	}
	if err != nil {
		return nil, other, err
	}
	return rows, other, nil
}

// median returns the median of xs (the mean of the middle two for an even
// count), or NaN for an empty slice.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sample is the outcome of one redis-benchmark run against one target.
type sample struct {
	rps, p50, p99 float64
	proxyCPU      float64 // proxy CPU microseconds per request (0 for direct redis)
	redisCPU      float64 // redis-server CPU microseconds per request
}

// caseKey identifies one benchmark configuration.
type caseKey struct {
	test     string
	pipeline int
}

// results holds, per case and target, one sample per round (same index = same round).
type results map[caseKey]map[string][]sample

func (r results) add(k caseKey, target string, s sample) {
	if r[k] == nil {
		r[k] = map[string][]sample{}
	}
	r[k][target] = append(r[k][target], s)
}

// field returns f applied to every sample.
func field(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// ratioMedian is the median over rounds of f(a[i]) / f(b[i]). Taking the
// ratio within a round before the median cancels drift that affects all
// targets of that round alike (other load on the machine, thermal state).
func ratioMedian(a, b []sample, f func(sample) float64) float64 {
	if len(a) == 0 || len(a) != len(b) {
		return math.NaN()
	}
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = f(a[i]) / f(b[i])
	}
	return median(ratios)
}

func rps(s sample) float64 { return s.rps }
func p50(s sample) float64 { return s.p50 }
func p99(s sample) float64 { return s.p99 }

// markdownTable renders one row per (test, pipeline, target).
func markdownTable(res results, tests []string, pipelines []int, targets []string) string {
	var b strings.Builder
	b.WriteString("| test | -P | target | rps (median) | rps min..max | rps vs redis | rps vs twemproxy " +
		"| p50 ms | p99 ms | p50 vs redis | proxy CPU µs/req | redis CPU µs/req |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, test := range tests {
		for _, p := range pipelines {
			byTarget := res[caseKey{test, p}]
			for _, t := range targets {
				ss := byTarget[t]
				if len(ss) == 0 {
					continue
				}
				rs := field(ss, rps)
				proxyCPU := "-"
				if t != "redis" {
					proxyCPU = fmt.Sprintf("%.2f", median(field(ss, func(s sample) float64 { return s.proxyCPU })))
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %.0f..%.0f | %s | %s | %.3f | %.3f | %s | %s | %.2f |\n",
					test, p, t, median(rs), slices.Min(rs), slices.Max(rs),
					fmtRatio(ratioMedian(ss, byTarget["redis"], rps)),
					fmtRatio(ratioMedian(ss, byTarget["twemproxy"], rps)),
					median(field(ss, p50)), median(field(ss, p99)),
					fmtRatio(ratioMedian(ss, byTarget["redis"], p50)),
					proxyCPU,
					median(field(ss, func(s sample) float64 { return s.redisCPU })))
			}
		}
	}
	return b.String()
}

func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}
