package procs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// CPUTicks returns the CPU time, utime+stime, that process pid (all its
// threads) has used, in clock ticks (see [ClockTicks]).
func CPUTicks(pid int) (int64, error) {
	stat, err := readProc(pid, "stat")
	if err != nil {
		return 0, err
	}
	return ParseStatTicks(stat)
}

// readProc returns the text of /proc/PID/name.
func readProc(pid int, name string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	return string(b), err
}

// ParseStatTicks extracts utime+stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) may contain spaces and
// parentheses, so fields are counted from the last ')'.
func ParseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	return utime + stime, nil
}

// ClockTicks returns the kernel's clock ticks per second, USER_HZ
// (getconf CLK_TCK), or 100 if that is unknown.
func ClockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
}

// RSSKB returns the resident set size of process pid in KB (VmRSS in
// /proc/PID/status).
func RSSKB(pid int) (int64, error) {
	status, err := readProc(pid, "status")
	if err != nil {
		return 0, err
	}
	return StatusField(status, "VmRSS")
}

// StatusField returns the number of the "name:   1234 kB" line of status,
// the text of a /proc/PID/status file.
func StatusField(status, name string) (int64, error) {
	for _, l := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == name {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line in /proc status", name)
}

// OpenFilesLimit returns the soft RLIMIT_NOFILE of process pid, from
// /proc/PID/limits.
func OpenFilesLimit(pid int) (uint64, error) {
	limits, err := readProc(pid, "limits")
	if err != nil {
		return 0, err
	}
	return ParseOpenFilesLimit(limits)
}

// ParseOpenFilesLimit reads the soft limit of the "Max open files" line of
// limits, the text of a /proc/PID/limits file; "unlimited" is returned as
// the largest uint64.
func ParseOpenFilesLimit(limits string) (uint64, error) {
	for _, l := range strings.Split(limits, "\n") {
		rest, ok := strings.CutPrefix(l, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		if f[0] == "unlimited" {
			return ^uint64(0), nil
		}
		return strconv.ParseUint(f[0], 10, 64)
	}
	return 0, errors.New("no \"Max open files\" line in /proc limits")
}

// RaiseNoFile raises this process's soft RLIMIT_NOFILE to the hard limit
// and returns the new soft limit. Go raises it at start-up too, but then
// gives children the original soft limit back; an explicit Setrlimit makes
// the raised limit the one that children started afterwards inherit.
func RaiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit NOFILE to %d: %w", lim.Max, err)
	}
	return lim.Cur, nil
}

// Tail returns the last n lines of the file at path, for error messages;
// if the file cannot be read, the error in parentheses.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// FirstLine runs argv and returns the first line of its output (stdout and
// stderr), such as a version; if it fails, argv[0] and the error.
func FirstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return argv[0] + ": " + err.Error()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// CPUModel returns the first "model name" of /proc/cpuinfo, or
// "unknown CPU model".
func CPUModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU model"
}

// LoadAvg returns the 1, 5 and 15 minute load averages of /proc/loadavg,
// space-separated, or "unknown".
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// AllowedCPUs returns the CPU list this process may run on
// (Cpus_allowed_list in /proc/self/status, as taskset -c writes it).
func AllowedCPUs() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// MachineCPUs returns how many CPUs the machine has online, whatever this
// process's affinity (runtime.NumCPU counts only the CPUs it may use, so
// under taskset it would describe the load generator's share).
func MachineCPUs() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "processor") {
			n++
		}
	}
	if n == 0 {
		return runtime.NumCPU()
	}
	return n
}
