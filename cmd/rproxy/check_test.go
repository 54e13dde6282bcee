package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/tlstest"
)

// runCheck runs `bin -check args...` and returns its stdout, stderr and
// exit code; it fails the test if the process does not exit on its own.
func runCheck(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-check"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("-check %v did not exit: it serves instead of checking?\n%s", args, errOut.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestCheckFlag: -check validates the file and the flags as start-up does,
// prints the effective configuration (flags applied, secrets redacted),
// exits 0 for a good file and 1 naming every bad key for a bad one, and
// neither serves nor dials.
func TestCheckFlag(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// An "upstream" that would see a dial, and a listen address that
	// would be taken if -check served.
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	listen := freeAddr(t)
	const hash = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
	good := write("good.yaml", "upstream:\n  address: 127.0.0.1:1\nauth:\n  mode: proxy\n  users:\n    app: "+hash+"\n")
	stdout, stderr, code := runCheck(t, bin, "-config", good, "-listen", listen, "-upstream", up.Addr().String())
	if code != 0 {
		t.Fatalf("good file: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"listen: " + listen, "address: " + up.Addr().String(), "app: <redacted>"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("effective configuration lacks %q (flags applied, secrets redacted):\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, hash) {
		t.Errorf("-check prints a password hash:\n%s", stdout)
	}
	if !strings.Contains(stderr, "configuration OK") {
		t.Errorf("stderr = %q, want the verdict", stderr)
	}
	up.(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := up.Accept(); err == nil {
		c.Close()
		t.Error("-check dialled the upstream")
	}

	// Every problem, with its key and line; the flags are checked too.
	bad := write("bad.yaml", "listen: 127.0.0.1:0\nupstream:\n  adress: x\nlimits:\n  idle_timeout: 5\n")
	stdout, stderr, code = runCheck(t, bin, "-config", bad)
	if code == 0 || stdout != "" {
		t.Fatalf("bad file: exit %d, stdout %q", code, stdout)
	}
	for _, want := range []string{"line 3", "adress", "line 5", "limits.idle_timeout"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("bad file: output lacks %q:\n%s", want, stderr)
		}
	}
	_, stderr, code = runCheck(t, bin, "-config", good, "-log-level", "loud")
	if code == 0 || !strings.Contains(stderr, "log.level") {
		t.Errorf("bad -log-level: exit %d, output %q", code, stderr)
	}

	// The files the config names: a missing one is a warning (a systemd
	// credential exists only while the service runs), a wrong one a
	// problem naming its key.
	certs := tlstest.New(t)
	missing := write("missing-pw.yaml", "upstream:\n  password_file: "+filepath.Join(dir, "nope")+"\n")
	if _, stderr, code = runCheck(t, bin, "-config", missing); code != 0 || !strings.Contains(stderr, "warning: upstream.password_file") {
		t.Errorf("missing password file: exit %d, output %q; want 0 with a warning", code, stderr)
	}
	sentinelPW := write("sentinel-pw.yaml", "upstream:\n  mode: sentinel\n  sentinel:\n    master_name: m\n    addresses: [\"127.0.0.1:26379\"]\n    password_file: "+filepath.Join(dir, "nope")+"\n")
	if _, stderr, code = runCheck(t, bin, "-config", sentinelPW); code != 0 || !strings.Contains(stderr, "warning: upstream.sentinel.password_file") {
		t.Errorf("missing Sentinel password file: exit %d, output %q; want 0 with a warning", code, stderr)
	}
	wrongKey := write("wrong-key.yaml", "tls:\n  cert_file: "+certs.ServerCert+"\n  key_file: "+certs.ClientKey+"\n")
	if _, stderr, code = runCheck(t, bin, "-config", wrongKey); code == 0 || !strings.Contains(stderr, "tls.key_file") {
		t.Errorf("key of another certificate: exit %d, output %q", code, stderr)
	}
}

// The shipped configurations pass -check: the example with every default,
// and deploy/rproxy.yaml (its password file is a systemd credential,
// missing here: a warning).
func TestCheckShippedConfigs(t *testing.T) {
	bin := buildBinary(t)
	for _, path := range []string{"../../config/rproxy.example.yaml", "../../deploy/rproxy.yaml"} {
		if _, stderr, code := runCheck(t, bin, "-config", path); code != 0 {
			t.Errorf("rproxy -check -config %s: exit %d\n%s", path, code, stderr)
		}
	}
}
