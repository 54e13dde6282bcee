package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a long-running child process: redis-server, nutcracker or rproxy.
type proc struct {
	name    string
	addr    string // 127.0.0.1:port it serves on
	logPath string // its stdout and stderr
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // how it exited; valid once done is closed
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive returns an error describing the exit if p is no longer running.
func (p *proc) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited unexpectedly (%v); last lines of %s:\n%s",
			p.name, p.err, p.logPath, tail(p.logPath, 15))
	default:
		return nil
	}
}

// waitPing waits until p answers PING with +PONG.
func (p *proc) waitPing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := p.alive(); err != nil {
			return err
		}
		if last = ping(p.addr); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s on %s did not answer PING within %v: %v; last lines of %s:\n%s",
		p.name, p.addr, timeout, last, p.logPath, tail(p.logPath, 15))
}

// procSet holds every running child so that all can be killed at exit.
type procSet struct {
	mu      sync.Mutex
	procs   []*proc
	stopped bool
}

// start starts argv with its output going to logPath. The child gets its
// own process group, so that Ctrl-C reaches only the suite, which then
// decides when the child stops; and it gets SIGKILL if the thread that
// started it dies (Pdeathsig; main locks itself to the main thread, see
// init in main.go), so a suite killed with SIGKILL leaks no servers.
func (s *procSet) start(name, addr, logPath string, argv ...string) (*proc, error) {
	// O_APPEND: nutcracker also writes its -o log file to the same path.
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, errors.New("shutting down")
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, addr: addr, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return p, nil
}

// stop kills the given children and waits for them to exit.
func (s *procSet) stop(ps ...*proc) {
	for _, p := range ps {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = slices.DeleteFunc(s.procs, func(p *proc) bool { return slices.Contains(ps, p) })
}

// stopAll kills every child and refuses to start new ones. It is safe to
// call more than once.
func (s *procSet) stopAll() {
	s.mu.Lock()
	s.stopped = true
	ps := slices.Clone(s.procs)
	s.mu.Unlock()
	s.stop(ps...)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// cpuTicks returns utime+stime of pid (all its threads) in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatTicks(string(b))
}

// parseStatTicks extracts utime+stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) may contain spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatTicks(stat string) (int64, error) {
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

// rssKB returns the resident set size of pid in KB (VmRSS).
func rssKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return statusField(string(b), "VmRSS")
}

// statusField returns the number of a "Name:   1234 kB" line of /proc/PID/status.
func statusField(status, name string) (int64, error) {
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

// openFilesLimit returns the soft RLIMIT_NOFILE of pid, from /proc/PID/limits.
func openFilesLimit(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	return parseOpenFilesLimit(string(b))
}

// parseOpenFilesLimit reads the soft limit of the "Max open files" line of
// /proc/PID/limits; "unlimited" is returned as the largest uint64.
func parseOpenFilesLimit(limits string) (uint64, error) {
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

// raiseNoFile raises this process's soft RLIMIT_NOFILE to the hard limit
// and returns the new soft limit. Go raises it at start-up too, but then
// gives children the original soft limit back; an explicit Setrlimit makes
// the raised limit the one that nutcracker and redis-server inherit.
func raiseNoFile() (uint64, error) {
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

// clockTicks returns the kernel's USER_HZ (getconf CLK_TCK), 100 if unknown.
func clockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
}

// findNutcracker returns the nutcracker binary, which Debian installs in
// /usr/sbin, not always in a user's PATH.
func findNutcracker() (string, error) {
	if p, err := exec.LookPath("nutcracker"); err == nil {
		return p, nil
	}
	const p = "/usr/sbin/nutcracker"
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// buildRproxy runs `go build -o DIR/rproxy ./cmd/rproxy` in the module root.
func buildRproxy(root, dir string) (string, error) {
	out := filepath.Join(dir, "rproxy")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/rproxy")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rproxy failed (%v); pass -rproxy BINARY or "+
			"-targets redis,twemproxy:\n%s", err, b)
	}
	return out, nil
}

// moduleRoot finds the directory holding go.mod, starting at the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found; run from inside the rproxy module")
		}
		dir = parent
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
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

// firstLine runs argv and returns the first line of its output.
func firstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return argv[0] + ": " + err.Error()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU model"
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
