package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/admin"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/resp"
)

// TestMain stops the cluster nodes redistest started ahead once the tests
// are done, and removes their directories.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// buildBinary builds rproxy once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rproxy")
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version=test-1.2.3", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestVersionAndHelp(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command(bin, "-version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "rproxy test-1.2.3" {
		t.Fatalf("-version: %q %v", out, err)
	}
	out, err = exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("-h: %v", err)
	}
	for _, flag := range []string{"-listen", "-upstream", "-config", "-admin", "-log-level", "-version", "-check"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("-h does not document %s:\n%s", flag, out)
		}
	}
	for _, p := range admin.Paths {
		if !strings.Contains(string(out), p) {
			t.Errorf("-h does not list the admin endpoint %s:\n%s", p, out)
		}
	}
}

func TestBadConfigIsRejected(t *testing.T) {
	bin := buildBinary(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:0\nupstream:\n  adress: x\n"), 0o644)
	out, err := exec.Command(bin, "-config", path).CombinedOutput()
	if err == nil {
		t.Fatal("started with an unknown config key")
	}
	if !strings.Contains(string(out), "line 3") || !strings.Contains(string(out), "adress") {
		t.Fatalf("error does not name the key and line: %s", out)
	}
	out, err = exec.Command(bin, "stray-argument").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unexpected arguments") {
		t.Fatalf("stray argument accepted: %q %v", out, err)
	}
}

// TestServesAndDrainsOnSIGTERM runs the real binary: flags override the
// config file, clients are served, the admin endpoints answer, and SIGTERM
// lets an in-flight reply reach its client before the process exits 0.
func TestServesAndDrainsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t, "--enable-debug-command", "yes")
	listen := freeAddr(t)
	admin := freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	// The file names a wrong upstream; the flag must win.
	// DEBUG is denied by the default policy; a rule allows it from loopback.
	os.WriteFile(path, []byte("upstream:\n  address: 127.0.0.1:1\nlog:\n  format: json\n"+
		"policy:\n  rules:\n    - {name: local-debug, commands: [debug], addrs: [127.0.0.0/8], action: allow}\n"), 0o644)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)

	if code := httpStatus(t, "http://"+admin+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if out, err := exec.Command(bin, "-healthcheck", admin).CombinedOutput(); err != nil {
		t.Fatalf("-healthcheck against a running proxy: %v %s", err, out)
	}
	if out, err := exec.Command(bin, "-healthcheck", freeAddr(t)).CombinedOutput(); err == nil || !strings.Contains(string(out), "healthcheck") {
		t.Fatalf("-healthcheck against nothing succeeded: %s", out)
	}
	body := httpBody(t, "http://"+admin+"/metrics")
	if !strings.Contains(body, "rproxy_upstream_connections") || !strings.Contains(body, "rproxy_proxy_commands_total") {
		t.Fatalf("/metrics lacks rproxy metrics:\n%.500s", body)
	}
	// Error counters are there, at zero, before any error.
	for _, series := range []string{`rproxy_proxy_client_closed_by_proxy_total{reason="idle"} 0`,
		`rproxy_upstream_errors_total{kind="dial",protocol="2"} 0`} {
		if !strings.Contains(body, series+"\n") {
			t.Errorf("/metrics right after start lacks %s", series)
		}
	}
	if hot := httpBody(t, "http://"+admin+"/hotkeys"); hot != "[]\n" {
		t.Errorf("/hotkeys with no hot key = %q, want []", hot)
	}

	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	c.Write(resp.AppendCommandString(nil, "SET", "k", "v"))
	if r, _ := resp.ReadReply(rd, nil); string(r) != "+OK\r\n" {
		t.Fatalf("SET = %q", r)
	}
	// The slow log is on by default (slowlog.threshold 10ms). On a loaded
	// machine the SET itself may have taken 10ms: it answers with a count.
	c.Write(resp.AppendCommandString(nil, "PROXY", "SLOWLOG", "LEN"))
	if r, _ := resp.ReadReply(rd, nil); string(r) != ":0\r\n" && string(r) != ":1\r\n" {
		t.Fatalf("PROXY SLOWLOG LEN on the binary = %q", r)
	}
	c.Write(resp.AppendCommandString(nil, "DEBUG", "SLEEP", "0.3"))
	time.Sleep(50 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r, err := resp.ReadReply(rd, nil); string(r) != "+OK\r\n" {
		t.Fatalf("in-flight reply across SIGTERM = %q %v", r, err)
	}
	out := <-logs // read to EOF before Wait, which closes the pipe
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, out)
	}
	// Connection events are at debug; the summary says what happened.
	for _, want := range []string{`"msg":"shutting down"`, `"drain_seconds":5`, `"msg":"stopped"`, `"msg":"client connections"`, `"opened":1`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"msg":"client connected"`) {
		t.Errorf("connection events at info:\n%s", out)
	}
	if strings.Contains(out, `"GET"`) || strings.Contains(out, `"SET"`) {
		t.Errorf("info log mentions commands:\n%s", out)
	}
}

// TestReloadPolicy: SIGHUP and POST /reload swap the policy while a client
// stays connected; a bad file is rejected and the running policy stays.
func TestReloadPolicy(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("log:\n  format: json\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("policy:\n  rules:\n    - {name: allow-keys, commands: [keys], action: allow}\n")
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)

	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	keys := func() string {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(resp.AppendCommandString(nil, "KEYS", "nomatch*"))
		r, err := resp.ReadReply(rd, nil)
		if err != nil {
			t.Fatalf("KEYS: %v (connection lost?)", err)
		}
		return string(r)
	}
	if r := keys(); r != "*0\r\n" {
		t.Fatalf("KEYS with an allow rule = %q", r)
	}
	write("policy:\n  rules: []\n")
	cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasPrefix(keys(), "-DENIED") {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not apply the default policy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	write("policy:\n  rules:\n    - {name: bad, commands: [keys], action: explode}\n")
	resp, err := http.Post("http://"+admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "rules[0] (bad)") {
		t.Fatalf("bad reload = %d %q", resp.StatusCode, body)
	}
	if r := keys(); !strings.HasPrefix(r, "-DENIED") {
		t.Fatalf("policy changed by a rejected reload: KEYS = %q", r)
	}
	write("policy:\n  rules:\n    - {name: allow-keys-again, commands: [keys], action: allow}\n")
	if resp, err := http.Post("http://"+admin+"/reload", "", nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /reload = %v %v", resp, err)
	}
	if r := keys(); r != "*0\r\n" {
		t.Fatalf("KEYS after POST /reload allowed it = %q", r)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logs
	cmd.Wait()
	for _, want := range []string{`"msg":"configuration reloaded"`, `"msg":"reload rejected"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// clientDo returns a do for c, a client connection to the binary: one
// command and its reply, within 5 s; a lost connection fails the test.
func clientDo(t *testing.T, c net.Conn) func(args ...string) string {
	rd := bufio.NewReader(c)
	return func(args ...string) string {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(resp.AppendCommandString(nil, args...))
		r, err := resp.ReadReply(rd, nil)
		if err != nil {
			t.Fatalf("%s: %v (connection lost?)", args[0], err)
		}
		return string(r)
	}
}

// dialDo dials the binary at listen and returns clientDo of the
// connection, closed when the test ends.
func dialDo(t *testing.T, listen string) func(args ...string) string {
	t.Helper()
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientDo(t, c)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func waitHTTP(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for httpStatus(t, url) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %d", url, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTLSBinary runs the binary with TLS on both sides (mutual TLS for
// clients, a client certificate and an ACL user's password file for Redis):
// a TLS client is served, a plain one is refused, and neither the log at
// debug level, GET /config nor PROXY CONFIG GET shows the private keys or
// the password.
func TestTLSBinary(t *testing.T) {
	bin := buildBinary(t)
	certs := tlstest.New(t)
	const password = "pw-7f3a9c-never-shown"
	tlsPort := redistest.FreePort(t)
	redistest.Start(t, append(certs.RedisArgs(tlsPort, "yes"), "--user", "app", "on", ">"+password, "~*", "&*", "+@all")...)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	os.WriteFile(pwFile, []byte(password+"\n"), 0o600)
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(dir, "rproxy.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`log: {format: json, level: debug}
tls:
  cert_file: %s
  key_file: %s
  client_ca_file: %s
upstream:
  address: 127.0.0.1:%d
  username: app
  password_file: %s
  tls:
    enabled: true
    ca_file: %s
    cert_file: %s
    key_file: %s
`, certs.ServerCert, certs.ServerKey, certs.CA, tlsPort, pwFile, certs.CA, certs.ClientCert, certs.ClientKey)), 0o644)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-admin", admin) // the upstream answered COMMAND over TLS

	nc, err := tls.Dial("tcp", listen, certs.ClientConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	do := clientDo(t, nc)
	if r := do("SET", "k", "v"); r != "+OK\r\n" {
		t.Fatalf("SET over TLS = %q", r)
	}
	if r := do("ACL", "WHOAMI"); r != "$3\r\napp\r\n" {
		t.Fatalf("upstream user = %q", r)
	}
	proxyConfig := do("PROXY", "CONFIG", "GET")
	httpConfig := httpBody(t, "http://"+admin+"/config")
	if !strings.Contains(httpConfig, certs.ServerKey) || !strings.Contains(proxyConfig, certs.ClientKey) {
		t.Errorf("the shown configuration lacks the key file names:\n%s", httpConfig)
	}

	plain, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	plain.Write(resp.AppendCommandString(nil, "PING"))
	plain.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(plain); !strings.HasPrefix(string(b), "-ERR rproxy: this port speaks TLS only") {
		t.Errorf("plain client got %q", b)
	}
	plain.Close()

	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logs
	cmd.Wait()
	for _, want := range []string{`"tls":true`, `"upstream_tls":true`, `"client_certs":true`, `"msg":"client closed: not a TLS client"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	var secrets []string
	for _, f := range []string{certs.ServerKey, certs.ClientKey} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && !strings.HasPrefix(l, "-----") {
				secrets = append(secrets, l)
			}
		}
	}
	secrets = append(secrets, password, "PRIVATE KEY")
	for name, text := range map[string]string{"log": out, "GET /config": httpConfig, "PROXY CONFIG GET": proxyConfig} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows a secret (%.20s...):\n%s", name, s, text)
			}
		}
	}
}

// TestTLSBadFilesStopStartup: a missing or wrong certificate, key or CA
// file stops start-up with an error naming the key and the file.
func TestTLSBadFilesStopStartup(t *testing.T) {
	bin := buildBinary(t)
	certs := tlstest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"missing cert", fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n", missing, certs.ServerKey),
			[]string{"tls.cert_file", missing, "no such file"}},
		{"key of another certificate", fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n", certs.ServerCert, certs.ClientKey),
			[]string{"tls.cert_file " + certs.ServerCert, "tls.key_file " + certs.ClientKey, "does not match"}},
		{"missing upstream CA", fmt.Sprintf("upstream:\n  tls:\n    enabled: true\n    ca_file: %s\n", missing),
			[]string{"upstream.tls.ca_file", missing}},
		{"key without cert", fmt.Sprintf("tls:\n  key_file: %s\n", certs.ServerKey),
			[]string{"tls.key_file is set without tls.cert_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rproxy.yaml")
			os.WriteFile(path, []byte("listen: 127.0.0.1:0\nlog: {format: json}\n"+tc.yaml), 0o644)
			cmd := exec.Command(bin, "-config", path)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("still running after 10s:\n%s", out)
			}
			if err == nil {
				t.Fatalf("started:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// startBinary runs bin with args, kills it when the test ends, and waits
// until admin's /readyz answers 200. logs receives the process's whole
// stderr once it has exited (read it before cmd.Wait, which closes the
// pipe).
func startBinary(t *testing.T, bin, admin string, args ...string) (cmd *exec.Cmd, logs <-chan string) {
	t.Helper()
	return startCmd(t, exec.Command(bin, args...), admin)
}

// startCmd is startBinary for a command made ready by the caller.
func startCmd(t *testing.T, cmd *exec.Cmd, admin string) (*exec.Cmd, <-chan string) {
	t.Helper()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := make(chan string, 1)
	go func() { b, _ := io.ReadAll(stderr); out <- string(b) }()
	waitHTTP(t, "http://"+admin+"/readyz", 200)
	return cmd, out
}
