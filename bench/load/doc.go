// Package load is a Redis-protocol load generator for benchmarking rproxy
// (or Redis itself) with key distributions and open-loop timing, which
// redis-benchmark lacks. bench/cmd/load is its command-line front end; other
// Go bench programs can call Run directly.
//
//	cfg := load.DefaultConfig()
//	cfg.Addr, cfg.Dist, cfg.ZipfS, cfg.Rate = "127.0.0.1:6380", load.DistZipf, 1.1, 50000
//	res, err := load.Run(ctx, cfg)
//
// # Model
//
// Each of Config.Clients connections has its own goroutine. A client sends
// up to Config.Pipeline commands in one write and reads the replies back in
// order before the next batch. In closed loop (Rate 0) the next batch goes
// as soon as the last is answered, and latency counts from the actual send.
// In open loop the clients share Rate evenly, each on a fixed schedule, and
// latency counts from each command's intended send time: a stall is charged
// to every command that should have gone out during it, so there is no
// coordinated omission. Result also gives open-loop service time (from the
// actual send) and send lag, to tell server delay from schedule slip.
//
// Commands are GET or SET key (Config.ReadRatio), keys named KeyPrefix +
// decimal rank, ranks drawn by a KeyGen: Uniform, Zipf (any exponent > 0),
// Hot (one key) or HotSet, optionally Scrambled. Randomness comes from
// math/rand/v2 PCG seeded with (Config.Seed, client index), so a config
// always issues the same commands per client.
//
// # Cost
//
// The generator usually shares a small machine with the server and proxy it
// measures, so the per-command path allocates nothing: write and read
// buffers are reused, keys are formatted in place with strconv.AppendUint,
// replies are framed by resp.Framer without copying. Result reports the
// process's own CPU time per command.
//
// # Errors
//
// Error replies are counted by their first word (ERR, WRONGTYPE, ...) and
// the run goes on. A connection that breaks ends its client and is counted
// as a connection error; Run fails only when no client can connect.
package load
