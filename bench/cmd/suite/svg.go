package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chart is a grouped horizontal bar chart: one group per row label, one bar
// per series in each group, the value printed at the end of every bar.
// Horizontal bars leave room for the labels and the printed values even
// with a dozen groups of three bars.
type chart struct {
	title, subtitle string
	axis            string // value axis label
	series          []string
	colors          []string // one per series
	groups          []barGroup
	log             bool                 // log-scale value axis (values must be > 0)
	tick            func(float64) string // value axis tick label
	ref             float64              // draw a dashed reference line here; 0 = none
	refLabel        string               // legend entry of the reference line
}

// barGroup is one row label and a value per series; NaN draws no bar and
// prints "n/a".
type barGroup struct {
	label  string
	values []float64
	texts  []string // printed after each bar
}

// Layout in pixels.
const (
	chartWidth  = 800
	marginLeft  = 130 // group labels
	marginRight = 140 // values printed past the longest bar
	plotTop     = 84  // below title, subtitle and legend
	barHeight   = 13
	barGap      = 2
	groupGap    = 12
)

// targetColor is a colour-blind-safe (Okabe-Ito) colour per target.
func targetColor(t string) string {
	switch t {
	case "redis":
		return "#E69F00"
	case "twemproxy":
		return "#999999"
	case "rproxy":
		return "#0072B2"
	}
	return "#009E73"
}

// svg renders the chart.
func (c chart) svg() string {
	ns := max(1, len(c.series))
	groupH := ns*(barHeight+barGap) - barGap
	plotH := len(c.groups)*(groupH+groupGap) + groupGap/2
	plotBottom := plotTop + plotH
	height := plotBottom + 50
	plotW := float64(chartWidth - marginLeft - marginRight)
	lo, hi, ticks := c.scale()
	x := func(v float64) float64 {
		if c.log {
			v = math.Max(v, lo)
			return marginLeft + plotW*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
		}
		return marginLeft + plotW*(v-lo)/(hi-lo)
	}
	tick := c.tick
	if tick == nil {
		tick = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	}

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n",
		chartWidth, height, chartWidth, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", 12, esc(c.title))
	if c.subtitle != "" {
		p(`<text x="%d" y="42" font-size="12" fill="#444">%s</text>`+"\n", 12, esc(c.subtitle))
	}
	// Legend.
	lx := 12.0
	for i, s := range c.series {
		p(`<rect x="%.1f" y="54" width="12" height="12" fill="%s"/>`+"\n", lx, c.colors[i])
		p(`<text x="%.1f" y="64" font-size="12">%s</text>`+"\n", lx+16, esc(s))
		lx += 16 + 7.5*float64(len(s)) + 18
	}
	if c.ref != 0 && c.refLabel != "" {
		p(`<line x1="%.1f" y1="60" x2="%.1f" y2="60" stroke="#333" stroke-width="1.5" stroke-dasharray="5,3"/>`+"\n", lx, lx+22)
		p(`<text x="%.1f" y="64" font-size="12">%s</text>`+"\n", lx+28, esc(c.refLabel))
	}
	// Alternate row shading and the grid.
	for gi := range c.groups {
		if gi%2 == 1 {
			y := plotTop + gi*(groupH+groupGap)
			p(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="#f3f3f3"/>`+"\n", marginLeft, y, plotW, groupH+groupGap)
		}
	}
	for _, t := range ticks {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(t), plotTop, x(t), plotBottom)
		p(`<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="#333">%s</text>`+"\n", x(t), plotBottom+16, esc(tick(t)))
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", marginLeft, plotTop, marginLeft, plotBottom)
	p(`<line x1="%d" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", marginLeft, plotBottom, marginLeft+plotW, plotBottom)
	p(`<text x="%.1f" y="%d" font-size="12" text-anchor="middle">%s</text>`+"\n", marginLeft+plotW/2, plotBottom+36, esc(c.axis))
	// The reference line goes under the bars and their values, so that it
	// never hides a printed value.
	if c.ref != 0 && c.ref >= lo && c.ref <= hi {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333" stroke-width="1.5" stroke-dasharray="5,3"/>`+"\n",
			x(c.ref), plotTop, x(c.ref), plotBottom)
	}
	// Bars. Values sit on a white box, to stay legible where they cross a
	// grid line or the reference line.
	for gi, g := range c.groups {
		y0 := plotTop + groupGap/2 + gi*(groupH+groupGap)
		p(`<text x="%d" y="%.1f" font-size="12" text-anchor="end">%s</text>`+"\n", marginLeft-8, float64(y0)+float64(groupH)/2+4, esc(g.label))
		for si := range c.series {
			y := y0 + si*(barHeight+barGap)
			v := math.NaN()
			if si < len(g.values) {
				v = g.values[si]
			}
			text := ""
			if si < len(g.texts) {
				text = g.texts[si]
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				p(`<text x="%d" y="%d" font-size="11" font-style="italic" fill="#666">%s: n/a</text>`+"\n",
					marginLeft+4, y+barHeight-2, esc(c.series[si]))
				continue
			}
			x0, x1 := x(lo), x(v)
			if !c.log {
				x0 = x(math.Max(lo, 0))
			}
			p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
				x0, y, math.Max(x1-x0, 0), barHeight, c.colors[si], esc(c.series[si]), esc(text))
			tx := math.Max(x1, x0) + 4
			p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="white"/>`+"\n",
				tx-2, y, textWidth(text, 11)+4, barHeight)
			p(`<text x="%.1f" y="%d" font-size="11" fill="#222">%s</text>`+"\n", tx, y+barHeight-2, esc(text))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// scale returns the value axis's range and its ticks: decades on a log
// axis, round steps (1, 2 or 5 times a power of ten) on a linear one.
func (c chart) scale() (lo, hi float64, ticks []float64) {
	var vals []float64
	for _, g := range c.groups {
		for _, v := range g.values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && (!c.log || v > 0) {
				vals = append(vals, v)
			}
		}
	}
	if c.ref != 0 {
		vals = append(vals, c.ref)
	}
	if c.log {
		lo, hi = 1, 10
		if len(vals) > 0 {
			lo = math.Pow(10, math.Floor(math.Log10(slices.Min(vals))))
			hi = math.Pow(10, math.Ceil(math.Log10(slices.Max(vals))))
		}
		if hi <= lo {
			hi = lo * 10
		}
		// 1, 2 and 5 times each power of ten over up to three decades;
		// beyond that the labels would crowd, so decades only.
		steps := []float64{1, 2, 5}
		if hi/lo > 1000.5 {
			steps = []float64{1}
		}
		for d := lo; d <= hi*1.0001; d *= 10 {
			for _, m := range steps {
				if t := roundTick(d * m); t <= hi*1.0001 {
					ticks = append(ticks, t)
				}
			}
		}
		return lo, hi, ticks
	}
	top := 1.0
	if len(vals) > 0 && slices.Max(vals) > 0 {
		top = slices.Max(vals)
	}
	step := niceStep(top / 6) // 6 to 10 grid lines
	hi = math.Ceil(top/step) * step
	for i := 0; float64(i)*step <= hi+step/1000; i++ {
		ticks = append(ticks, roundTick(float64(i)*step))
	}
	return 0, hi, ticks
}

// roundTick drops floating-point noise from a tick value (0.6000000000000001).
func roundTick(v float64) float64 {
	f, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 9, 64), 64)
	if err != nil {
		return v
	}
	return f
}

// textWidth estimates the width of text in a sans-serif font of the given
// size: about 0.5 em per character, a little more than digits and lower
// case take in common sans-serif fonts.
func textWidth(s string, size float64) float64 {
	return 0.5 * size * float64(utf8.RuneCountInString(s))
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= x*0.9999 {
			return m * e
		}
	}
	return 10 * e
}

// esc escapes text for SVG.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder cannot fail
	return b.String()
}

// fmtOps is a compact ops/s figure: 83.6k/s, 1.04M/s.
func fmtOps(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case x >= 1e6:
		return fmt.Sprintf("%.2fM/s", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk/s", x/1e3)
	}
	return fmt.Sprintf("%.0f/s", x)
}

// fmtMicros is a compact latency: 490 µs, 2.4 ms.
func fmtMicros(us float64) string {
	switch {
	case math.IsNaN(us):
		return "-"
	case us >= 1e6:
		return fmt.Sprintf("%.2g s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.3g ms", us/1e3)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// buildCharts returns the three charts of the report, leaving out those
// without data: throughput relative to Redis, latency percentiles of the
// latency scenarios, and upstream calls of the read scenarios.
func buildCharts(scs []scenario, targets []string, res *results) map[string]chart {
	colors := make([]string, len(targets))
	for i, t := range targets {
		colors[i] = targetColor(t)
	}
	out := map[string]chart{}
	hasRedis := slices.Contains(targets, "redis")

	tp := chart{title: "Throughput relative to direct Redis (redis = 1.0)",
		subtitle: "median of per-round ratios; printed: ratio and median requests/s",
		axis:     "requests per second ÷ direct Redis's in the same round (higher is better)",
		series:   targets, colors: colors, ref: 1, refLabel: "redis = 1.0",
		tick: func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }}
	if !hasRedis {
		tp = chart{title: "Throughput", subtitle: "median requests per second over rounds",
			axis: "requests per second (higher is better)", series: targets, colors: colors, tick: fmtOps}
	}
	lat := chart{title: "Client latency percentiles", subtitle: "medians over rounds; log scale",
		axis: "latency, log scale (lower is better)", series: targets, colors: colors, log: true, tick: fmtMicros}
	up := chart{title: "Upstream calls: GETs reaching Redis per 100 client GETs",
		subtitle: "from Redis's INFO commandstats; direct Redis = 100 by definition; printed: calls and share saved",
		axis:     "Redis calls per 100 client GETs (lower = more saved)", series: targets, colors: colors,
		tick: func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }}

	for _, sc := range scs {
		runs := res.runs[sc.name]
		// The charts have a series per target of the other scenarios; the
		// scaling scenarios' procs targets are in their tables only.
		if sc.kind == kindList || sc.kind == kindScaling || runs == nil {
			continue
		}
		g := barGroup{label: sc.label}
		for _, t := range targets {
			o := series(runs[t], ops)
			v, text := median(o), fmtOps(median(o))
			if hasRedis {
				v = ratioMedian(o, series(runs["redis"], ops))
				text = fmtRatio(v) + "  (" + fmtOps(median(o)) + ")"
			}
			g.values, g.texts = append(g.values, v), append(g.texts, text)
		}
		tp.groups = append(tp.groups, g)
		if sc.latencyChart {
			for _, pc := range []struct {
				name string
				f    func(sample) float64
			}{{"p50", p50}, {"p99", p99}, {"p99.9", p999}} {
				g := barGroup{label: sc.label + " " + pc.name}
				for _, t := range targets {
					v := median(series(runs[t], pc.f))
					g.values, g.texts = append(g.values, v), append(g.texts, fmtMicros(v))
				}
				lat.groups = append(lat.groups, g)
			}
		}
		if sc.upstreamChart {
			g := barGroup{label: sc.label}
			for _, t := range targets {
				v := median(series(runs[t], upstream))
				text := fmtCalls(v)
				if t != "redis" && v < 99.95 {
					decimals := 1
					if v < 1 {
						decimals = 2 // 99.98% saved, not 100.0%
					}
					text += fmt.Sprintf("  (%.*f%% saved)", decimals, 100-v)
				}
				g.values, g.texts = append(g.values, v), append(g.texts, text)
			}
			up.groups = append(up.groups, g)
		}
	}
	for name, c := range map[string]chart{"throughput": tp, "latency": lat, "upstream": up} {
		if len(c.groups) > 0 {
			out[name] = c
		}
	}
	return out
}

// writeCharts writes the charts as SVG into dir, and a PNG copy of each
// if rsvg-convert or a headless Chromium is installed.
func writeCharts(dir string, scs []scenario, targets []string, res *results) ([]chartFile, error) {
	charts := buildCharts(scs, targets, res)
	var files []chartFile
	for _, name := range []string{"throughput", "latency", "upstream"} {
		c, ok := charts[name]
		if !ok {
			continue
		}
		f := chartFile{title: c.title, svg: name + ".svg"}
		svgPath := filepath.Join(dir, f.svg)
		if err := os.WriteFile(svgPath, []byte(c.svg()), 0o644); err != nil {
			return nil, fmt.Errorf("writing chart: %w", err)
		}
		if toPNG(svgPath, filepath.Join(dir, name+".png")) == nil {
			f.png = name + ".png"
		}
		files = append(files, f)
	}
	return files, nil
}

// toPNG converts an SVG file with the first converter it finds.
func toPNG(svgPath, pngPath string) error {
	if bin, err := exec.LookPath("rsvg-convert"); err == nil {
		return exec.Command(bin, "-o", pngPath, svgPath).Run()
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		bin, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		abs, err := filepath.Abs(svgPath)
		if err != nil {
			return err
		}
		return exec.Command(bin, "--headless", "--disable-gpu", "--no-sandbox", "--screenshot="+pngPath,
			fmt.Sprintf("--window-size=%d,%d", chartWidth, svgHeight(svgPath)), "file://"+abs).Run()
	}
	return exec.ErrNotFound
}

// svgHeight reads the height attribute of an SVG file written by chart.svg.
func svgHeight(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 400
	}
	_, rest, ok := strings.Cut(string(b), `height="`)
	if !ok {
		return 400
	}
	v, _, _ := strings.Cut(rest, `"`)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 400
	}
	return n
}
