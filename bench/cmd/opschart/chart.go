package main

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chart is a time-series chart: panels stacked over one time axis, each
// with its own value axis, and dashed event markers across all of them,
// labelled above the first panel.
type chart struct {
	title, subtitle string
	xMax            float64 // seconds; the time axis runs from 0
	xLabel          string
	panels          []panel
	events          []event
}

// panel is a band of the chart: lines on a value axis from 0, or, when
// strip is set, a 0/1 state drawn as a coloured band, with marks over it.
type panel struct {
	yLabel string // value axis title; a strip's label, shown horizontally
	height int
	lines  []line
	strip  *line                // on where a value is >= 0.5
	marks  []mark               // strip only
	tick   func(float64) string // value axis labels; nil: plain numbers
}

// mark flags an interval of a strip, at least 3 pixels wide so that a
// short one shows, with a label after it.
type mark struct {
	from, to     float64
	color, label string
}

// line is a named series of points; NaN values leave gaps. A wide line
// drawn first stays visible under a thinner one that follows it closely.
type line struct {
	name, color string
	pts         []point
	width       float64 // stroke width; 0 means 2
}

type point struct{ x, y float64 }

type event struct {
	x     float64
	label string
}

// Layout in pixels.
const (
	chartW    = 900
	marginL   = 84 // value axis labels, a strip's label
	marginR   = 24
	panelGap  = 10
	legendRow = 18
	eventRow  = 14
	fontSize  = 12
	stripOff  = "#f8d9cc" // a strip's "off" background
)

// svg renders the chart.
func (c chart) svg() string {
	plotW := float64(chartW - marginL - marginR)
	x := func(t float64) float64 { return marginL + plotW*t/c.xMax }

	// Legend entries flow left to right and wrap at the chart's width.
	type legendItem struct {
		l       line
		isStrip bool
		x, y    float64
	}
	var items []legendItem
	lx, ly := 12.0, 62.0
	add := func(l line, isStrip bool) {
		w := 28 + textWidth(l.name, fontSize) + 18
		if lx+w > chartW-marginR && lx > 12 {
			lx, ly = 12, ly+legendRow
		}
		items = append(items, legendItem{l, isStrip, lx, ly})
		lx += w
	}
	for _, p := range c.panels {
		for _, l := range p.lines {
			add(l, false)
		}
		if p.strip != nil {
			add(*p.strip, true)
		}
	}
	// Event labels: on the first row where they do not overlap the
	// previous label.
	rowEnds := []float64{}
	rows := make([]int, len(c.events))
	for i, e := range c.events {
		x0 := x(e.x) + 3
		r := 0
		for r < len(rowEnds) && x0 < rowEnds[r]+8 {
			r++
		}
		if r == len(rowEnds) {
			rowEnds = append(rowEnds, 0)
		}
		rowEnds[r] = x0 + textWidth(e.label, fontSize-1)
		rows[i] = r
	}
	top := ly + 8 + float64(len(rowEnds))*eventRow + 6
	height := top
	for _, p := range c.panels {
		height += float64(p.height + panelGap)
	}
	bottom := height - panelGap
	height += 44

	var b strings.Builder
	pr := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pr(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="Helvetica, Arial, sans-serif" font-size="%d">`+"\n",
		chartW, height, chartW, height, fontSize)
	pr(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	pr(`<text x="12" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", esc(c.title))
	pr(`<text x="12" y="42" fill="#444">%s</text>`+"\n", esc(c.subtitle))
	for _, it := range items {
		if it.isStrip {
			pr(`<rect x="%.1f" y="%.1f" width="22" height="10" fill="%s" fill-opacity="0.5"/>`+"\n", it.x, it.y-9, it.l.color)
		} else {
			pr(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", it.x, it.y-4, it.x+22, it.y-4, it.l.color, max(it.l.width, 2.5))
		}
		pr(`<text x="%.1f" y="%.1f">%s</text>`+"\n", it.x+28, it.y, esc(it.l.name))
	}

	// Panels.
	y0 := top
	for _, p := range c.panels {
		y1 := y0 + float64(p.height)
		if p.strip != nil {
			c.drawStrip(pr, p, x, y0, y1)
		} else {
			c.drawPanel(pr, p, x, y0, y1)
		}
		y0 = y1 + panelGap
	}
	// Time axis.
	for t := 0.0; t <= c.xMax+1e-9; t += 5 {
		pr(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x(t), bottom, x(t), bottom+4)
		pr(`<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", x(t), bottom+17, strconv.FormatFloat(t, 'f', -1, 64))
	}
	pr(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", marginL+plotW/2, bottom+36, esc(c.xLabel))
	// Events: dashed lines over every panel, up to their labels above the
	// first; label row 0 is the lowest.
	for i, e := range c.events {
		ty := top - 6 - float64(rows[i])*eventRow
		pr(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4,3"/>`+"\n",
			x(e.x), ty-10, x(e.x), bottom)
		pr(`<text x="%.1f" y="%.1f" font-size="11" fill="#333">%s</text>`+"\n", x(e.x)+3, ty, esc(e.label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// drawPanel draws a panel of lines between y0 (top) and y1 (bottom).
func (c chart) drawPanel(pr func(string, ...any), p panel, x func(float64) float64, y0, y1 float64) {
	top := 0.0
	for _, l := range p.lines {
		for _, pt := range l.pts {
			if !math.IsNaN(pt.y) && pt.y > top {
				top = pt.y
			}
		}
	}
	// A gridline every 40 pixels or so, at least 2. A value a hair
	// above a round top (10.02 denials/s) does not add a gridline.
	step := 1.0
	if top > 0 {
		step = niceStep(top / max(2, float64(p.height)/40))
	}
	hi := max(1, math.Ceil(top/step-0.01)) * step
	y := func(v float64) float64 { return y1 - (y1-y0)*v/hi }
	tick := p.tick
	if tick == nil {
		tick = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	}
	for v := 0.0; v <= hi+step/1000; v += step {
		pr(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`+"\n", marginL, y(v), x(c.xMax), y(v))
		pr(`<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", marginL-6, y(v)+4, esc(tick(v)))
	}
	pr(`<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", marginL, y0, x(c.xMax)-marginL, y1-y0)
	mid := (y0 + y1) / 2
	pr(`<text x="20" y="%.1f" text-anchor="middle" transform="rotate(-90 20 %.1f)">%s</text>`+"\n", mid, mid, esc(p.yLabel))
	for _, l := range p.lines {
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				pr(`<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round" points="%s"><title>%s</title></polyline>`+"\n",
					l.color, cmp.Or(l.width, 2), strings.Join(seg, " "), esc(l.name))
			}
			seg = seg[:0]
		}
		for _, pt := range l.pts {
			if math.IsNaN(pt.y) {
				flush()
				continue
			}
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x(pt.x), y(pt.y)))
		}
		flush()
	}
}

// drawStrip draws a 0/1 state: each sample's value holds from halfway
// after the previous sample to halfway before the next.
func (c chart) drawStrip(pr func(string, ...any), p panel, x func(float64) float64, y0, y1 float64) {
	pr(`<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", marginL, y0, x(c.xMax)-marginL, y1-y0, stripOff)
	pts := p.strip.pts
	on := func(i int) bool { return pts[i].y >= 0.5 }
	for i := 0; i < len(pts); i++ {
		if !on(i) {
			continue
		}
		j := i
		for j+1 < len(pts) && on(j+1) {
			j++
		}
		a, b := pts[i].x, pts[j].x
		if i > 0 {
			a = (pts[i-1].x + a) / 2
		}
		if j+1 < len(pts) {
			b = (b + pts[j+1].x) / 2
		}
		pr(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.5"/>`+"\n",
			x(a), y0, x(b)-x(a), y1-y0, p.strip.color)
		i = j
	}
	for _, m := range p.marks {
		w := max(x(m.to)-x(m.from), 3)
		pr(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x(m.from), y0, w, y1-y0, m.color)
		pr(`<text x="%.1f" y="%.1f" font-size="11" fill="#222">%s</text>`+"\n", x(m.from)+w+3, (y0+y1)/2+4, esc(m.label))
	}
	pr(`<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", marginL, y0, x(c.xMax)-marginL, y1-y0)
	pr(`<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", marginL-6, (y0+y1)/2+4, esc(p.yLabel))
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5} {
		if m*e >= v*0.9999 {
			return m * e
		}
	}
	return 10 * e
}

// textWidth estimates the width of text in a sans-serif font: about 0.55
// em per character.
func textWidth(s string, size float64) float64 {
	return 0.55 * size * float64(utf8.RuneCountInString(s))
}

// esc escapes text for SVG.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder cannot fail
	return b.String()
}

// fmtK is a value axis label in thousands: 0, 500, 20k, 1.5k.
func fmtK(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
