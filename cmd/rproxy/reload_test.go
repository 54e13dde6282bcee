package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// runReloadable starts the binary with a config file that the test
// rewrites with write; it returns a raw client's do, the admin address and
// a function that stops the process and returns its log.
func runReloadable(t *testing.T, first string) (write func(string), do func(...string) string, admin string, stop func() string) {
	t.Helper()
	write, do, admin, _, stop = runReloadableAt(t, first)
	return write, do, admin, stop
}

func runReloadableAt(t *testing.T, first string) (write func(string), do func(...string) string, admin, listen string, stop func() string) {
	t.Helper()
	bin := buildBinary(t)
	rs := redistest.Start(t)
	listen = freeAddr(t)
	admin = freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	write = func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("log:\n  format: json\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(first)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)
	do = dialDo(t, listen)
	stop = func() string {
		cmd.Process.Signal(syscall.SIGTERM)
		out := <-logs
		cmd.Wait()
		return out
	}
	return write, do, admin, listen, stop
}

func postReload(t *testing.T, admin string) (int, string) {
	t.Helper()
	r, err := http.Post("http://"+admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestReloadHotKeysAndRestartKeys: a reload applies hot-key settings to
// the running detector and tier, over the same client connection; keys
// that need a restart keep their running values and are named in the
// reply (HTTP and PROXY RELOAD) and the log.
func TestReloadHotKeysAndRestartKeys(t *testing.T) {
	write, do, admin, stop := runReloadable(t, "")
	do("SET", "k", "v")
	for range 20 {
		do("GET", "k")
	}
	if h := httpBody(t, "http://"+admin+"/hotkeys"); h != "[]\n" {
		t.Fatalf("hot keys at 500/s after 20 reads: %s", h)
	}

	write("hotkeys:\n  threshold: 2\n  max_bytes: 1mb\nprocs: 2\nupstream:\n  timeout: 9s\n")
	code, body := postReload(t, admin)
	if code != 200 || body != "reloaded\nnot applied until restart: procs, upstream.timeout\n" {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	do("GET", "k")
	if h := httpBody(t, "http://"+admin+"/hotkeys"); !strings.Contains(h, `"key":"k"`) {
		t.Fatalf("hot keys after threshold 2: %s", h)
	}
	shown := httpBody(t, "http://"+admin+"/config")
	for _, want := range []string{"threshold: 2\n", "max_bytes: 1mb\n", "procs: 0\n", "timeout: 5s\n"} {
		if !strings.Contains(shown, want) {
			t.Errorf("/config lacks %q:\n%s", want, shown)
		}
	}

	// The tier off by reload: INFO shows it stopped; the client stays.
	write("hotkeys:\n  tier: false\n  threshold: 2\n")
	if r := do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Fatalf("PROXY RELOAD = %q", r)
	}
	if r := do("PROXY", "INFO"); !strings.Contains(r, "tier_serving:0") || !strings.Contains(r, "tier_entries:0") {
		t.Fatalf("PROXY INFO after tier: false:\n%s", r)
	}
	write("hotkeys:\n  tier: false\n  threshold: 2\nlisten: 127.0.0.1:1\n") // -listen wins: no change
	if r := do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Fatalf("PROXY RELOAD with listen overridden by the flag = %q", r)
	}
	write("hotkeys:\n  tier: false\n  threshold: 2\ncoalesce:\n  window: inflight\n")
	if r := do("PROXY", "RELOAD"); r != "+OK, not applied until restart: coalesce.window\r\n" {
		t.Fatalf("PROXY RELOAD with coalesce.window = %q", r)
	}
	out := stop()
	if !strings.Contains(out, `"msg":"reload: changed settings that need a restart were not applied","keys":["procs","upstream.timeout"]`) {
		t.Errorf("log lacks the restart warning:\n%s", out)
	}
}

// TestReloadTierOnNeedsRestart: with the tier off at start, a reload
// turning it on applies the rest and names hotkeys.tier as needing a
// restart.
func TestReloadTierOnNeedsRestart(t *testing.T) {
	write, do, admin, stop := runReloadable(t, "hotkeys:\n  tier: false\n")
	write("hotkeys:\n  tier: true\n  threshold: 3\n")
	code, body := postReload(t, admin)
	if code != 200 || body != "reloaded\nnot applied until restart: hotkeys.tier\n" {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	shown := httpBody(t, "http://"+admin+"/config")
	if !strings.Contains(shown, "tier: false\n") || !strings.Contains(shown, "threshold: 3\n") {
		t.Fatalf("/config after the reload:\n%s", shown)
	}
	if r := do("PROXY", "INFO"); strings.Contains(r, "tier_serving") {
		t.Fatalf("a tier appeared:\n%s", r)
	}
	stop()
}

// TestReloadIdleTimeout: limits.idle_timeout set by a reload closes a
// client that was connected before it and has been idle longer.
func TestReloadIdleTimeout(t *testing.T) {
	write, _, admin, listen, stop := runReloadableAt(t, "")
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(resp.AppendCommandString(nil, "PING"))
	rd := bufio.NewReader(c)
	if r, err := resp.ReadReply(rd, nil); err != nil || string(r) != "+PONG\r\n" {
		t.Fatalf("PING = %q %v", r, err)
	}
	time.Sleep(300 * time.Millisecond)
	write("limits:\n  idle_timeout: 200ms\n")
	if code, body := postReload(t, admin); code != 200 || body != "reloaded\n" {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rd.ReadByte(); err != io.EOF {
		t.Fatalf("idle client after idle_timeout 200ms by reload: read = %v, want EOF", err)
	}
	if shown := httpBody(t, "http://"+admin+"/config"); !strings.Contains(shown, "idle_timeout: 200ms\n") {
		t.Fatalf("/config lacks the new idle_timeout:\n%s", shown)
	}
	stop()
}

// TestReloadRequestLog: log.requests switched on and off by reloads;
// batch lines name the commands and never the arguments.
func TestReloadRequestLog(t *testing.T) {
	write, do, admin, stop := runReloadable(t, "  level: debug\n")
	do("SET", "secret-key", "secret-value")
	write("  level: debug\n  requests: true\n")
	if code, body := postReload(t, admin); code != 200 || body != "reloaded\n" {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	do("GET", "secret-key")
	write("  level: debug\n")
	postReload(t, admin)
	do("GET", "secret-key")
	out := stop()
	if n := strings.Count(out, `"msg":"client batch"`); n != 1 {
		t.Fatalf("%d batch lines, want 1 (between the reloads):\n%s", n, out)
	}
	if !strings.Contains(out, `"commands":["get"],"count":1`) {
		t.Errorf("batch line lacks the command:\n%s", out)
	}
	if strings.Contains(out, "secret") {
		t.Errorf("the log holds a key or value:\n%s", out)
	}
}

// passwordFile returns the path of a password file in dir and what
// writes a password to it (mode 0600, with a newline, as printf and echo
// leave it).
func passwordFile(t *testing.T, dir string) (path string, write func(pw string)) {
	path = filepath.Join(dir, "pw")
	return path, func(pw string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReloadRotatesUpstreamPassword: the upstream password rotated as
// Redis allows (the user given a second password, rproxy's file
// rewritten and reloaded, the old password removed) reaches the
// connections rproxy dials after the reload: once Redis has closed
// them all, rproxy logs in again with the new one, and its clients,
// connected throughout, carry on. A reload whose password file is
// missing is rejected and the running login stays.
func TestReloadRotatesUpstreamPassword(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	rs.Do(t, "ACL", "SETUSER", "app", "on", ">old-secret", "~*", "&*", "+@all")
	dir := t.TempDir()
	pwFile, writePassword := passwordFile(t, dir)
	writePassword("old-secret")
	path := filepath.Join(dir, "rproxy.yaml")
	writeConfig := func(file string) {
		t.Helper()
		body := "log:\n  format: json\nupstream:\n  username: app\n  password_file: " + file + "\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(pwFile)
	listen, admin := freeAddr(t), freeAddr(t)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)
	do := dialDo(t, listen)
	if r := do("SET", "k", "v1"); r != "+OK\r\n" {
		t.Fatalf("SET as app: %q", r)
	}

	writeConfig(filepath.Join(dir, "missing"))
	if r := do("PROXY", "RELOAD"); !strings.HasPrefix(r, "-") || !strings.Contains(r, "upstream.password_file") {
		t.Fatalf("PROXY RELOAD with a missing password file = %q, want an error naming the key", r)
	}
	writeConfig(pwFile)

	rs.Do(t, "ACL", "SETUSER", "app", ">new-secret")
	writePassword("new-secret")
	if r := do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Fatalf("PROXY RELOAD after the rotation = %q", r)
	}
	rs.Do(t, "ACL", "SETUSER", "app", "<old-secret")
	if r := string(rs.Do(t, "CLIENT", "KILL", "USER", "app")); r == ":0\r\n" {
		t.Fatalf("CLIENT KILL USER app killed nothing: %q", r)
	}
	// rproxy dials again; commands may fail while it does, then succeed.
	var last string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if last = do("SET", "k", "v2"); last == "+OK\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET after the old password was removed: %q, never OK (rproxy still logs in with it?)", last)
		}
	}
	if got := string(rs.Do(t, "GET", "k")); got != "$2\r\nv2\r\n" {
		t.Errorf("GET k on Redis = %q", got)
	}
	if r := do("INFO", "proxy"); !strings.Contains(r, "upstream_user:app\r\n") {
		t.Errorf("INFO proxy after the rotation:\n%s", r)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logs
	cmd.Wait()
	if !strings.Contains(out, "upstream credentials changed") {
		t.Errorf("the log does not say the credentials changed:\n%s", out)
	}
	if strings.Contains(out, "new-secret") || strings.Contains(out, "old-secret") {
		t.Errorf("the log holds a password:\n%s", out)
	}
}
