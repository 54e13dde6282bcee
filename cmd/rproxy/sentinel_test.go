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
