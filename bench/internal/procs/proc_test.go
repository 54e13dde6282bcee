package procs

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
)

func TestPort(t *testing.T) {
	if got := Port("127.0.0.1:6379"); got != "6379" {
		t.Errorf("Port = %q", got)
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") || Port(addr) == "" || Port(addr) == "0" {
		t.Errorf("FreeAddr = %q", addr)
	}
}

// TestSetStartStop starts a process that serves nothing: it is alive until
// stopped, fails WaitPing with its log in the error, and StopAll ends it
// and refuses new starts.
func TestSetStartStop(t *testing.T) {
	var s Set
	dir := t.TempDir()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start("sleeper", addr, filepath.Join(dir, "sleeper.log"), "sh", "-c", "echo hello; exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 0 || p.Name != "sleeper" || p.Addr != addr {
		t.Errorf("proc %+v", p)
	}
	if err := p.Alive(); err != nil {
		t.Fatal(err)
	}
	err = p.WaitPing(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not answer PING") || !strings.Contains(err.Error(), "hello") {
		t.Errorf("WaitPing = %v", err)
	}
	q, err := s.Start("sleeper2", addr, filepath.Join(dir, "sleeper2.log"), "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(q)
	if err := q.Alive(); err == nil || !strings.Contains(err.Error(), "sleeper2 exited unexpectedly") {
		t.Errorf("after Stop: Alive = %v", err)
	}
	if err := p.Alive(); err != nil {
		t.Errorf("Stop(q) stopped p: %v", err)
	}
	s.StopAll()
	s.StopAll() // a second call is harmless
	if err := p.Alive(); err == nil {
		t.Error("after StopAll: p alive")
	}
	if _, err := s.Start("late", addr, filepath.Join(dir, "late.log"), "sleep", "60"); err == nil {
		t.Error("Start after StopAll: want an error")
	}
	if _, err := s.Start("missing", addr, filepath.Join(dir, "missing.log"), "/nonexistent/binary"); err == nil {
		t.Error("Start of a missing binary: want an error")
	}
}

func TestPing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for i := 0; ; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 14)
			_, _ = c.Read(buf)
			if i == 0 {
				_, _ = c.Write([]byte("+PONG\r\n"))
			} else {
				_, _ = c.Write([]byte("-ERR no\r\n"))
			}
			c.Close()
		}
	}()
	if err := Ping(l.Addr().String()); err != nil {
		t.Errorf("first Ping: %v", err)
	}
	if err := Ping(l.Addr().String()); err == nil || !strings.Contains(err.Error(), "-ERR no") {
		t.Errorf("second Ping = %v", err)
	}
}

func TestNutcrackerConfig(t *testing.T) {
	conf := NutcrackerConfig("127.0.0.1:22121", "127.0.0.1:6379")
	for _, want := range []string{
		"  listen: 127.0.0.1:22121\n",
		"  redis: true\n",
		"  hash: fnv1a_64\n",
		"  distribution: ketama\n",
		"  timeout: 5000\n",
		"  preconnect: true\n",
		"  server_connections: 1\n",
		"  servers:\n    - 127.0.0.1:6379:1\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	// twemproxy itself must accept the config (no redis needed).
	bin := requireNutcracker(t)
	path := filepath.Join(t.TempDir(), "nutcracker.yml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-c", path).CombinedOutput(); err != nil {
		t.Errorf("nutcracker -t rejects config: %v\n%s", err, out)
	}
}

// TestStartRedisAndNutcracker starts the real servers as the benchmarks do
// and reads their figures from /proc.
func TestStartRedisAndNutcracker(t *testing.T) {
	redistest.RequireBinary(t, "redis-server")
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not in PATH: %v", err)
	}
	bin := requireNutcracker(t)
	var s Set
	defer s.StopAll()
	dir := t.TempDir()
	redis, err := s.StartRedis(dir, "--maxclients", "1000")
	if err != nil {
		t.Fatal(err)
	}
	twem, err := s.StartNutcracker(dir, bin, redis.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(redis.Cmd.Args, " "), "--maxclients 1000") {
		t.Errorf("redis-server args %q lack the extra ones", redis.Cmd.Args)
	}
	for _, p := range []*Proc{redis, twem} {
		if err := Ping(p.Addr); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if _, err := CPUTicks(p.Pid()); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if kb, err := RSSKB(p.Pid()); err != nil || kb <= 0 {
			t.Errorf("%s: RSS %d KB, %v", p.Name, kb, err)
		}
	}
	s.StopAll()
	for _, p := range []*Proc{redis, twem} {
		if err := p.Alive(); err == nil {
			t.Errorf("%s alive after StopAll", p.Name)
		}
	}
}

func requireNutcracker(t *testing.T) string {
	t.Helper()
	bin, err := FindNutcracker()
	if err != nil {
		t.Fatalf("nutcracker not found (%v): install it with `sudo apt-get install -y nutcracker` (make test does)", err)
	}
	return bin
}
