package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestSentinelBinary: with upstream.mode sentinel the binary finds the
// master through the Sentinels (upstream.address is unused) and INFO
// names it.
func TestSentinelBinary(t *testing.T) {
	bin := buildBinary(t)
	g := redistest.StartSentinel(t, "mymaster")
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	cfg := "upstream:\n  address: 127.0.0.1:1\n  mode: sentinel\n  sentinel:\n    master_name: mymaster\n    addresses: [\"" +
		strings.Join(g.Addrs(), "\", \"") + "\"]\nlog:\n  format: json\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	startBinary(t, bin, admin, "-config", path, "-listen", listen, "-admin", admin)
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(c)
	c.Write(resp.AppendCommandString(nil, "SET", "k", "v"))
	if r, err := resp.ReadReply(rd, nil); string(r) != "+OK\r\n" {
		t.Fatalf("SET through the Sentinel's master = %q %v", r, err)
	}
	if got := string(g.Master.Do(t, "GET", "k")); got != "$1\r\nv\r\n" {
		t.Fatalf("GET k on the master = %q", got)
	}
	c.Write(resp.AppendCommandString(nil, "INFO", "proxy"))
	if r, _ := resp.ReadReply(rd, nil); !strings.Contains(string(r), "sentinel_master:"+g.Master.Addr+"\r\n") {
		t.Errorf("INFO proxy = %q", r)
	}
}

// TestReloadRotatesSentinelPassword: the Sentinels' own password, rotated
// (each Sentinel's user given a second password, rproxy's file rewritten
// and reloaded, the old one removed), is the one rproxy's next asks log in
// with: INFO's sentinel_error, set while the old password is refused,
// clears after the reload.
func TestReloadRotatesSentinelPassword(t *testing.T) {
	bin := buildBinary(t)
	g := redistest.StartSentinel(t, "mymaster")
	for _, s := range g.Sentinels {
		if r := string(s.Do(t, "ACL", "SETUSER", "watcher", "on", ">old-secret", "+@all")); r != "+OK\r\n" {
			t.Fatalf("ACL SETUSER on a Sentinel: %q", r)
		}
	}
	dir := t.TempDir()
	pwFile, writePassword := passwordFile(t, dir)
	writePassword("old-secret")
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(dir, "rproxy.yaml")
	cfg := "upstream:\n  address: 127.0.0.1:1\n  mode: sentinel\n  sentinel:\n    master_name: mymaster\n    username: watcher\n    password_file: " + pwFile +
		"\n    addresses: [\"" + strings.Join(g.Addrs(), "\", \"") + "\"]\nlog:\n  format: json\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	startBinary(t, bin, admin, "-config", path, "-listen", listen, "-admin", admin)
	do := dialDo(t, listen)
	waitInfo := func(what string, cond func(info string) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			info := do("INFO", "proxy")
			if cond(info) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s:\n%s", what, info)
			}
		}
	}
	waitInfo("the master found", func(info string) bool { return strings.Contains(info, "sentinel_master:"+g.Master.Addr+"\r\n") })

	for _, s := range g.Sentinels {
		s.Do(t, "ACL", "SETUSER", "watcher", ">new-secret", "<old-secret")
	}
	waitInfo("the old password refused", func(info string) bool { return strings.Contains(info, "sentinel_error:") })
	writePassword("new-secret")
	if r := do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Fatalf("PROXY RELOAD after the rotation = %q", r)
	}
	waitInfo("the Sentinels answering again", func(info string) bool { return !strings.Contains(info, "sentinel_error:") })
	if r := do("SET", "k", "v"); r != "+OK\r\n" {
		t.Errorf("SET after the rotation = %q", r)
	}
}
