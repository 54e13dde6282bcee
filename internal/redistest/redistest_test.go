package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rproxy/rproxy/resp"
)

func TestStartDo(t *testing.T) {
	s := Start(t)
	if s.Port == 0 || s.Addr != "127.0.0.1:"+strconv.Itoa(s.Port) {
		t.Fatalf("bad address: Addr=%q Port=%d", s.Addr, s.Port)
	}
	if s.Dir == "" || s.LogFile == "" {
		t.Fatalf("Dir/LogFile not set: %+v", s)
	}
	if s.Pid() == 0 {
		t.Fatal("Pid() = 0 for a running server")
	}
	wantReply(t, s, "+PONG\r\n", "PING")
	wantReply(t, s, "+OK\r\n", "SET", "k", "hello world")
	wantReply(t, s, "$11\r\nhello world\r\n", "GET", "k")
	wantReply(t, s, "$-1\r\n", "GET", "missing")
	wantReply(t, s, ":1\r\n", "DEL", "k")
	wantReply(t, s, ":2\r\n", "RPUSH", "l", "a", "")
	wantReply(t, s, "*2\r\n$1\r\na\r\n$0\r\n\r\n", "LRANGE", "l", "0", "-1")
	wantReply(t, s, "*0\r\n", "LRANGE", "nolist", "0", "-1")
	if got := string(s.Do(t, "NOSUCHCOMMAND")); !strings.HasPrefix(got, "-ERR") {
		t.Fatalf("NOSUCHCOMMAND: got %q, want an -ERR reply", got)
	}
	// Persistence must be off.
	wantReply(t, s, "*2\r\n$4\r\nsave\r\n$0\r\n\r\n", "CONFIG", "GET", "save")
	wantReply(t, s, "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n", "CONFIG", "GET", "appendonly")
	// Nested arrays from a real server.
	s.Do(t, "XADD", "st", "1-1", "f", "v")
	wantReply(t, s, "*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n", "XRANGE", "st", "-", "+")
}

func TestExtraArgs(t *testing.T) {
	s := Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	wantReply(t, s, "*2\r\n$9\r\nmaxmemory\r\n$8\r\n10485760\r\n", "CONFIG", "GET", "maxmemory")
	wantReply(t, s, "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n", "CONFIG", "GET", "maxmemory-policy")
}

func TestKillRestart(t *testing.T) {
	s := Start(t)
	port, dir := s.Port, s.Dir
	wantReply(t, s, "+OK\r\n", "SET", "k", "v")
	oldPid := s.Pid()

	s.Kill()
	if s.Pid() != 0 {
		t.Fatal("Pid() != 0 after Kill")
	}
	if _, err := s.Exec("PING"); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	s.Kill() // no-op

	s.Restart(t)
	if s.Port != port || s.Dir != dir {
		t.Fatalf("Restart moved the server: port %d->%d dir %q->%q", port, s.Port, dir, s.Dir)
	}
	if pid := s.Pid(); pid == 0 || pid == oldPid {
		t.Fatalf("Restart: pid %d (old %d)", pid, oldPid)
	}
	wantReply(t, s, "+PONG\r\n", "PING")
	wantReply(t, s, "$-1\r\n", "GET", "k") // no persistence: data is gone
	wantReply(t, s, "+OK\r\n", "SET", "k", "v2")

	// Stop + Restart works too, and Restart of a running server restarts it.
	s.Stop()
	s.Restart(t)
	s.Restart(t)
	wantReply(t, s, "+PONG\r\n", "PING")
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)

	s.Pause()
	if _, err := conn.Write(resp.AppendCommandString(nil, "PING")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := r.ReadByte(); err == nil {
		t.Fatalf("paused server answered (first byte %q)", b)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("paused server: want a timeout, got %v", err)
	}

	s.Resume()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, err := resp.ReadReply(r, nil)
	if err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	if string(reply) != "+PONG\r\n" {
		t.Fatalf("after Resume: got %q", reply)
	}
	wantReply(t, s, "+PONG\r\n", "PING")
}

func TestStopWhilePaused(t *testing.T) {
	s := Start(t)
	s.Pause()
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Stop of a paused server took %v", d)
	}
}

func TestTwoServers(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port == b.Port || a.Dir == b.Dir {
		t.Fatalf("servers share port or dir: %+v %+v", a, b)
	}
	wantReply(t, a, "+OK\r\n", "SET", "k", "a")
	wantReply(t, b, "+OK\r\n", "SET", "k", "b")
	wantReply(t, a, "$1\r\na\r\n", "GET", "k")
	wantReply(t, b, "$1\r\nb\r\n", "GET", "k")
	a.Kill()
	wantReply(t, b, "+PONG\r\n", "PING")
}

func TestParallelStart(t *testing.T) {
	const n = 6
	for i := 0; i < n; i++ {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			s := Start(t)
			wantReply(t, s, "+PONG\r\n", "PING")
		})
	}
}

func TestStopIdempotent(t *testing.T) {
	s := Start(t)
	addr := s.Addr
	s.Stop()
	s.Stop()
	s.Kill()
	s.Pause()  // no-op when stopped
	s.Resume() // no-op when stopped
	if s.Pid() != 0 {
		t.Fatal("Pid() != 0 after Stop")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
	// Concurrent Stops are fine too.
	s.Restart(t)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
	if _, err := s.Exec("PING"); err == nil {
		t.Fatal("PING succeeded after concurrent Stop")
	}
}

func TestFreePort(t *testing.T) {
	p := FreePort(t)
	if p <= 0 || p > 65535 {
		t.Fatalf("FreePort() = %d", p)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("port %d from FreePort is not usable: %v", p, err)
	}
	l.Close()
}

func TestRequireBinary(t *testing.T) {
	if p := RequireBinary(t, "redis-server"); p == "" {
		t.Fatal("empty path")
	}
	ft := &fatalTB{TB: t}
	ft.run(func() { RequireBinary(ft, "no-such-binary-redistest") })
	if !strings.Contains(ft.msg, "no-such-binary-redistest not found") ||
		!strings.Contains(ft.msg, "sudo apt-get install -y redis-server redis-tools") ||
		!strings.Contains(ft.msg, "make test") {
		t.Fatalf("unexpected message: %q", ft.msg)
	}
}

// TestWaitReadyRejectsForeignServer: when another redis-server owns the port,
// Start must notice that the server answering PING is not its own process.
func TestWaitReadyRejectsForeignServer(t *testing.T) {
	a := Start(t)
	b := Start(t)
	b.mu.Lock()
	p := b.proc
	b.mu.Unlock()
	// Ask whether b's process owns a's address: it must not.
	err := waitReady(p, a.Addr)
	if err == nil || !strings.Contains(err.Error(), errPortInUse.Error()) {
		t.Fatalf("waitReady on a foreign server: got %v, want errPortInUse", err)
	}
}

// TestLaunchPortInUse starts redis-server on a port that is already
// listening; launchAndWait must report errPortInUse so Start retries.
func TestLaunchPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := Start(t)
	_, err = s.launchAndWait(l.Addr().(*net.TCPAddr).Port)
	if err == nil || !strings.Contains(err.Error(), errPortInUse.Error()) {
		t.Fatalf("launch on a busy port: got %v, want errPortInUse\n%s", err, s.logTail())
	}
}

func TestReadReply(t *testing.T) {
	cases := []string{
		"+OK\r\n",
		"-ERR bad thing\r\n",
		":-42\r\n",
		"$-1\r\n",
		"$0\r\n\r\n",
		"$5\r\na\r\nbc\r\n", // CRLF inside a bulk string
		"*-1\r\n",
		"*0\r\n",
		"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n*0\r\n$-1\r\n",
		"*2\r\n*2\r\n+a\r\n-b\r\n$3\r\nxyz\r\n",
		"%1\r\n+k\r\n:1\r\n",
		"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
		"_\r\n",
	}
	for _, c := range cases {
		const trailer = "+NEXT\r\n"
		r := bufio.NewReader(strings.NewReader(c + trailer))
		got, err := resp.ReadReply(r, nil)
		if err != nil || string(got) != c {
			t.Errorf("resp.ReadReply(%q) = %q, %v", c, got, err)
			continue
		}
		if next, err := resp.ReadReply(r, nil); err != nil || string(next) != trailer {
			t.Errorf("after %q: next reply %q, %v", c, next, err)
		}
	}
	for _, bad := range []string{"", "+OK\n", "?x\r\n", "$3\r\nab\r\n", "$2\r\nabcd", "*2\r\n:1\r\n", "$x\r\n"} {
		if got, err := resp.ReadReply(bufio.NewReader(strings.NewReader(bad)), nil); err == nil {
			t.Errorf("resp.ReadReply(%q) = %q, want an error", bad, got)
		}
	}
}

// TestDiesWithParent runs this test binary as a child that starts a server
// and exits without cleanup; the server must be killed by Pdeathsig.
func TestDiesWithParent(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		s := Start(t)
		fmt.Printf("CHILD-ADDR %s\n", s.Addr)
		os.Stdout.Sync()
		os.Exit(0) // no cleanup runs
	}
	if testing.Short() {
		t.Skip("spawns a child test binary")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiesWithParent$", "-test.count=1")
	// The child exits without its cleanup: its temporary directory goes
	// in this test's, which is removed.
	cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`CHILD-ADDR (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("child printed no address:\n%s", out)
	}
	addr := string(m[1])
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return // server is gone
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("redis-server at %s outlived its parent", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantReply(t *testing.T, s *Server, want string, args ...string) {
	t.Helper()
	if got := string(s.Do(t, args...)); got != want {
		t.Fatalf("%q: got %q, want %q", args, got, want)
	}
}

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func (f *fatalTB) run(fn func()) {
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
	}()
	fn()
}
