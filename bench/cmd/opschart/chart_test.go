package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/bench/internal/svgtest"
)

func testChart() chart {
	pts := func(vs ...float64) []point {
		out := make([]point, len(vs))
		for i, v := range vs {
			out[i] = point{float64(i) * 10, v}
		}
		return out
	}
	return chart{
		title:    "ops <&> test",
		subtitle: "sub",
		xMax:     60,
		xLabel:   "seconds",
		panels: []panel{
			{yLabel: "commands per second", height: 200, tick: fmtK, lines: []line{
				{name: "client commands/s", color: colorClient, pts: pts(40000, 50000, 90000, 60000, 40000, 41000, 39000), width: 4.5},
				{name: "GETs reaching Redis/s", color: colorRedis, pts: pts(40000, 50000, math.NaN(), 20000, 40000, 41000, 39000)},
			}},
			{yLabel: "tier serving", height: 18,
				strip: &line{name: "tier serving", color: colorTier, pts: pts(0, 1, 1, 0, 1, 1, 1)},
				marks: []mark{{25, 25.05, colorDenied, "stopped 50 ms"}}},
			{yLabel: "denied/s", height: 64, lines: []line{
				{name: `KEYS denied/s {action="deny"}`, color: colorDenied, pts: pts(0, 0, 0, 10.02, 10, 0, 0)},
			}},
		},
		events: []event{{15, "hot key joins"}, {25, "tracking connection killed"}, {26, "close by"}, {50, "KEYS client leaves"}},
	}
}

func TestChartSVG(t *testing.T) {
	c := testChart()
	doc := c.svg()
	d := svgtest.Parse(t, doc)
	if d.Width != chartW || d.Height < 300 || d.Height > 600 {
		t.Errorf("size %gx%g", d.Width, d.Height)
	}
	for _, want := range []string{"ops <&> test", "sub", "seconds", "commands per second", "tier serving", "denied/s",
		"client commands/s", "GETs reaching Redis/s", `KEYS denied/s {action="deny"}`, "stopped 50 ms",
		"hot key joins", "tracking connection killed", "close by", "KEYS client leaves",
		"0", "30", "60", "100k", "10"} {
		if _, ok := d.Text(want); !ok {
			t.Errorf("no text %q", want)
		}
	}
	// The NaN splits the Redis line in two; every polyline's points are
	// inside the chart.
	if len(d.Polylines) != 4 {
		t.Errorf("%d polylines, want 4 (client, Redis in two pieces, denied)", len(d.Polylines))
	}
	for _, pl := range d.Polylines {
		for _, p := range strings.Fields(pl) {
			xs, ys, _ := strings.Cut(p, ",")
			x, _ := strconv.ParseFloat(xs, 64)
			y, _ := strconv.ParseFloat(ys, 64)
			if x < marginL || x > chartW-marginR || y < 0 || y > d.Height {
				t.Errorf("point %s outside the plot", p)
			}
		}
	}
	// A value a hair above 10 keeps the denied panel's axis at 10.
	for _, x := range d.Texts {
		if x.X == marginL-6 && x.S == "20" {
			t.Error("denied panel's axis went to 20 for a top of 10.02")
		}
	}
	// Labels of events 1 s apart go on different rows; none runs off the
	// right edge.
	a, _ := d.Text("tracking connection killed")
	b, _ := d.Text("close by")
	if a.Y == b.Y {
		t.Errorf("overlapping event labels on one row, y=%g", a.Y)
	}
	for _, x := range d.Texts {
		if x.X+textWidth(x.S, fontSize) > chartW+1 {
			t.Errorf("text %q at x=%g runs off the chart", x.S, x.X)
		}
	}
}

func TestScaleSteps(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0.3, 0.5}, {1, 1}, {1.2, 2}, {3, 5}, {22000, 50000}, {18000, 20000}} {
		if got := niceStep(c.in); got != c.want {
			t.Errorf("niceStep(%g) = %g, want %g", c.in, got, c.want)
		}
	}
	if got := fmtK(20000); got != "20k" {
		t.Errorf("fmtK(20000) = %q", got)
	}
	if got := fmtK(1500); got != "1.5k" {
		t.Errorf("fmtK(1500) = %q", got)
	}
	if got := fmtK(500); got != "500" {
		t.Errorf("fmtK(500) = %q", got)
	}
}

func TestBuildChartAndReport(t *testing.T) {
	rec := &record{killedAt: 25, killedLine: "id=7 addr=127.0.0.1:1 laddr=x fd=9 age=25 flags=t cmd=ping resp=3",
		outages: []outage{{25.003, 25.055, "tracking_up=false"}}, keysSent: 150, keysDenied: 150}
	for i := 0; i <= 120; i++ {
		at := float64(i) / 2
		s := sample{at: at, clientCmds: 50000 * at, redisGets: 50000 * at, serving: 1}
		if at > 15 && at <= 35 {
			s.tierHits = 30000 * (at - 15)
			s.clientCmds += s.tierHits
			s.hotKeys, s.entries = 1, 1
		} else if at > 35 {
			s.tierHits = 30000 * 20
			s.clientCmds += s.tierHits
		}
		if at > 35 {
			s.denied = 10 * (min(at, 50) - 35)
			s.refused = s.denied
		}
		rec.samples = append(rec.samples, s)
	}
	f := newFigures(rec.samples)
	d := svgtest.Parse(t, buildChart(rec, f, "test machine").svg())
	if _, ok := d.Text("stopped 52 ms (rproxy log)"); !ok {
		t.Error("no outage label")
	}
	md := renderReport(meta{date: "2026-11-21", machine: "2 CPUs", chartFile: "ops.png"}, rec, f)
	for _, want := range []string{
		"![rproxy metrics over time](ops.png)",
		"| uniform | 0-15 | 50.0k | 50.0k | 0.0 | 0.0 |",
		"| uniform + hot key | 15-25 | 80.0k | 50.0k | 30.0k | 0.0 |",
		"| uniform + KEYS every 100 ms | 35-50 | 50.0k | 50.0k | 0.0 | 10.0 |",
		"off for 52 ms",
		"`id=7 addr=127.0.0.1:1 age=25 flags=t cmd=ping resp=3`",
		"150 sent, 150 answered DENIED",
		"first scrape with the tier serving again, holding an entry and counting new hits was at 25.5 s",
		"Under uniform load alone hot_keys stayed 0.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if slices.ContainsFunc(strings.Split(md, "\n"), func(l string) bool { return strings.Contains(l, "NaN") }) {
		t.Errorf("report shows NaN:\n%s", md)
	}
}

func TestRedisVersion(t *testing.T) {
	if got := redisVersion("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"); got != "7.0.15" {
		t.Errorf("got %q", got)
	}
	if got := redisVersion("redis-server: not found"); got != "redis-server: not found" {
		t.Errorf("got %q", got)
	}
}
