package main

import (
	"math"
	"slices"
)

// sample is the outcome of one run of one scenario against one target.
// NaN marks a figure that does not apply (proxy CPU of direct Redis) or was
// not measured.
type sample struct {
	skip string // why the run did not happen; "" if it did

	ops            float64 // client requests per second in the measured window
	p50, p99, p999 float64 // client latency, µs
	proxyCPU       float64 // proxy CPU µs per client request; NaN for direct redis
	redisCPU       float64 // redis-server CPU µs per client request
	upstream       float64 // commands reaching Redis per 100 client requests
	nulls          float64 // GETs answered with a null, per 100 GETs
	errors         int64   // error replies plus broken or refused connections
	rssPerConn     float64 // idle scenario: target RSS growth per idle connection, KB
}

// series returns f of every sample; NaN where the run was skipped.
func series(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = math.NaN()
		if s.skip == "" {
			out[i] = f(s)
		}
	}
	return out
}

// finite returns the values of xs that are neither NaN nor infinite.
func finite(xs []float64) []float64 {
	var out []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}

// median returns the median of the finite values of xs (the mean of the
// middle two for an even count), or NaN if there are none.
func median(xs []float64) float64 {
	s := finite(xs)
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread returns the lowest and highest finite value of xs, NaN if none.
func spread(xs []float64) (lo, hi float64) {
	s := finite(xs)
	if len(s) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(s), slices.Max(s)
}

// ratioMedian is the median over rounds of a[i] / b[i]. Taking the ratio
// within a round before the median cancels drift that affects every target
// of that round alike (other load on the shared machine), so a busy round
// does not count against whichever target happened to run in it. Rounds
// where either value is missing or b is 0 are left out.
func ratioMedian(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.NaN()
	}
	var r []float64
	for i := range a {
		if b[i] != 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return median(r)
}
