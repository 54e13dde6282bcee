package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rproxy/rproxy/bench/internal/procs"
)

// benchTest is one test of redis-benchmark's default list: its -t name
// and the name it prints.
type benchTest struct{ flag, name string }

// lrangePrefill is the LPUSH that redis-benchmark runs before the LRANGE
// tests; it cannot be selected on its own.
const lrangePrefill = "LPUSH (needed to benchmark LRANGE)"

// defaultTests returns redis-benchmark 7.0's default test list in run order.
func defaultTests() []benchTest {
	return []benchTest{
		{"ping_inline", "PING_INLINE"}, {"ping_mbulk", "PING_MBULK"}, {"set", "SET"}, {"get", "GET"},
		{"incr", "INCR"}, {"lpush", "LPUSH"}, {"rpush", "RPUSH"}, {"lpop", "LPOP"}, {"rpop", "RPOP"},
		{"sadd", "SADD"}, {"hset", "HSET"}, {"spop", "SPOP"}, {"zadd", "ZADD"}, {"zpopmin", "ZPOPMIN"},
		{"", lrangePrefill},
		{"lrange_100", "LRANGE_100 (first 100 elements)"}, {"lrange_300", "LRANGE_300 (first 300 elements)"},
		{"lrange_500", "LRANGE_500 (first 500 elements)"}, {"lrange_600", "LRANGE_600 (first 600 elements)"},
		{"mset", "MSET (10 keys)"},
	}
}

// listOutcome is what happened to the default test list against one target.
type listOutcome struct {
	rps    map[string]float64 // tests that completed
	failed map[string]string  // tests that failed, with the error
	notes  []string           // distinct warnings redis-benchmark printed
}

// defaultList runs `redis-benchmark -q -n N` without -t against addr.
// redis-benchmark 7.0 exits at the first error reply or closed connection,
// so after a failure it runs again with -t listing the tests not yet run,
// as bench/cmd/compare -defaultlist does; every test gets a verdict.
func (s *suite) defaultList(ctx context.Context, target, addr string) (listOutcome, error) {
	o := listOutcome{rps: map[string]float64{}, failed: map[string]string{}}
	tests := defaultTests()
	var remaining []string
	for _, d := range tests {
		remaining = append(remaining, d.name)
	}
	for first := true; len(remaining) > 0; first = false {
		argv := []string{"redis-benchmark", "-h", "127.0.0.1", "-p", procs.Port(addr), "-q", "-n", strconv.Itoa(s.cfg.listN)}
		if !first {
			var flags []string
			for _, d := range tests {
				if d.flag != "" && slices.Contains(remaining, d.name) {
					flags = append(flags, d.flag)
				}
			}
			if len(flags) == 0 { // what is left cannot be selected
				break
			}
			argv = append(argv, "-t", strings.Join(flags, ","))
		}
		if s.cfg.verbose {
			fmt.Fprintf(s.log, "$ %s   # %s\n", strings.Join(argv, " "), target)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		cmd := exec.CommandContext(rctx, argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		timedOut := rctx.Err() != nil
		cancel()
		if cerr := ctx.Err(); cerr != nil {
			return o, cerr
		}
		done, msgs := parseQuiet(stdout.String() + "\n" + stderr.String())
		for _, d := range done {
			o.rps[d.name] = d.rps
			remaining = slices.DeleteFunc(remaining, func(n string) bool { return n == d.name })
		}
		var errs []string
		for _, m := range msgs {
			if strings.HasPrefix(m, "WARNING") {
				if !slices.Contains(o.notes, m) {
					o.notes = append(o.notes, m)
				}
				continue
			}
			errs = append(errs, m)
		}
		if err == nil {
			break
		}
		if len(remaining) == 0 {
			break
		}
		// Blame the first test that did not complete.
		failed := remaining[0]
		remaining = remaining[1:]
		msg := strings.Join(errs, "; ")
		if msg == "" || timedOut {
			if timedOut {
				err = fmt.Errorf("timed out")
			}
			msg = strings.TrimSpace(msg + " (" + err.Error() + ")")
		}
		o.failed[failed] = msg
		for _, n := range remaining {
			if timedOut || (failed == lrangePrefill && strings.HasPrefix(n, "LRANGE_")) {
				o.failed[n] = "not run: " + failed + " failed"
			}
		}
		remaining = slices.DeleteFunc(remaining, func(n string) bool { _, ok := o.failed[n]; return ok })
	}
	for _, n := range remaining {
		if _, ok := o.rps[n]; !ok {
			o.failed[n] = "did not run"
		}
	}
	return o, nil
}

// quietResult is one final line of redis-benchmark -q.
type quietResult struct {
	name string
	rps  float64
}

// parseQuiet splits redis-benchmark -q output into results, such as
//
//	GET: 91743.12 requests per second, p50=0.279 msec
//
// and the other lines (warnings, errors). Progress updates, which end in
// \r and contain "rps=", are dropped.
func parseQuiet(out string) (results []quietResult, other []string) {
	re := regexp.MustCompile(`^(.+): ([0-9.]+) requests per second`)
	for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.Contains(line, ": rps=") {
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil {
				results = append(results, quietResult{m[1], v})
				continue
			}
		}
		if !slices.Contains(other, line) {
			other = append(other, line)
		}
	}
	return results, other
}
