package load

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// Prepopulate settings.
const (
	prepopulateConns = 4
	prepopulateDepth = 1000
)

// Prepopulate SETs every key of cfg's key space once, KeyPrefix + 0 to
// KeyPrefix + (Keys-1), with a ValueSize-byte value (and EX TTL if set, so
// the key space looks the same as after the run's own SETs). It uses 4
// connections, each writing a contiguous range 1000 commands per batch, and
// returns how long it took. Any error reply aborts it.
func Prepopulate(ctx context.Context, cfg Config) (time.Duration, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	start := time.Now()
	conns := uint64(min(prepopulateConns, cfg.Keys))
	per := cfg.Keys / conns
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		lo, hi := i*per, (i+1)*per
		if i == conns-1 {
			hi = cfg.Keys
		}
		wg.Go(func() { errs[i] = prepopulateRange(ctx, cfg, lo, hi) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return time.Since(start), fmt.Errorf("prepopulate %s: %w", cfg.Addr, err)
		}
	}
	return time.Since(start), nil
}

// prepopulateRange SETs keys [lo, hi) over one connection.
func prepopulateRange(ctx context.Context, cfg Config, lo, hi uint64) error {
	d := net.Dialer{Timeout: cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	w := newWire(conn, time.Now())
	cmdSet, cmdEX := []byte("SET"), []byte("EX")
	ttl := strconv.AppendInt(nil, int64(cfg.TTL), 10)
	value := makeValue(cfg.ValueSize)
	key := []byte(cfg.KeyPrefix)
	var out []byte
	for first := lo; first < hi; first += prepopulateDepth {
		if err := ctx.Err(); err != nil {
			return err
		}
		last := min(first+prepopulateDepth, hi)
		out = out[:0]
		for k := first; k < last; k++ {
			key = strconv.AppendUint(key[:len(cfg.KeyPrefix)], k, 10)
			if cfg.TTL > 0 {
				out = resp.AppendCommand(out, cmdSet, key, value, cmdEX, ttl)
			} else {
				out = resp.AppendCommand(out, cmdSet, key, value)
			}
		}
		// A slow server must not hang prepopulation forever.
		if err := conn.SetDeadline(time.Now().Add(cfg.Timeout + 10*time.Second)); err != nil {
			return err
		}
		if _, err := conn.Write(out); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		for k := first; k < last; k++ {
			kind, head, err := w.next()
			if err != nil {
				return fmt.Errorf("reading reply to SET %s%d: %w", cfg.KeyPrefix, k, err)
			}
			if kind == '-' {
				return fmt.Errorf("SET %s%d: %s", cfg.KeyPrefix, k, bytes.TrimRight(head[1:], "\r\n"))
			}
		}
	}
	return nil
}
