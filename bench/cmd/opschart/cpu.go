package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rproxy/rproxy/bench/internal/procs"
)

// cpuSnapshot is the machine's CPU time and that of the run's own
// processes at one moment, in clock ticks. Two of them tell how much of
// the machine other work took during the run: the chart's figures are
// only as steady as the machine was quiet.
type cpuSnapshot struct {
	at    time.Time
	busy  int64 // user, nice, system, irq, softirq of every CPU (/proc/stat)
	steal int64 // time the hypervisor gave the VM's CPUs to others
	ours  int64 // this program, rproxy and redis-server
}

func snapshotCPU(pids ...int) (cpuSnapshot, error) {
	s := cpuSnapshot{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.busy, s.steal, err = parseProcStat(string(b)); err != nil {
		return s, err
	}
	for _, pid := range append(pids, os.Getpid()) {
		n, err := procs.CPUTicks(pid)
		if err != nil {
			return s, err
		}
		s.ours += n
	}
	return s, nil
}

// parseProcStat reads the busy and steal ticks of the "cpu" line of
// /proc/stat: user nice system idle iowait irq softirq steal ...
func parseProcStat(text string) (busy, steal int64, err error) {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
	}
	return v[0] + v[1] + v[2] + v[5] + v[6], v[7], nil
}

// othersShare returns the share of the machine's CPU capacity between a
// and b that went to other processes, and to hypervisor steal.
func othersShare(a, b cpuSnapshot) (others, steal float64) {
	capacity := b.at.Sub(a.at).Seconds() * procs.ClockTicks() * float64(runtime.NumCPU())
	if capacity <= 0 {
		return 0, 0
	}
	return max(0, float64((b.busy-a.busy)-(b.ours-a.ours))) / capacity, float64(b.steal-a.steal) / capacity
}
