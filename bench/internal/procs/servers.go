package procs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// StartRedis starts redis-server on a free 127.0.0.1 port without
// persistence, with its log redis.log and its working directory dir, and
// waits up to 10 seconds for it to answer PING. extra are further
// redis-server options, such as "--maxclients", "20000".
//
// If the server starts but does not answer, it stays in s until StopAll.
func (s *Set) StartRedis(dir string, extra ...string) (*Proc, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	argv := append([]string{"redis-server", "--bind", "127.0.0.1", "--port", Port(addr),
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no"}, extra...)
	return s.startServer("redis-server", addr, filepath.Join(dir, "redis.log"), 10*time.Second, argv...)
}

// StartNutcracker writes the config of [NutcrackerConfig] for redisAddr
// into dir/nutcracker.yml, has the nutcracker binary bin check it (-t),
// then starts bin on a free 127.0.0.1 port, with its stats on another,
// and its log dir/nutcracker.log, and waits up to 10 seconds for it to
// answer PING.
//
// If the server starts but does not answer, it stays in s until StopAll.
func (s *Set) StartNutcracker(dir, bin, redisAddr string) (*Proc, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	stats, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(conf, []byte(NutcrackerConfig(addr, redisAddr)), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-t", "-c", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nutcracker rejects generated config %s: %v\n%s", conf, err, out)
	}
	return s.startServer("nutcracker", addr, filepath.Join(dir, "nutcracker.log"), 10*time.Second,
		bin, "-c", conf, "-o", filepath.Join(dir, "nutcracker.log"), "-s", Port(stats), "-a", "127.0.0.1")
}

// StartRproxy starts the rproxy binary bin on a free 127.0.0.1 port in
// front of redisAddr, with its log dir/rproxy.log and the further
// arguments extra, and waits up to 15 seconds for it to answer PING.
//
// If the proxy starts but does not answer, it stays in s until StopAll.
func (s *Set) StartRproxy(dir, bin, redisAddr string, extra ...string) (*Proc, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	argv := append([]string{bin, "-listen", addr, "-upstream", redisAddr}, extra...)
	return s.startServer("rproxy", addr, filepath.Join(dir, "rproxy.log"), 15*time.Second, argv...)
}

// startServer starts argv with [Set.Start] and waits up to timeout for it
// to answer PING on addr. If it does not, it stays in s until StopAll.
func (s *Set) startServer(name, addr, logPath string, timeout time.Duration, argv ...string) (*Proc, error) {
	p, err := s.Start(name, addr, logPath, argv...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitPing(timeout); err != nil {
		return nil, err
	}
	return p, nil
}

// NutcrackerConfig returns a twemproxy config with a single pool, listening
// on listen, that forwards to the one redis at redisAddr over one server
// connection.
func NutcrackerConfig(listen, redisAddr string) string {
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

// FindNutcracker returns the nutcracker binary: the one in PATH, else
// /usr/sbin/nutcracker, where Debian installs it and which is not always
// in a user's PATH.
func FindNutcracker() (string, error) {
	if p, err := exec.LookPath("nutcracker"); err == nil {
		return p, nil
	}
	const p = "/usr/sbin/nutcracker"
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// BuildRproxy runs `go build -o DIR/rproxy ./cmd/rproxy` in the module
// root root and returns the binary's path.
func BuildRproxy(root, dir string) (string, error) {
	out := filepath.Join(dir, "rproxy")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/rproxy")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rproxy failed (%v); pass -rproxy BINARY "+
			"(compare and suite: or -targets redis,twemproxy):\n%s", err, b)
	}
	return out, nil
}

// ModuleRoot returns the directory holding go.mod, looking from the
// working directory upwards.
func ModuleRoot() (string, error) {
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
