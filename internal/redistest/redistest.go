package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/resp"
)

// InstallHint is the command that installs the Redis binaries this package
// (and the benchmarks) need.
const InstallHint = "sudo apt-get install -y redis-server redis-tools"

const (
	readyTimeout = 10 * time.Second // how long Start/Restart wait for PING
	stopTimeout  = 5 * time.Second  // SIGTERM grace period before SIGKILL
	startRetries = 10               // port-collision retries in Start
	ioTimeout    = 10 * time.Second // per-command deadline in Do/Exec
)

// errPortInUse reports that the freshly started redis-server could not own
// its port (another process bound it first).
var errPortInUse = errors.New("port already in use")

// Server is a redis-server process started for one test.
type Server struct {
	Addr    string // "127.0.0.1:port"
	Port    int
	Dir     string // working directory (--dir), a t.TempDir()
	LogFile string // redis log file (--logfile), inside Dir

	bin     string   // path of redis-server
	extra   []string // extra command-line arguments given to Start
	confArg string   // a config file given before the other arguments ("" = none): Sentinel needs one
	outFile string   // stdout/stderr of the process, inside Dir

	mu   sync.Mutex
	proc *process // current process; nil when stopped
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // result of Wait; valid after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) signal(sig os.Signal) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// RequireBinary returns the path of the named executable, or fails the test
// with a hint telling how to install it.
func RequireBinary(tb testing.TB, name string) string {
	tb.Helper()
	p, err := lookBinary(name)
	if err != nil {
		tb.Fatalf("%s not found: install it with `%s` (or run `make test`, which installs it)", name, InstallHint)
	}
	return p
}

// lookBinary returns the path of the named executable.
func lookBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	// PATH may be trimmed in some environments; look in the usual places.
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before it is used; callers must cope with that.
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return port
}

// freePort is FreePort's work.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	return port, nil
}

// Start starts redis-server on a free loopback port, waits until it answers
// PING and registers tb.Cleanup to stop it. Extra args are appended to the
// command line, e.g. Start(t, "--maxmemory", "10mb").
//
// Persistence is off (--save "" --appendonly no), so Restart yields an empty
// dataset. Start must be called from the test's goroutine.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return start(tb, func(string) string { return "" }, func() []string { return args })
}

// start is Start with a config file and arguments made for each attempt:
// conf is given the server's directory and returns the file's path ("" for
// none), which goes first on the command line; args is called before every
// attempt, so arguments holding ports of their own (a cluster's bus port)
// change with the client port when a port turns out to be taken.
func start(tb testing.TB, conf func(dir string) string, args func() []string) *Server {
	tb.Helper()
	s := newServer(RequireBinary(tb, "redis-server"), tb.TempDir(), nil)
	s.confArg = conf(s.Dir)
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(s.Stop)

	var lastErr error
	for attempt := 0; attempt < startRetries; attempt++ {
		s.extra = append([]string(nil), args()...)
		port := FreePort(tb)
		p, err := s.launchAndWait(port)
		if err == nil {
			s.setProcess(port, p)
			return s
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			tb.Fatalf("redistest: redis-server failed to start on port %d: %v\n%s", port, err, s.logTail())
		}
	}
	tb.Fatalf("redistest: redis-server failed to start after %d attempts: %v\n%s", startRetries, lastErr, s.logTail())
	return nil
}

// newServer is a Server of binary bin in dir, with extra arguments args,
// not started.
func newServer(bin, dir string, args []string) *Server {
	return &Server{
		bin:     bin,
		Dir:     dir,
		extra:   append([]string(nil), args...),
		LogFile: filepath.Join(dir, "redis.log"),
		outFile: filepath.Join(dir, "redis-stdout.log"),
	}
}

// setProcess records p, started on port, as s's running process.
func (s *Server) setProcess(port int, p *process) {
	s.mu.Lock()
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.proc = p
	s.mu.Unlock()
}

// Restart starts redis-server again on the same port and directory (with
// the same arguments) after Stop or Kill, and waits until it answers PING.
// If the server is still running it is stopped first. The dataset is empty
// afterwards because persistence is disabled.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	deadline := time.Now().Add(readyTimeout)
	for {
		p, err := s.launchAndWait(s.Port)
		if err == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restarting redis-server on %s: %v\n%s", s.Addr, err, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RestartWith is Restart with args in place of the extra arguments given
// to Start: the same server after an upgrade or a changed configuration.
func (s *Server) RestartWith(tb testing.TB, args ...string) {
	tb.Helper()
	s.Stop()
	s.extra = args
	s.Restart(tb)
}

// Stop stops the server: SIGTERM, then SIGKILL if it has not exited after
// 5s. It waits for the process to exit. Calling it again (or after Kill) is
// a no-op. It is safe to call from any goroutine.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	s.proc = nil
	p.signal(syscall.SIGTERM)
	p.signal(syscall.SIGCONT) // a paused server must run to handle SIGTERM
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}

// Kill sends SIGKILL (simulating a crash) and waits for the process to exit.
// It is a no-op if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	s.proc = nil
	p.signal(syscall.SIGKILL)
	<-p.done
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.signal(sig)
	}
}

// Pid returns the process id of the running server, or 0 if it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Do sends one command over a fresh TCP connection and returns the raw RESP
// reply bytes, e.g. "+PONG\r\n" or "$1\r\nv\r\n". A Redis error reply
// ("-ERR ...") is returned, not treated as a failure; network and protocol
// errors fail the test. Call it from the test's goroutine; use Exec from
// other goroutines.
func (s *Server) Do(tb testing.TB, args ...string) []byte {
	tb.Helper()
	reply, err := s.Exec(args...)
	if err != nil {
		tb.Fatalf("redistest: %s %q: %v", s.Addr, args, err)
	}
	return reply
}

// Exec is Do without the testing.TB: it returns network and protocol errors.
func (s *Server) Exec(args ...string) ([]byte, error) {
	return execRaw(s.Addr, ioTimeout, args...)
}

// execRaw sends one command to addr over a new connection and reads one
// complete reply.
func execRaw(addr string, timeout time.Duration, args ...string) ([]byte, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	if _, err := conn.Write(resp.AppendCommandString(nil, args...)); err != nil {
		return nil, err
	}
	return resp.ReadReply(bufio.NewReader(conn), nil)
}

// args returns the redis-server command line for port.
func (s *Server) args(port int) []string {
	var a []string
	if s.confArg != "" {
		a = append(a, s.confArg)
	}
	a = append(a,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
		"--daemonize", "no",
		"--logfile", s.LogFile,
	)
	return append(a, s.extra...)
}

// launch starts redis-server on port. The process is started and waited for
// from one goroutine locked to its OS thread: Pdeathsig fires when the
// *thread* that forked the child exits, so the thread must outlive the child
// (see golang/go#27505). If the whole test binary dies, the child gets
// SIGKILL.
func (s *Server) launch(port int) (*process, error) {
	out, err := os.OpenFile(s.outFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.bin, s.args(port)...)
	cmd.Dir = s.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		out.Close()
		started <- err
		if err != nil {
			close(p.done)
			return
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	return p, nil
}

// launchAndWait launches redis-server on port and waits until that very
// process answers PING. On failure the process is killed and reaped; the
// error wraps errPortInUse when the port was taken by someone else.
func (s *Server) launchAndWait(port int) (*process, error) {
	logStart := fileSize(s.LogFile)
	outStart := fileSize(s.outFile)
	p, err := s.launch(port)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err = waitReady(p, addr)
	if err == nil {
		return p, nil
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	if !errors.Is(err, errPortInUse) {
		newLog := readFrom(s.LogFile, logStart) + readFrom(s.outFile, outStart)
		if strings.Contains(newLog, "Address already in use") {
			err = fmt.Errorf("%w: %v", errPortInUse, err)
		}
	}
	return nil, err
}

// waitReady polls addr with PING until it answers +PONG and checks that the
// server answering is process p (not another server that owns the port).
func waitReady(p *process, addr string) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("redis-server exited before answering PING: %v", p.err)
		}
		lastErr = ping(addr)
		if lastErr == nil {
			pid, err := serverPid(addr)
			if err != nil {
				lastErr = err
			} else if pid != p.cmd.Process.Pid {
				return fmt.Errorf("%w: %s is answered by pid %d, not by our pid %d", errPortInUse, addr, pid, p.cmd.Process.Pid)
			} else {
				return nil
			}
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("no PONG from %s within %v: %v", addr, readyTimeout, lastErr)
}

// ping sends a raw PING and expects "+PONG\r\n".
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return err
	}
	buf := make([]byte, len("+PONG\r\n"))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != "+PONG\r\n" {
		return fmt.Errorf("unexpected PING reply %q", buf)
	}
	return nil
}

// serverPid asks the server at addr for its process id (INFO server).
func serverPid(addr string) (int, error) {
	reply, err := execRaw(addr, 2*time.Second, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(reply), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server reply %q", reply)
}

// logTail returns the last lines of the server's log and stdout/stderr, for
// failure messages.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, f := range []string{s.LogFile, s.outFile} {
		data, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "--- tail of %s ---\n%s\n", f, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(redis-server wrote no log)"
	}
	return b.String()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, off int64) string {
	data, err := os.ReadFile(path)
	if err != nil || off > int64(len(data)) {
		return ""
	}
	return string(data[off:])
}
