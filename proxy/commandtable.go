package proxy

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// commandTable keeps the command table rproxy reads clients' commands with
// (their keys, whether they write, block or hold connection state) in step
// with Redis's. It starts as the built-in table; start replaces it with
// the upstream's own COMMAND reply, retrying until the upstream answers,
// and then asks Redis's command count every Config.TableCheck, and at once
// when a command the table lacks turned out to exist (noteReplies). The
// table and its per-command counters are the Server's fields, which the
// stages read.
type commandTable struct {
	table  *atomic.Pointer[command.Table]
	calls  *atomic.Pointer[callCounters] // made for the current table
	loaded atomic.Bool                   // the first load ended, from Redis or not (Ready)
	now    chan struct{}                 // watch checks at once (noteReplies)
	stop   context.CancelFunc
	done   chan struct{} // closed when the loading goroutine returns

	ask        func(b *upstream.Batch) // runs b on a shared RESP2 connection and waits
	retry      time.Duration           // Config.TableRetry: the first load's longest wait between tries
	check      time.Duration           // Config.TableCheck; < 0: no watching
	fromServer prometheus.Gauge
	log        *zap.Logger
}

// set makes t the command table, with fresh per-command counters (the
// series of a name live on in the CounterVec across tables).
func (ct *commandTable) set(t *command.Table) {
	ct.calls.Store(newCallCounters(t))
	ct.table.Store(t)
}

// start loads the upstream's table and watches it in a goroutine of its
// own, until close.
func (ct *commandTable) start() {
	ctx, cancel := context.WithCancel(context.Background())
	ct.stop, ct.done, ct.now = cancel, make(chan struct{}), make(chan struct{}, 1)
	go func() {
		defer close(ct.done)
		if ct.first(ctx) {
			ct.watch(ctx)
		}
	}()
}

// close stops the loading and watching, and waits for them to end.
func (ct *commandTable) close() {
	ct.stop()
	<-ct.done
}

// first loads the upstream's command table, retrying until the upstream
// answers, and reports whether it came from the upstream.
func (ct *commandTable) first(ctx context.Context) bool {
	b := upstream.NewBatch()
	// Start fast: at start-up the first try usually races the first connect.
	retry := min(10*time.Millisecond, ct.retry)
	for {
		b.Reset()
		b.Add(resp.AppendCommandString(nil, "COMMAND"))
		ct.ask(b)
		reply := b.Reply(0)
		switch {
		case bytesHasPrefix(reply, "-ERR upstream unavailable"):
			// not connected yet: retry
		case len(reply) > 0 && reply[0] == '-':
			// The server does not answer COMMAND: keep the built-in table.
			ct.log.Warn("upstream does not answer COMMAND; using the built-in command table", zap.ByteString("reply", reply))
			ct.loaded.Store(true)
			return false
		default:
			t, err := command.FromReply(reply)
			if err != nil {
				ct.log.Warn("cannot read the upstream's COMMAND reply; using the built-in command table", zap.Error(err))
			} else {
				ct.set(t)
				ct.fromServer.Set(1)
				ct.log.Info("command table loaded from upstream", zap.Int("commands", t.Len()))
			}
			ct.loaded.Store(true)
			return err == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(retry):
		}
		retry = min(retry*2, ct.retry)
	}
}

// watch asks the upstream's COMMAND COUNT every check and loads the table
// again when it differs from the table's: a module loaded, or Redis
// upgraded under rproxy (a failover to an upgraded replica), brings
// commands the table lacks, which rproxy would forward as unknown, not
// knowing their keys, that they block or that they hold connection state.
func (ct *commandTable) watch(ctx context.Context) {
	if ct.check < 0 {
		return
	}
	tick := time.NewTicker(ct.check)
	defer tick.Stop()
	b := upstream.NewBatch()
	ask := func(args ...string) []byte {
		b.Reset()
		b.Add(resp.AppendCommandString(nil, args...))
		ct.ask(b)
		return b.Reply(0)
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-ct.now:
			if time.Since(last) < time.Second {
				continue // a renamed command (rename-command) asks at every call: once a second
			}
		}
		last = time.Now()
		v, err := resp.Parse(ask("COMMAND", "COUNT"))
		old := ct.table.Load()
		if err != nil || v.Kind != ':' || v.Int == int64(old.Len()) {
			continue // unchanged, or not answered now: asked again at the next tick
		}
		t, err := command.FromReply(ask("COMMAND"))
		if err != nil {
			ct.log.Warn("cannot read the upstream's COMMAND reply; the command table stays", zap.Error(err))
			continue
		}
		ct.set(t)
		ct.log.Info("command table loaded again from upstream: its command count changed",
			zap.Int("commands_before", old.Len()), zap.Int("commands", t.Len()))
	}
}

// noteReplies looks at the replies in b of the commands at unknown, which
// are not in the command table: one that Redis did not answer "unknown
// command" exists there, so the table is behind Redis's (a module loaded,
// an upgrade), and watch checks at once rather than at its next tick.
func (ct *commandTable) noteReplies(b *upstream.Batch, unknown []int) {
	for _, i := range unknown {
		if r := b.Reply(i); !bytes.HasPrefix(r, unknownCommandReply) {
			select {
			case ct.now <- struct{}{}:
			default: // a check is due already
			}
			return
		}
	}
}

// unknownCommandReply starts Redis's answer to a command it does not have.
var unknownCommandReply = []byte("-ERR unknown command")

// tableKnows reports whether t has the subcommand sub of cmd.
func tableKnows(t *command.Table, cmd, sub string) bool {
	info := t.Lookup([]byte(cmd))
	if info == nil || info.Subcommands == nil {
		return false
	}
	_, ok := info.Subcommands[sub]
	return ok
}

func bytesHasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}
