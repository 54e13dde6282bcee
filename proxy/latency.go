package proxy

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// latencyPerTick is how many client batches are timed per millisecond of
// the coarse clock, across the whole process.
//
// Which batches are timed is decided process-wide, not per connection, so
// that every client counts: below latencyPerTick batches per millisecond
// (8,000 a second) every batch is timed, so a fleet of short connections
// (a cron job, a CLI, PHP) fills the histogram one batch each. Above it,
// the first latencyPerTick batches of each millisecond are timed: a fixed
// cost however many clients there are (two time.Now and a few histogram
// adds, 8,000 times a second at most), and a sample spread over time and
// over clients alike. The decision costs a read of the coarse clock and of
// one shared word per batch; the word is written only by the batches that
// are timed (BenchmarkLatencySampler).
//
// A per-connection 1-in-N count (what this replaced) never timed a
// connection with fewer than N batches; a process-wide 1-in-N count
// writes one shared counter on every batch, from every core.
const latencyPerTick = 8

// latencySampler decides which batches are timed: at most latencyPerTick
// per tick of the clock it is given.
type latencySampler struct {
	// The tick (milliseconds) in the upper 56 bits, and the batches timed
	// in it so far in the lower 8.
	word atomic.Uint64
}

// sample reports whether a batch starting at tick nowMs is timed.
func (l *latencySampler) sample(nowMs int64) bool {
	tick := uint64(nowMs) << 8
	for {
		w := l.word.Load()
		next := tick | 1
		if w&^0xff == tick {
			if w&0xff >= latencyPerTick {
				return false // the common case under load: no write
			}
			next = w + 1
		}
		if l.word.CompareAndSwap(w, next) {
			return true
		}
	}
}

// Command families: the label values of command_duration_seconds, from the
// command table's flags and handling (a small fixed set, never keys).
const (
	famRead uint8 = iota
	famWrite
	famBlocking
	famTransaction
	famPubSub
	famConnection
	famAdmin
	famScripting
	famOther
	famUnknown
	famMixed // a batch with commands of several families
	famCount
)

var familyNames = [famCount]string{"read", "write", "blocking", "transaction", "pubsub", "connection", "admin", "scripting", "other", "unknown", "mixed"}

// familyOf is the family of one command (nil: not in the table).
func familyOf(info *command.Info) uint8 {
	if info == nil {
		return famUnknown
	}
	name, _, _ := strings.Cut(info.Name, "|") // a subcommand: its command's name
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "script", "function":
		return famScripting
	case "ping", "echo", "auth", "client":
		return famConnection
	}
	switch info.Handling {
	case command.BlockingCmd:
		return famBlocking
	case command.Transaction:
		return famTransaction
	case command.Subscribe:
		return famPubSub
	case command.Hello, command.Client, command.Select, command.Quit, command.Reset:
		return famConnection
	}
	switch {
	case info.Has(command.Admin):
		return famAdmin
	case info.Has(command.Write):
		return famWrite
	case info.Has(command.ReadOnly):
		return famRead
	}
	return famOther
}

// batchFamily is the family of a batch's commands in t: theirs when they
// share one, else famMixed. Called for timed batches only (a table lookup
// per command).
func batchFamily(t *command.Table, first resp.Command, rest []resp.Command) uint8 {
	f := familyOf(t.LookupArgs(first.Args))
	for _, c := range rest {
		if familyOf(t.LookupArgs(c.Args)) != f {
			return famMixed
		}
	}
	return f
}

// latencyMetrics is the per-family histogram, resolved once per family.
type latencyMetrics struct {
	family [famCount]prometheus.Observer
}

func newLatencyMetrics(reg prometheus.Registerer) *latencyMetrics {
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "rproxy", Subsystem: "proxy",
		Name:    "command_duration_seconds",
		Help:    "Time to serve a timed client batch, by the family of its commands (mixed: several families), from reading it to writing its replies.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)}, []string{"family"})
	m := &latencyMetrics{}
	for f, name := range familyNames {
		m.family[f] = vec.WithLabelValues(name) // every family present from the start
	}
	if reg != nil {
		reg.MustRegister(vec)
	}
	return m
}

// observeBatch records a timed batch that started at start, whose
// commands are read with t.
func (m *metrics) observeBatch(t *command.Table, start time.Time, first resp.Command, rest []resp.Command) {
	d := time.Since(start).Seconds()
	m.batchSeconds.Observe(d)
	m.latency.family[batchFamily(t, first, rest)].Observe(d)
}

// latencyInfo renders the INFO lines of the timed batches: all of them,
// then each family that has any, as p50 and p99 in microseconds since
// start (interpolated within the histogram's buckets, as
// histogram_quantile does) and the count, in the form of Redis's
// latency_percentiles_usec_<command> lines.
func (m *metrics) latencyInfo(field func(k string, v any)) {
	line := func(o prometheus.Observer) (string, bool) {
		m, ok := o.(prometheus.Metric)
		if !ok {
			return "", false
		}
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Histogram.GetSampleCount() == 0 {
			return "", false
		}
		h := pb.Histogram
		return fmt.Sprintf("p50=%s,p99=%s,count=%d", usec(quantile(h, 0.5)), usec(quantile(h, 0.99)), h.GetSampleCount()), true
	}
	if l, ok := line(m.batchSeconds); ok {
		field("batch_latency_usec", l)
	} else {
		field("batch_latency_usec", "count=0")
	}
	for f, name := range familyNames {
		if l, ok := line(m.latency.family[f]); ok {
			field("latency_percentiles_usec_"+name, l)
		}
	}
}

// usec formats seconds as microseconds with three decimals, as Redis's
// latency percentiles are ("+inf" above the last bucket).
func usec(sec float64) string {
	if math.IsInf(sec, 1) {
		return "+inf"
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", sec*1e6), "0"), ".")
}

// quantile estimates the q-quantile of a histogram as Prometheus's
// histogram_quantile does: linear within the bucket it falls in, from 0
// for the first bucket.
func quantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if count >= rank {
			if count == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(count-below)
		}
		lower, below = upper, count
	}
	return math.Inf(1)
}
