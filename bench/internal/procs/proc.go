package procs

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Proc is a long-running child process: redis-server, nutcracker or rproxy.
// Its fields are set by [Set.Start] and must not be changed.
type Proc struct {
	Name    string    // what it is, for messages: "redis-server", "nutcracker", "rproxy"
	Addr    string    // 127.0.0.1:port it serves on
	LogPath string    // its stdout and stderr
	Cmd     *exec.Cmd // the started command; Cmd.Path and Cmd.Args say what runs

	done chan struct{} // closed when the process has exited
	err  error         // how it exited; valid once done is closed
}

// Pid returns the process ID of p.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Alive returns nil while p runs, and once it has exited an error saying
// how, with the last lines of its log.
func (p *Proc) Alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited unexpectedly (%v); last lines of %s:\n%s",
			p.Name, p.err, p.LogPath, Tail(p.LogPath, 15))
	default:
		return nil
	}
}

// WaitPing waits until p answers PING with +PONG on its Addr. It gives up
// with an error, which includes the last lines of p's log, if p exits or
// has not answered within timeout.
func (p *Proc) WaitPing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := p.Alive(); err != nil {
			return err
		}
		if last = Ping(p.Addr); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s on %s did not answer PING within %v: %v; last lines of %s:\n%s",
		p.Name, p.Addr, timeout, last, p.LogPath, Tail(p.LogPath, 15))
}

// Set holds every running child that it started, so that all can be killed
// at exit. The zero Set is ready to use; its methods are safe for
// concurrent use, so StopAll may be called from a signal handler.
type Set struct {
	// Pin, when it names a process's name ("redis-server", "nutcracker",
	// "rproxy"), is the CPU list (taskset -c syntax, "0" or "1-8") it is
	// started on, so that on a many-core machine Redis, the proxies and
	// the load generator do not share cores. Set before the first Start.
	Pin map[string]string

	mu      sync.Mutex
	procs   []*Proc
	stopped bool
}

// Start starts argv with its stdout and stderr going to logPath (truncated
// first), and records it in s under name, serving on addr. The child gets
// its own process group, so that Ctrl-C reaches only the benchmark, which
// then decides when the child stops; and it gets SIGKILL if the thread
// that started it dies (Pdeathsig; see the package documentation for the
// runtime.LockOSThread this needs). After [Set.StopAll], Start fails.
func (s *Set) Start(name, addr, logPath string, argv ...string) (*Proc, error) {
	// O_APPEND: nutcracker also writes its -o log file to the same path.
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer logf.Close()
	if cpus := s.Pin[name]; cpus != "" {
		// taskset execs the program: the PID (and so its CPU accounting
		// in /proc) is the program's.
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
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
	p := &Proc{Name: name, Addr: addr, LogPath: logPath, Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return p, nil
}

// Stop kills the given children with SIGKILL, waits up to 3 seconds each
// for them to exit, and forgets them.
func (s *Set) Stop(ps ...*Proc) {
	for _, p := range ps {
		_ = p.Cmd.Process.Kill()
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = slices.DeleteFunc(s.procs, func(p *Proc) bool { return slices.Contains(ps, p) })
}

// StopAll stops every child in s and makes later calls of Start fail. It
// is safe to call more than once, and concurrently.
func (s *Set) StopAll() {
	s.mu.Lock()
	s.stopped = true
	ps := slices.Clone(s.procs)
	s.mu.Unlock()
	s.Stop(ps...)
}

// Ping sends PING to the Redis-protocol server at addr on a new
// connection and returns nil if it answers +PONG within a second.
func Ping(addr string) error {
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

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Port returns the port of a host:port address, "" if addr has none.
func Port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
