package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rproxy/rproxy/bench/internal/svgtest"
)

func TestChartsRender(t *testing.T) {
	scs, targets, res := fakeResults()
	charts := buildCharts(scs, targets, res)
	for _, name := range []string{"throughput", "latency", "upstream"} {
		c, ok := charts[name]
		if !ok {
			t.Fatalf("no %s chart", name)
		}
		doc := c.svg()
		d := svgtest.Parse(t, doc)
		w, h := d.Width, d.Height
		if w != chartWidth || h < 200 || h > 900 {
			t.Errorf("%s: size %vx%v", name, w, h)
		}
		for _, tx := range d.Texts {
			// Text is anchored at x (start, middle or end): stay clear of the edges.
			if tx.X < 0 || tx.X > w-20 || tx.Y < 10 || tx.Y > h {
				t.Errorf("%s: text %q at (%v, %v) is outside the %vx%v picture", name, tx.S, tx.X, tx.Y, w, h)
			}
		}
		all := d.Strings()
		for _, want := range append([]string{c.title}, targets...) {
			if !slices.Contains(all, want) {
				t.Errorf("%s: no text %q in %q", name, want, all)
			}
		}
		if t.Failed() {
			t.Logf("%s:\n%s", name, doc)
		}
	}

	// The values are printed on the bars.
	all := svgtest.Parse(t, charts["throughput"].svg()).Strings()
	for _, want := range []string{"1.00  (100.0k/s)", "0.75  (70.0k/s)", "0.90  (90.0k/s)", "GET -P 1", "10k idle + GET", "redis = 1.0"} {
		if !slices.Contains(all, want) {
			t.Errorf("throughput: no text %q in %q", want, all)
		}
	}
	all = svgtest.Parse(t, charts["latency"].svg()).Strings()
	for _, want := range []string{"hot key p50", "hot key p99", "hot key p99.9", "500 µs", "1.5 ms", "3 ms", "1 ms", "10 ms"} {
		if !slices.Contains(all, want) {
			t.Errorf("latency: no text %q in %q", want, all)
		}
	}
	all = svgtest.Parse(t, charts["upstream"].svg()).Strings()
	for _, want := range []string{"hot key", "stampede", "100.0", "0.05  (99.95% saved)"} {
		if !slices.Contains(all, want) {
			t.Errorf("upstream: no text %q in %q", want, all)
		}
	}
}

func TestChartMissingValueAndEscaping(t *testing.T) {
	c := chart{title: `a <b> & "c"`, axis: "x", series: []string{"redis", "rproxy"},
		colors: []string{"#000", "#111"},
		groups: []barGroup{{label: "g<1>", values: []float64{1, math.NaN()}, texts: []string{"1 & 2", ""}}}}
	all := svgtest.Parse(t, c.svg()).Strings()
	for _, want := range []string{`a <b> & "c"`, "g<1>", "1 & 2", "rproxy: n/a"} {
		if !slices.Contains(all, want) {
			t.Errorf("no text %q in %q", want, all)
		}
	}
}

func TestScale(t *testing.T) {
	c := chart{groups: []barGroup{{values: []float64{0.95, 0.6}}}, ref: 1}
	lo, hi, ticks := c.scale()
	if lo != 0 || hi != 1 || !slices.Equal(ticks, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}) {
		t.Errorf("linear scale = %v..%v %v", lo, hi, ticks)
	}
	c = chart{groups: []barGroup{{values: []float64{130, 2400}}}, log: true}
	lo, hi, ticks = c.scale()
	if lo != 100 || hi != 10000 || !slices.Equal(ticks, []float64{100, 200, 500, 1000, 2000, 5000, 10000}) {
		t.Errorf("log scale = %v..%v %v", lo, hi, ticks)
	}
	c = chart{groups: []barGroup{{values: []float64{1, 50000}}}, log: true}
	if _, _, ticks = c.scale(); !slices.Equal(ticks, []float64{1, 10, 100, 1000, 10000, 100000}) {
		t.Errorf("wide log scale ticks = %v, want decades only", ticks)
	}
	for _, tc := range []struct{ in, want float64 }{{0.19, 0.2}, {0.2, 0.2}, {3, 5}, {120000, 200000}, {0, 1}} {
		if got := niceStep(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("niceStep(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestWriteCharts(t *testing.T) {
	scs, targets, res := fakeResults()
	dir := t.TempDir()
	files, err := writeCharts(dir, scs, targets, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("wrote %d charts, want 3", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.svg))
		if err != nil {
			t.Fatal(err)
		}
		svgtest.Parse(t, string(b))
		if f.png != "" {
			if _, err := os.Stat(filepath.Join(dir, f.png)); err != nil {
				t.Errorf("PNG %s reported but missing: %v", f.png, err)
			}
		}
	}
}
