package main

import (
	"math"
	"testing"

	"github.com/rproxy/rproxy/bench/load"
)

func same(a, b float64) bool {
	return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9
}

func TestMedian(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, nan},
		{[]float64{nan, nan}, nan},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, nan, 1, 3}, 3}, // NaN (a skipped round) is left out
		{[]float64{math.Inf(1), 1, 2}, 1.5},
	} {
		if got := median(tc.in); !same(got, tc.want) {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("median sorted its argument: %v", in)
	}
}

func TestSpread(t *testing.T) {
	lo, hi := spread([]float64{5, math.NaN(), 1, 3})
	if lo != 1 || hi != 5 {
		t.Errorf("spread = %v..%v, want 1..5", lo, hi)
	}
	lo, hi = spread(nil)
	if !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("spread(nil) = %v..%v, want NaN..NaN", lo, hi)
	}
}

func TestRatioMedian(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		a, b []float64
		want float64
	}{
		// Per-round ratios 0.5, 0.9, 1.0: the median is 0.9, whereas the
		// ratio of medians would be 90/100.
		{[]float64{50, 90, 200}, []float64{100, 100, 200}, 0.9},
		{[]float64{50, nan, 100}, []float64{100, 100, 100}, 0.75}, // a skipped round
		{[]float64{50, 60}, []float64{0, 100}, 0.6},               // b = 0 is left out
		{[]float64{1, 2}, []float64{1}, nan},                      // rounds do not line up
		{nil, nil, nan},
	} {
		if got := ratioMedian(tc.a, tc.b); !same(got, tc.want) {
			t.Errorf("ratioMedian(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSeriesSkipsSkippedRuns(t *testing.T) {
	ss := []sample{{ops: 10}, {skip: "limit"}, {ops: 30}}
	got := series(ss, ops)
	if got[0] != 10 || !math.IsNaN(got[1]) || got[2] != 30 {
		t.Errorf("series = %v, want [10 NaN 30]", got)
	}
}

func TestRotate(t *testing.T) {
	ts := []string{"redis", "twemproxy", "rproxy"}
	want := [][]string{
		{"redis", "twemproxy", "rproxy"},
		{"twemproxy", "rproxy", "redis"},
		{"rproxy", "redis", "twemproxy"},
		{"redis", "twemproxy", "rproxy"},
	}
	for round, w := range want {
		got := rotate(ts, round)
		for i := range w {
			if got[i] != w[i] {
				t.Fatalf("rotate(round %d) = %v, want %v", round, got, w)
			}
		}
	}
	if ts[0] != "redis" {
		t.Errorf("rotate changed its argument: %v", ts)
	}
}

func TestToSample(t *testing.T) {
	res := load.Result{TotalOps: 1000, Ops: 900, OpsPerSec: 300, Reads: 800, Nulls: 8, Errors: 2, ConnErrors: 1,
		Latency: load.Latency{P50: 100, P99: 900, P999: 1500}}
	calls := map[string]int64{"get": 50, "set": 10, "ping": 5}
	s, err := toSample(res, calls, []string{"get", "set"}, "rproxy", 10, 5, 100)
	if err != nil {
		t.Fatal(err)
	}
	// 10 ticks at 100 per second = 0.1 s over 1000 requests (warm-up included).
	want := sample{ops: 300, p50: 100, p99: 900, p999: 1500, proxyCPU: 100, redisCPU: 50, upstream: 6, nulls: 1,
		errors: 3, rssPerConn: math.NaN()}
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"ops", s.ops, want.ops}, {"p50", s.p50, want.p50}, {"p99", s.p99, want.p99}, {"p999", s.p999, want.p999},
		{"proxyCPU", s.proxyCPU, want.proxyCPU}, {"redisCPU", s.redisCPU, want.redisCPU},
		{"upstream", s.upstream, want.upstream}, {"nulls", s.nulls, want.nulls}, {"rssPerConn", s.rssPerConn, want.rssPerConn},
	} {
		if !same(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
	if s.errors != 3 {
		t.Errorf("errors = %d, want 3", s.errors)
	}
	s, _ = toSample(res, calls, []string{"get"}, "redis", 10, 10, 100)
	if !math.IsNaN(s.proxyCPU) || s.upstream != 5 {
		t.Errorf("direct redis: proxyCPU %v (want NaN), upstream %v (want 5)", s.proxyCPU, s.upstream)
	}
	if _, err := toSample(load.Result{ConnErrors: 50}, calls, nil, "rproxy", 0, 0, 100); err == nil {
		t.Error("no answered request: want an error")
	}
}
