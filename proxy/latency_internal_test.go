package proxy

import (
	"bytes"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// The sampler times every batch up to latencyPerTick per tick, then none
// until the next tick.
func TestLatencySampler(t *testing.T) {
	var l latencySampler
	for tick := int64(1000); tick < 1003; tick++ {
		timed := 0
		for range 3 * latencyPerTick {
			if l.sample(tick) {
				timed++
			}
		}
		if timed != latencyPerTick {
			t.Errorf("tick %d: %d of %d batches timed, want %d", tick, timed, 3*latencyPerTick, latencyPerTick)
		}
	}
	if !l.sample(1003) {
		t.Error("the first batch of a new tick was not timed")
	}
}

func TestFamilyOf(t *testing.T) {
	tb := command.Builtin()
	for name, want := range map[string]string{
		"get": "read", "mget": "read", "set": "write", "del": "write", "blpop": "blocking", "multi": "transaction",
		"subscribe": "pubsub", "ping": "connection", "hello": "connection", "select": "connection",
		"config get": "admin", "client setname": "connection", "eval": "scripting", "fcall_ro": "scripting", "info": "other",
	} {
		if got := familyNames[familyOf(tb.LookupArgs(bytes.Fields([]byte(name))))]; got != want {
			t.Errorf("family of %s = %s, want %s", name, got, want)
		}
	}
	if got := familyNames[familyOf(nil)]; got != "unknown" {
		t.Errorf("family of an unknown command = %s", got)
	}
}

func TestQuantile(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{1, 2, 4}})
	for _, v := range []float64{0.5, 1.5, 1.5, 3} { // 1, 2, 1 in the buckets
		h.Observe(v)
	}
	var m dto.Metric
	h.Write(&m)
	for _, c := range []struct{ q, want float64 }{{0.25, 1}, {0.5, 1.5}, {0.75, 2}, {1, 4}} {
		if got := quantile(m.Histogram, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	h.Observe(10) // above the last bucket
	h.Write(&m)
	if got := quantile(m.Histogram, 1); !math.IsInf(got, 1) || usec(got) != "+inf" {
		t.Errorf("quantile above the last bucket = %v", got)
	}
	if got := usec(0.0000505); got != "50.5" {
		t.Errorf("usec(50.5µs) = %q", got)
	}
}

// BenchmarkLatencySampler compares, per batch and from every P at once,
// the process-wide sampler (a coarse clock read and one shared word,
// written only for timed batches) with the per-connection 1-in-8 counter
// it replaced, and with a process-wide 1-in-8 atomic counter (written by
// every batch).
func BenchmarkLatencySampler(b *testing.B) {
	var ms atomic.Int64
	ms.Store(1)
	b.Run("process-wide-per-tick", func(b *testing.B) {
		var l latencySampler
		b.RunParallel(func(pb *testing.PB) {
			n := 0
			for pb.Next() {
				if n++; n%1024 == 0 {
					ms.Add(1) // the clock moves on now and then
				}
				l.sample(ms.Load())
			}
		})
	})
	b.Run("per-connection-1-in-8", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var batches uint64
			timed := 0
			for pb.Next() {
				if batches++; batches%8 == 0 {
					timed++
				}
			}
			_ = timed
		})
	})
	b.Run("process-wide-1-in-8-counter", func(b *testing.B) {
		var c atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = c.Add(1)%8 == 0
			}
		})
	})
}

// BenchmarkTimedBatch is what a timed batch costs on top of an untimed
// one: two clock reads, the family lookup of a one-command batch and two
// histogram observations.
func BenchmarkTimedBatch(b *testing.B) {
	m, t := newMetrics(nil), command.Builtin()
	cmd := resp.Command{Args: [][]byte{[]byte("GET"), []byte("k")}}
	b.ReportAllocs()
	for b.Loop() {
		m.observeBatch(t, time.Now(), cmd, nil)
	}
}
