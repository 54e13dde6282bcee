package main

import (
	"math"
	"strings"
	"testing"
)

const csvOut = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","58823.53","0.545","0.144","0.447","0.863","3.103","3.223"
"LRANGE_100 (first 100 elements)","71428.57","0.375","0.160","0.359","0.527","0.719","0.911"
`

func TestParseCSV(t *testing.T) {
	rows, other, err := parseCSV(csvOut)
	if err != nil {
		t.Fatal(err)
	}
	if len(other) != 0 {
		t.Errorf("other = %q, want none", other)
	}
	want := []benchRow{
		{Test: "SET", RPS: 58823.53, P50: 0.447, P99: 3.103},
		{Test: "LRANGE_100 (first 100 elements)", RPS: 71428.57, P50: 0.359, P99: 0.719},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestParseCSVOtherLines(t *testing.T) {
	out := "Error from server: ERR unknown command\n" + csvOut + "SET: rps=1000.0 (overall: 1.0) avg_msec=1\r\n"
	rows, other, err := parseCSV(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || len(other) != 2 || other[0] != "Error from server: ERR unknown command" {
		t.Errorf("rows %d, other %q", len(rows), other)
	}
}

func TestParseCSVErrors(t *testing.T) {
	for name, out := range map[string]string{
		"empty":      "",
		"no csv":     "Error: Server closed the connection\n",
		"bad number": strings.Replace(csvOut, `"58823.53"`, `"fast"`, 1),
		"no p99":     `"test","rps","p50_latency_ms"` + "\n" + `"GET","1","2"` + "\n",
		"ragged":     csvOut + `"GET","1"` + "\n",
	} {
		if _, _, err := parseCSV(out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1, 1000, 9}, 10},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) is not NaN")
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 {
		t.Error("median sorted its argument")
	}
}

func TestRatioMedian(t *testing.T) {
	// Round 2 is slow for everyone (noisy neighbour): per-round ratios stay 0.5.
	a := []sample{{rps: 50}, {rps: 10}, {rps: 60}}
	b := []sample{{rps: 100}, {rps: 20}, {rps: 120}}
	if got := ratioMedian(a, b, rps); got != 0.5 {
		t.Errorf("ratioMedian = %v, want 0.5", got)
	}
	if !math.IsNaN(ratioMedian(a, b[:2], rps)) || !math.IsNaN(ratioMedian(a, nil, rps)) {
		t.Error("mismatched rounds should give NaN")
	}
}

func TestMarkdownTable(t *testing.T) {
	res := results{}
	k := caseKey{"get", 1}
	for _, s := range []struct {
		target string
		s      sample
	}{
		{"redis", sample{rps: 100, p50: 0.2, p99: 0.4, redisCPU: 8}},
		{"twemproxy", sample{rps: 80, p50: 0.4, p99: 0.8, proxyCPU: 10, redisCPU: 3}},
		{"rproxy", sample{rps: 60, p50: 0.3, p99: 0.6, proxyCPU: 12, redisCPU: 3}},
	} {
		res.add(k, s.target, s.s)
	}
	got := markdownTable(res, []string{"get"}, []int{1}, []string{"redis", "twemproxy", "rproxy"})
	for _, want := range []string{
		"| get | 1 | redis | 100 | 100..100 | 1.00 | 1.25 | 0.200 | 0.400 | 1.00 | - | 8.00 |",
		"| get | 1 | rproxy | 60 | 60..60 | 0.60 | 0.75 | 0.300 | 0.600 | 1.50 | 12.00 | 3.00 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	// Without twemproxy the ratio column shows "-".
	got = markdownTable(res, []string{"get"}, []int{1}, []string{"redis", "rproxy"})
	if !strings.Contains(got, "| get | 1 | rproxy | 60 | 60..60 | 0.60 | 0.75 |") {
		t.Errorf("unexpected table:\n%s", got)
	}
}
