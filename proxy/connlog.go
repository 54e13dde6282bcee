package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// defaultConnSummaryEvery is how often the client connection summary is
// logged when Config.ConnSummaryEvery is 0.
const defaultConnSummaryEvery = time.Minute

// connCounts are the client connection figures a summary line reports,
// read from the metrics (the accept and close paths count nothing more).
type connCounts struct {
	opened float64
	open   int64
	byWhy  [len(closeReasons)]float64 // client_closed_by_proxy_total by reason
}

// connSummary writes the client connection summary lines
// (start) from the metrics and the count of open clients.
type connSummary struct {
	metrics *metrics
	open    *atomic.Int64 // Server.clients
	log     *zap.Logger
}

func (cs connSummary) counts() connCounts {
	c := connCounts{opened: counterValue(cs.metrics.accepted), open: cs.open.Load()}
	for i, r := range closeReasons {
		c.byWhy[i] = counterValue(cs.metrics.rejected.WithLabelValues(r))
	}
	return c
}

// counterValue reads a counter (for a summary, not the hot path).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// start logs, every interval until ctx ends (and once more
// then), one info line with the client connections opened and closed
// since the last line and why rproxy closed or refused any: connection
// events themselves are logged at debug, so short-lived clients do not
// flood the journal. An interval with no connection event writes no line.
// The returned channel is closed once the last line is written.
func (cs connSummary) start(ctx context.Context, every time.Duration) <-chan struct{} {
	done := make(chan struct{})
	if every < 0 {
		close(done)
		return done
	}
	if every == 0 {
		every = defaultConnSummaryEvery
	}
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		last := cs.counts()
		for {
			select {
			case <-ctx.Done():
				cs.write(last, cs.counts(), every)
				return
			case <-t.C:
				now := cs.counts()
				cs.write(last, now, every)
				last = now
			}
		}
	}()
	return done
}

// write writes the summary of what changed from last to now.
func (cs connSummary) write(last, now connCounts, every time.Duration) {
	opened := int64(now.opened - last.opened)
	closed := opened - (now.open - last.open)
	fields := []zap.Field{zap.Int64("opened", opened), zap.Int64("closed", closed), zap.Int64("open", now.open),
		zap.Float64("interval_seconds", every.Seconds())}
	changed := opened != 0 || closed != 0
	for i, r := range closeReasons {
		n := int64(now.byWhy[i] - last.byWhy[i])
		if n == 0 {
			continue
		}
		changed = true
		// max_clients and tls_handshake refuse a client before it is a
		// session; the others close one.
		key := "closed_" + r
		if r == "max_clients" || r == "tls_handshake" {
			key = "refused_" + r
		}
		fields = append(fields, zap.Int64(key, n))
	}
	if changed {
		cs.log.Info("client connections", fields...)
	}
}
