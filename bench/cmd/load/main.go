// Command load drives a Redis-protocol server or proxy with a chosen key
// distribution, closed or open loop, and reports throughput, hits, errors
// and HdrHistogram latency percentiles. The work is done by package
// bench/load; this is its flag front end.
//
//	go run ./bench/cmd/load -addr 127.0.0.1:6380 -clients 50 -pipeline 1 -duration 10s \
//	   -dist zipf -zipf-s 1.1 -keys 1000000 -read-ratio 1.0 -value-size 32 [-rate 50000] [-prepopulate] [-json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rproxy/rproxy/bench/load"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, asJSON, err := parseFlags(args, stderr)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "load:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	res, err := load.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "load: error:", err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "load: writing result:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (load.Config, bool, error) {
	c := load.DefaultConfig()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: load -addr HOST:PORT [-clients N] [-pipeline N] [-duration D | -requests N] [-rate OPS]\n"+
			"            [-dist uniform|zipf|hot|hotset] [-keys N] [-read-ratio F] [-prepopulate] [-json] ...\n\n"+
			"Drives a Redis-protocol server with GET/SET over a chosen key distribution and reports\n"+
			"throughput, hits, error replies and latency percentiles. -rate > 0 is open loop: latency\n"+
			"is measured from each command's intended send time (no coordinated omission).\n\n")
		fs.PrintDefaults()
	}
	var asJSON bool
	fs.StringVar(&c.Addr, "addr", c.Addr, "server or proxy address host:port")
	fs.IntVar(&c.Clients, "clients", c.Clients, "connections, each driven by its own goroutine")
	fs.IntVar(&c.Pipeline, "pipeline", c.Pipeline, "commands in flight per connection, sent in one write")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to measure (0 with -requests: until the requests are done)")
	fs.Int64Var(&c.Requests, "requests", c.Requests, "total commands to measure; given alone, it replaces -duration")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "open loop: total target commands/s, spread over the clients (0 = closed loop)")
	fs.StringVar(&c.Dist, "dist", c.Dist, "key distribution: uniform, zipf, hot (one key) or hotset")
	fs.Float64Var(&c.ZipfS, "zipf-s", c.ZipfS, "zipf exponent, any s > 0 (YCSB uses 0.99)")
	fs.Uint64Var(&c.Keys, "keys", c.Keys, "key space size; key i is -key-prefix + i, rank 0 the hottest")
	fs.Uint64Var(&c.HotKeys, "hot-keys", c.HotKeys, "hotset: number of hot keys")
	fs.Float64Var(&c.HotFraction, "hot-fraction", c.HotFraction, "hotset: share of requests that go to the hot keys")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "key name prefix")
	fs.BoolVar(&c.Scramble, "scramble", c.Scramble, "map ranks through a fixed bijection so hot keys are spread over the key space")
	fs.Float64Var(&c.ReadRatio, "read-ratio", c.ReadRatio, "share of GETs; the rest are SETs")
	fs.IntVar(&c.ValueSize, "value-size", c.ValueSize, "SET value size in bytes")
	fs.IntVar(&c.TTL, "ttl", c.TTL, "if > 0, SETs carry EX with this many seconds")
	fs.BoolVar(&c.Tracking, "tracking", c.Tracking, "connect as rueidis does: HELLO 3 and CLIENT TRACKING ON OPTIN (stream mode through rproxy)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed; client i uses PCG(seed, i)")
	fs.BoolVar(&c.Prepopulate, "prepopulate", c.Prepopulate, "SET every key once before measuring (4 connections, pipelined 1000 deep)")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "run this long before measuring; excluded from the figures")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "dial timeout, and how long replies may lag past the end")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of the text summary")
	if err := fs.Parse(args); err != nil {
		return c, false, err
	}
	if fs.NArg() > 0 {
		return c, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["requests"] && !set["duration"] {
		c.Duration = 0 // -requests alone: run until they are done
	}
	return c, asJSON, c.Validate()
}
