package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// svgTexts parses an SVG document, failing the test if it is not
// well-formed XML, and returns the root's width and height and the content
// of every <text> element with its position.
type svgText struct {
	x, y float64
	s    string
}

func parseSVG(t *testing.T, doc string) (w, h float64, texts []svgText) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	var cur *svgText
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			attr := func(name string) float64 {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						v, err := strconv.ParseFloat(a.Value, 64)
						if err != nil {
							t.Fatalf("<%s %s=%q>: %v", tok.Name.Local, name, a.Value, err)
						}
						return v
					}
				}
				return math.NaN()
			}
			switch tok.Name.Local {
			case "svg":
				if depth != 1 || tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root is not an SVG element: %v", tok.Name)
				}
				w, h = attr("width"), attr("height")
			case "text":
				cur = &svgText{x: attr("x"), y: attr("y")}
			case "rect", "line":
				for _, a := range tok.Attr {
					if (a.Name.Local == "width" || a.Name.Local == "height") && !strings.HasSuffix(a.Value, "%") {
						if v := attr(a.Name.Local); v < 0 || math.IsNaN(v) {
							t.Errorf("<%s> with %s %v", tok.Name.Local, a.Name.Local, v)
						}
					}
				}
			}
		case xml.CharData:
			if cur != nil {
				cur.s += string(tok)
			}
		case xml.EndElement:
			depth--
			if tok.Name.Local == "text" && cur != nil {
				texts = append(texts, *cur)
				cur = nil
			}
		}
	}
	return w, h, texts
}

func textsOf(texts []svgText) []string {
	var out []string
	for _, t := range texts {
		out = append(out, t.s)
	}
	return out
}

func TestChartsRender(t *testing.T) {
	scs, targets, res := fakeResults()
	charts := buildCharts(scs, targets, res)
	for _, name := range []string{"throughput", "latency", "upstream"} {
		c, ok := charts[name]
		if !ok {
			t.Fatalf("no %s chart", name)
		}
		doc := c.svg()
		w, h, texts := parseSVG(t, doc)
		if w != chartWidth || h < 200 || h > 900 {
			t.Errorf("%s: size %vx%v", name, w, h)
		}
		for _, tx := range texts {
			// Text is anchored at x (start, middle or end): stay clear of the edges.
			if tx.x < 0 || tx.x > w-20 || tx.y < 10 || tx.y > h {
				t.Errorf("%s: text %q at (%v, %v) is outside the %vx%v picture", name, tx.s, tx.x, tx.y, w, h)
			}
		}
		all := textsOf(texts)
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
	_, _, texts := parseSVG(t, charts["throughput"].svg())
	all := textsOf(texts)
	for _, want := range []string{"1.00  (100.0k/s)", "0.75  (70.0k/s)", "0.90  (90.0k/s)", "GET -P 1", "10k idle + GET", "redis = 1.0"} {
		if !slices.Contains(all, want) {
			t.Errorf("throughput: no text %q in %q", want, all)
		}
	}
	_, _, texts = parseSVG(t, charts["latency"].svg())
	all = textsOf(texts)
	for _, want := range []string{"hot key p50", "hot key p99", "hot key p99.9", "500 µs", "1.5 ms", "3 ms", "1 ms", "10 ms"} {
		if !slices.Contains(all, want) {
			t.Errorf("latency: no text %q in %q", want, all)
		}
	}
	_, _, texts = parseSVG(t, charts["upstream"].svg())
	all = textsOf(texts)
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
	_, _, texts := parseSVG(t, c.svg())
	all := textsOf(texts)
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
		parseSVG(t, string(b))
		if f.png != "" {
			if _, err := os.Stat(filepath.Join(dir, f.png)); err != nil {
				t.Errorf("PNG %s reported but missing: %v", f.png, err)
			}
		}
	}
}
