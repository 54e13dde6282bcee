package load

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// Run drives load at cfg.Addr as cfg describes and returns what it measured.
// With cfg.Prepopulate it first SETs every key (see Prepopulate).
//
// A connection that breaks ends its client; the error is counted in the
// Result and the other clients carry on. Run returns an error only for an
// invalid config, a failed prepopulation, or when no client could connect.
// If ctx ends early, Run stops and returns what was measured so far, with
// Result.Interrupted set.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	gen, err := cfg.KeyGen()
	if err != nil {
		return Result{}, fmt.Errorf("key generator: %w", err)
	}
	res := Result{Config: cfg}
	if cfg.Prepopulate {
		d, err := Prepopulate(ctx, cfg)
		if err != nil {
			return res, err
		}
		res.PrepopulateSeconds = d.Seconds()
	}

	conns, dialErrs := dialAll(ctx, cfg)
	var connected int
	for _, c := range conns {
		if c != nil {
			connected++
		}
	}
	if connected == 0 {
		return res, fmt.Errorf("load: no client could connect to %s: %w", cfg.Addr, dialErrs[0])
	}

	// Start every client's clock together, once all have connected.
	base := time.Now()
	hard, cancel := context.WithCancel(ctx)
	if cfg.Duration > 0 {
		hard, cancel = context.WithDeadline(ctx, base.Add(cfg.Warmup+cfg.Duration+cfg.Timeout))
	}
	defer cancel()
	cpu0 := processCPU()
	clients := make([]*client, 0, connected)
	var wg sync.WaitGroup
	for i, conn := range conns {
		if conn == nil {
			continue
		}
		c := newClient(i, len(clients), connected, &cfg, gen, conn, base)
		clients = append(clients, c)
		wg.Go(func() {
			defer conn.Close()
			c.run(ctx, hard)
		})
	}
	wg.Wait()
	cpu := processCPU() - cpu0

	stats := make([]*clientStats, len(clients))
	for i, c := range clients {
		stats[i] = &c.stats
	}
	res.merge(cfg, stats, dialErrs, connected, cpu)
	return res, nil
}

// dialAll connects the clients in parallel. conns[i] is nil where dialling
// failed, with the reason in errs; errs lists failures in client order.
// With cfg.Tracking each connection is switched to RESP3 with tracking on
// first (startTracking).
func dialAll(ctx context.Context, cfg Config) (conns []net.Conn, errs []error) {
	conns = make([]net.Conn, cfg.Clients)
	dialErr := make([]error, cfg.Clients)
	d := net.Dialer{Timeout: cfg.Timeout}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			c, err := d.DialContext(ctx, "tcp", cfg.Addr)
			if err != nil {
				dialErr[i] = fmt.Errorf("client %d: dial: %w", i, err)
				return
			}
			if cfg.Tracking {
				if err := startTracking(c, cfg.Timeout); err != nil {
					c.Close()
					dialErr[i] = fmt.Errorf("client %d: %w", i, err)
					return
				}
			}
			conns[i] = c
		})
	}
	wg.Wait()
	for _, err := range dialErr {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return conns, errs
}

// startTracking sends HELLO 3 and CLIENT TRACKING ON OPTIN on conn and
// checks the second reply (the first is HELLO's map).
func startTracking(conn net.Conn, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	cmds := resp.AppendCommandString(nil, "HELLO", "3")
	cmds = resp.AppendCommandString(cmds, "CLIENT", "TRACKING", "ON", "OPTIN")
	if _, err := conn.Write(cmds); err != nil {
		return fmt.Errorf("tracking: %w", err)
	}
	w := newWire(conn, time.Now())
	for i, want := range []byte{'%', '+'} {
		kind, head, err := w.next()
		if err != nil {
			return fmt.Errorf("tracking: reply %d: %w", i+1, err)
		}
		if kind != want {
			return fmt.Errorf("tracking: reply %d is %q", i+1, head)
		}
	}
	if !w.drained() {
		return fmt.Errorf("tracking: more than two replies")
	}
	return nil
}
