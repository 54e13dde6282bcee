package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/resp"
)

// TestClusterTLSNamesFromTheConfigFile: the file's upstream.tls in mode
// cluster, without server_name, reaches every node, though the nodes at
// 127.0.0.2 and 127.0.0.3 serve certificates for 127.0.0.2 alone and for
// the seed's 127.0.0.1 alone (proxy's TestClusterNodesWithCertificatesOfTheirOwn
// shows the names; this shows the file gives them: without
// upstream.Config.TLSOtherName from the config, the .3 node fails its
// handshakes and rproxy never becomes ready).
func TestClusterTLSNamesFromTheConfigFile(t *testing.T) {
	bin := buildBinary(t)
	certs := tlstest.New(t)
	ips := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	certNames := []string{"127.0.0.1", "127.0.0.2", "127.0.0.1"}
	cl := redistest.StartClusterWith(t, 3, 0, redistest.TLSNodes(certs, ips, certNames))
	v, err := resp.Parse(cl.Nodes[0].Do(t, "CONFIG", "GET", "tls-port"))
	if err != nil || len(v.Elems) != 2 {
		t.Fatalf("CONFIG GET tls-port: %v %v", v, err)
	}
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`log: {format: json}
upstream:
  mode: cluster
  address: 127.0.0.1:%s
  tls:
    enabled: true
    ca_file: %s
hotkeys: {tier: false}
`, v.Elems[1].Str, certs.CA)), 0o644)
	startBinary(t, bin, admin, "-config", path, "-listen", listen, "-admin", admin)
	nc, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	do := clientDo(t, nc)
	for i, n := range cl.Nodes {
		k := ""
		for j := 0; k == ""; j++ {
			if c := "own" + strconv.Itoa(j); cl.MasterForSlot(t, cl.Slot(c)).Addr == n.Addr {
				k = c
			}
		}
		if r := do("SET", k, ips[i]); r != "+OK\r\n" {
			t.Fatalf("SET %s, a key of the node at %s: %q", k, ips[i], r)
		}
		if r := string(n.Do(t, "GET", k)); r != "$"+strconv.Itoa(len(ips[i]))+"\r\n"+ips[i]+"\r\n" {
			t.Errorf("%s on its node: %q", k, r)
		}
	}
}
