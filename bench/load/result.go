package load

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency sources, for Result.LatencyFrom.
const (
	FromIntendedSend = "intended_send" // open loop: no coordinated omission
	FromActualSend   = "actual_send"   // closed loop
)

// maxConnErrorSamples bounds how many connection errors Result quotes.
const maxConnErrorSamples = 5

// Result is what Run measured. Counts and latencies cover the measured
// window only (after Warmup).
type Result struct {
	Config Config `json:"config"`
	Mode   string `json:"mode"` // "closed" or "open" loop

	PrepopulateSeconds float64 `json:"prepopulate_seconds,omitempty"`

	Connected int `json:"connected"` // clients that connected

	// Seconds runs from the end of the warm-up until the last client
	// stopped; OpsPerSec is Ops / Seconds.
	Seconds   float64 `json:"seconds"`
	Ops       int64   `json:"ops"` // replies received, error replies included
	OpsPerSec float64 `json:"ops_per_sec"`

	// Open loop only: the target, achieved/target, and whether the achieved
	// rate was at least 99% of the target.
	TargetRate float64 `json:"target_rate,omitempty"`
	RateRatio  float64 `json:"rate_ratio,omitempty"`
	KeptUp     bool    `json:"kept_up"`
	// Unsent counts open-loop commands that fell due before the end but
	// were never sent, because the client was still more than Timeout
	// behind after the end. Their latency is not in the histogram.
	Unsent int64 `json:"unsent,omitempty"`

	Reads  int64 `json:"reads"`  // GET replies
	Writes int64 `json:"writes"` // SET replies
	Hits   int64 `json:"hits"`   // GETs answered with a value
	Nulls  int64 `json:"nulls"`  // GETs answered with a null

	// Errors counts error replies; ErrorsByType splits them by their first
	// word ("ERR", "WRONGTYPE", "DENIED"...).
	Errors       int64            `json:"errors"`
	ErrorsByType map[string]int64 `json:"errors_by_type"`

	// ConnErrors counts clients that failed to connect or whose connection
	// broke; ConnErrorSamples quotes the first few.
	ConnErrors       int64    `json:"conn_errors"`
	ConnErrorSamples []string `json:"conn_error_samples,omitempty"`

	// LatencyFrom says where latency is measured from: FromIntendedSend in
	// open loop, so a stall is charged to every command that should have
	// gone out during it (no coordinated omission); FromActualSend in closed
	// loop. In open loop a command may go out up to 1 ms early, to keep Go's
	// coarse timers out of the figures; its latency then counts from the
	// actual send.
	LatencyFrom string  `json:"latency_from"`
	Latency     Latency `json:"latency_us"`
	// Open loop only: ServiceLatency counts from the actual send, as closed
	// loop does, and SendLag is how late each command went out (actual
	// minus intended send, 0 if early). Latency is SendLag plus
	// ServiceLatency, command by command. A large SendLag means the server
	// (or the generator) could not keep up with the schedule.
	ServiceLatency *Latency `json:"service_latency_us,omitempty"`
	SendLag        *Latency `json:"send_lag_us,omitempty"`

	// TotalOps counts every command sent, warm-up included;
	// ClientCPUMicrosPerOp is this process's CPU time (user + system) over
	// the run divided by TotalOps: the generator's own cost. It includes
	// anything else the process did meanwhile.
	TotalOps             int64   `json:"total_ops"`
	ClientCPUMicrosPerOp float64 `json:"client_cpu_us_per_op"`

	Interrupted bool `json:"interrupted,omitempty"` // ctx ended the run early
}

// Latency summarizes an HdrHistogram of latencies in microseconds
// (1 µs to 60 s, 3 significant digits).
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   int64   `json:"p50"`
	P90   int64   `json:"p90"`
	P99   int64   `json:"p99"`
	P999  int64   `json:"p99_9"`
	Max   int64   `json:"max"`
}

// merge adds up the clients' figures.
func (r *Result) merge(cfg Config, stats []*clientStats, dialErrs []error, connected int, cpu time.Duration) {
	r.Connected = connected
	r.Mode, r.LatencyFrom = "closed", FromActualSend
	if cfg.Rate > 0 {
		r.Mode, r.LatencyFrom = "open", FromIntendedSend
	}
	r.ErrorsByType = map[string]int64{}
	hist, service, lag := newHist(), newHist(), newHist()
	connErrs := append([]error(nil), dialErrs...)
	var endAt int64
	for _, s := range stats {
		r.Ops += s.ops
		r.Reads += s.reads
		r.Writes += s.writes
		r.Hits += s.hits
		r.Nulls += s.nulls
		r.Errors += s.errors
		r.Unsent += s.unsent
		r.TotalOps += s.total
		for w, n := range s.errorsByType {
			r.ErrorsByType[w] += *n
		}
		hist.Merge(s.hist)
		if s.service != nil {
			service.Merge(s.service)
			lag.Merge(s.lag)
		}
		endAt = max(endAt, s.endAt)
		if s.connErr != nil {
			connErrs = append(connErrs, s.connErr)
		}
		r.Interrupted = r.Interrupted || s.interrupted
	}
	r.ConnErrors = int64(len(connErrs))
	for _, err := range connErrs[:min(len(connErrs), maxConnErrorSamples)] {
		r.ConnErrorSamples = append(r.ConnErrorSamples, err.Error())
	}
	r.Seconds = max(0, time.Duration(endAt)-cfg.Warmup).Seconds()
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
	}
	if cfg.Rate > 0 {
		r.TargetRate = cfg.Rate
		r.RateRatio = r.OpsPerSec / cfg.Rate
		r.KeptUp = r.RateRatio >= 0.99
	}
	if r.TotalOps > 0 {
		r.ClientCPUMicrosPerOp = float64(cpu.Microseconds()) / float64(r.TotalOps)
	}
	r.Latency = summarize(hist)
	if cfg.Rate > 0 {
		sl, lg := summarize(service), summarize(lag)
		r.ServiceLatency, r.SendLag = &sl, &lg
	}
}

func summarize(h *hdrhistogram.Histogram) Latency {
	return Latency{
		Count: h.TotalCount(),
		Mean:  h.Mean(),
		P50:   h.ValueAtQuantile(50),
		P90:   h.ValueAtQuantile(90),
		P99:   h.ValueAtQuantile(99),
		P999:  h.ValueAtQuantile(99.9),
		Max:   h.Max(),
	}
}

func (l Latency) String() string {
	return fmt.Sprintf("p50 %d  p90 %d  p99 %d  p99.9 %d  max %d  mean %.1f", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
}

// WriteText writes a readable summary of r.
func (r Result) WriteText(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	dist := c.Dist
	switch c.Dist {
	case DistZipf:
		dist = fmt.Sprintf("zipf s=%g", c.ZipfS)
	case DistHotSet:
		dist = fmt.Sprintf("hotset %d keys take %g%%", c.HotKeys, 100*c.HotFraction)
	}
	if c.Scramble {
		dist += ", scrambled"
	}
	p("target:      %s, %d clients (%d connected), pipeline %d, %s loop\n", c.Addr, c.Clients, r.Connected, c.Pipeline, r.Mode)
	p("workload:    %s over %d keys %q..., %g%% GET, %d-byte values", dist, c.Keys, c.KeyPrefix, 100*c.ReadRatio, c.ValueSize)
	if c.TTL > 0 {
		p(", EX %d", c.TTL)
	}
	p(", seed %d\n", c.Seed)
	if c.Prepopulate {
		p("prepopulate: %d keys in %.2fs\n", c.Keys, r.PrepopulateSeconds)
	}
	p("measured:    %.2fs after %v warm-up", r.Seconds, c.Warmup)
	if r.Interrupted {
		p(" (interrupted)")
	}
	p("\n")
	p("ops:         %d, %.0f ops/s\n", r.Ops, r.OpsPerSec)
	if r.Mode == "open" {
		verdict := "kept up"
		if !r.KeptUp {
			verdict = "DID NOT keep up"
		}
		p("rate:        target %.0f ops/s, achieved %.1f%%: %s (needs >= 99%%)\n", r.TargetRate, 100*r.RateRatio, verdict)
		if r.Unsent > 0 {
			p("unsent:      %d commands were due but never sent (client too far behind)\n", r.Unsent)
		}
	}
	hitPct := 0.0
	if r.Reads > 0 {
		hitPct = 100 * float64(r.Hits) / float64(r.Reads)
	}
	p("reads:       %d (hits %d = %.1f%%, nulls %d)\n", r.Reads, r.Hits, hitPct, r.Nulls)
	p("writes:      %d\n", r.Writes)
	p("errors:      %d", r.Errors)
	for _, word := range slices.Sorted(maps.Keys(r.ErrorsByType)) {
		p("  %s %d", word, r.ErrorsByType[word])
	}
	p("\n")
	p("conn errors: %d\n", r.ConnErrors)
	for _, s := range r.ConnErrorSamples {
		p("  %s\n", s)
	}
	if r.Mode == "open" {
		p("latency µs, from each command's INTENDED send time (open loop: a stall is charged to every\n")
		p("command that should have gone out during it, so there is no coordinated omission; a command\n")
		p("sent up to 1 ms early, to beat Go's coarse timers, counts from its actual send):\n")
	} else {
		p("latency µs, from each command's actual send (closed loop):\n")
	}
	p("  %s\n", r.Latency)
	if r.ServiceLatency != nil && r.SendLag != nil {
		p("service time µs, from the actual send:\n  %s\n", *r.ServiceLatency)
		p("send lag µs, actual minus intended send (on time or early shows as 1):\n  %s\n", *r.SendLag)
	}
	p("client CPU:  %.2f µs per command (%d commands incl. warm-up)\n", r.ClientCPUMicrosPerOp, r.TotalOps)
	_, err := io.WriteString(w, b.String())
	return err
}
