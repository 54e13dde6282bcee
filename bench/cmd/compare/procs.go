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

// children holds every running child so that they can all be killed at exit.
var children struct {
	sync.Mutex
	procs   []*proc
	stopped bool
}

// startProc starts argv with its output going to logPath. The child is put
// in its own process group (so that Ctrl-C reaches only us and we decide
// when it stops) and gets SIGKILL if its parent thread dies (Pdeathsig;
// main locks the main goroutine to the main thread, see init in main.go).
func startProc(name, addr, logPath string, argv ...string) (*proc, error) {
	// O_APPEND: nutcracker also writes its -o log file to the same path.
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	children.Lock()
	defer children.Unlock()
	if children.stopped {
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
	children.procs = append(children.procs, p)
	return p, nil
}

// stopAll kills every child started by startProc and waits for them.
// It is safe to call more than once and from a signal handler goroutine.
func stopAll() {
	children.Lock()
	defer children.Unlock()
	children.stopped = true
	for _, p := range children.procs {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range children.procs {
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
		}
	}
	children.procs = nil
}

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
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s on %s did not answer PING within %v: %v; last lines of %s:\n%s",
		p.name, p.addr, timeout, last, p.logPath, tail(p.logPath, 15))
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
		return "", err
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

// nutcrackerConfig returns a twemproxy config with a single pool that
// forwards to one redis over one server connection.
func nutcrackerConfig(listen, redisAddr string) string {
	return fmt.Sprintf(`bench:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  redis: true
  timeout: 5000
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  servers:
    - %s:1
`, listen, redisAddr)
}

// startRedis starts redis-server without persistence on a free port.
func startRedis(dir string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startProc("redis-server", addr, filepath.Join(dir, "redis.log"),
		"redis-server", "--bind", "127.0.0.1", "--port", port(addr),
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	if err != nil {
		return nil, err
	}
	return p, p.waitPing(10 * time.Second)
}

// startNutcracker writes and checks a config, then starts twemproxy.
func startNutcracker(dir, bin, redisAddr string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	stats, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(conf, []byte(nutcrackerConfig(addr, redisAddr)), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-t", "-c", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nutcracker rejects generated config %s: %v\n%s", conf, err, out)
	}
	p, err := startProc("nutcracker", addr, filepath.Join(dir, "nutcracker.log"),
		bin, "-c", conf, "-o", filepath.Join(dir, "nutcracker.log"),
		"-s", port(stats), "-a", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return p, p.waitPing(10 * time.Second)
}

// startRproxy starts the rproxy binary in front of redisAddr.
func startRproxy(dir, bin string, extra []string, redisAddr string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	argv := append([]string{bin, "-listen", addr, "-upstream", redisAddr}, extra...)
	p, err := startProc("rproxy", addr, filepath.Join(dir, "rproxy.log"), argv...)
	if err != nil {
		return nil, err
	}
	return p, p.waitPing(15 * time.Second)
}

// buildRproxy runs `go build -o DIR/rproxy ./cmd/rproxy` in the module root.
func buildRproxy(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
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
