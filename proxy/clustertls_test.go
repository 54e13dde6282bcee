package proxy_test

import (
	"crypto/tls"
	"strconv"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// TestClusterOverTLS: in front of a Redis Cluster that serves clients and
// its bus over TLS only where rproxy looks (seeds given by their TLS
// ports; tls-cluster yes, so CLUSTER SHARDS names each node's tls-port),
// rproxy reaches every master over TLS, and a MOVED after a slot moved
// (which names the TLS port to a TLS client) is followed there. A node's
// TLS port taken for a plain one, or the other way round, fails the
// handshake: every reply below would be an error.
func TestClusterOverTLS(t *testing.T) {
	certs := tlstest.New(t)
	cl := redistest.StartClusterWith(t, 3, 0, func(tb testing.TB, _ int) []string {
		// The bus verifies the connecting node's certificate as a
		// client's: the server certificate is for servers only.
		return append(certs.RedisArgs(redistest.FreePort(tb), "no"), "--tls-cluster", "yes",
			"--tls-client-cert-file", certs.ClientCert, "--tls-client-key-file", certs.ClientKey)
	})
	var seeds []string
	for _, n := range cl.Nodes {
		seeds = append(seeds, "127.0.0.1:"+tlsPortOf(t, n))
	}
	p := proxytest.Start(t, seeds[0], func(c *proxy.Config) {
		c.Cluster = &upstream.ClusterConfig{Seeds: seeds, Refresh: 2 * time.Second, MinRefreshGap: 20 * time.Millisecond}
		c.HotKey.Tier = false
		c.Upstream.TLS = certs.ClientConfig(false) // ServerName 127.0.0.1, every node's
	})
	c := dialClient(t, p.Addr)
	masters := map[string]string{} // a key of each master
	for i := 0; len(masters) < 3; i++ {
		k := "tls" + strconv.Itoa(i)
		if addr := cl.MasterForSlot(t, cl.Slot(k)).Addr; masters[addr] == "" {
			masters[addr] = k
		}
	}
	for _, k := range masters {
		if r := c.do("SET", k, "v-"+k); r != "+OK\r\n" {
			t.Fatalf("SET %s over TLS: %q", k, r)
		}
		if r := c.do("GET", k); r != "$"+strconv.Itoa(len("v-"+k))+"\r\nv-"+k+"\r\n" {
			t.Fatalf("GET %s over TLS: %q", k, r)
		}
	}
	// Move an empty slot to another master (MIGRATE would go over TLS to
	// the harness's plain port, so no key moves): the SET meets a MOVED
	// naming the new master's TLS port, and the key lands there.
	from, to := cl.Masters()[0], cl.Masters()[1]
	k := keyOnMaster(t, cl, from, "moving")
	cl.MigrateSlot(t, cl.Slot(k), to)
	if r := c.do("SET", k, "v"); r != "+OK\r\n" {
		t.Fatalf("SET %s after its slot moved: %q", k, r)
	}
	if r := string(to.Do(t, "GET", k)); r != "$1\r\nv\r\n" {
		t.Errorf("the key on its new master: %q", r)
	}
	if moved := redirects(t, p, "moved"); moved < 1 {
		t.Errorf("no MOVED followed (%v): the move was not seen", moved)
	}
}

// TestClusterNodesWithCertificatesOfTheirOwn: nodes announced at
// addresses of their own (127.0.0.1, .2 and .3, all on the loopback) each
// serve a certificate for one name. With no server name set, as
// upstream.tls without server_name gives in mode cluster, a node's
// certificate passes for the address rproxy dials it at (.2's) or for the
// seed's host (.3's certificate is for 127.0.0.1 only, a name shared with
// the seed). Checking every node by the seed's name alone, as before, fails
// the handshake with .2: its keys would get errors.
func TestClusterNodesWithCertificatesOfTheirOwn(t *testing.T) {
	certs := tlstest.New(t)
	ips := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	certNames := []string{"127.0.0.1", "127.0.0.2", "127.0.0.1"}
	cl := redistest.StartClusterWith(t, 3, 0, redistest.TLSNodes(certs, ips, certNames))
	p := startTLSClusterProxy(t, cl, certs)
	c := dialClient(t, p.Addr)
	for i, n := range cl.Nodes {
		k := keyOnMaster(t, cl, n, "own")
		if r := c.do("SET", k, ips[i]); r != "+OK\r\n" {
			t.Fatalf("SET %s, a key of the node at %s: %q", k, ips[i], r)
		}
		if r := string(n.Do(t, "GET", k)); r != "$"+strconv.Itoa(len(ips[i]))+"\r\n"+ips[i]+"\r\n" {
			t.Errorf("%s on its node: %q", k, r)
		}
	}
}

// TestClusterNodesVerifiedByAnnouncedHostname: nodes that announce a
// hostname (cluster-announce-hostname) while the map names them by
// address (cluster-preferred-endpoint-type ip, the default) serve
// certificates for that hostname only; the seed's is for its address.
// rproxy, dialling each node at its address, accepts a certificate for the
// hostname the node announces: checked by its address or the seed's host
// alone, as go-redis checks, the handshakes with the two named nodes fail
// and their keys get errors.
func TestClusterNodesVerifiedByAnnouncedHostname(t *testing.T) {
	certs := tlstest.New(t)
	names := []string{"", "node-1.example", "node-2.example"}
	cl := redistest.StartClusterWith(t, 3, 0, func(tb testing.TB, i int) []string {
		if i == 0 {
			return certs.ClusterNodeArgs(tb, redistest.FreePort(tb), "127.0.0.1", "127.0.0.1")
		}
		return append(certs.ClusterNodeArgs(tb, redistest.FreePort(tb), names[i], "127.0.0.1"), "--cluster-announce-hostname", names[i])
	})
	p := startTLSClusterProxy(t, cl, certs)
	c := dialClient(t, p.Addr)
	for i, n := range cl.Nodes {
		k := keyOnMaster(t, cl, n, "named")
		if r := c.do("SET", k, "v"); r != "+OK\r\n" {
			t.Fatalf("SET %s, a key of the node announced as %q: %q", k, names[i], r)
		}
		if r := string(n.Do(t, "GET", k)); r != "$1\r\nv\r\n" {
			t.Errorf("%s on its node: %q", k, r)
		}
	}
}

// startTLSClusterProxy starts rproxy in front of cl over TLS, its first
// node the seed, with no server name set, as upstream.tls without
// server_name gives in mode cluster (the seed's host as the other name).
func startTLSClusterProxy(t *testing.T, cl *redistest.Cluster, certs *tlstest.Certs) *proxytest.Proxy {
	t.Helper()
	seed := "127.0.0.1:" + tlsPortOf(t, cl.Nodes[0])
	return proxytest.Start(t, seed, func(c *proxy.Config) {
		c.Cluster = &upstream.ClusterConfig{Seeds: []string{seed}, Refresh: 2 * time.Second, MinRefreshGap: 20 * time.Millisecond}
		c.HotKey.Tier = false
		c.Upstream.TLS = &tls.Config{RootCAs: certs.Pool, MinVersion: tls.VersionTLS12}
		c.Upstream.TLSOtherName = "127.0.0.1"
	})
}

// keyOnMaster returns a key named prefix+n whose slot is n's.
func keyOnMaster(t *testing.T, cl *redistest.Cluster, n *redistest.ClusterNode, prefix string) string {
	t.Helper()
	for i := 0; ; i++ {
		if k := prefix + strconv.Itoa(i); cl.MasterForSlot(t, cl.Slot(k)).Addr == n.Addr {
			return k
		}
	}
}

// tlsPortOf returns n's tls-port setting.
func tlsPortOf(t *testing.T, n *redistest.ClusterNode) string {
	t.Helper()
	v, err := resp.Parse(n.Do(t, "CONFIG", "GET", "tls-port"))
	if err != nil || len(v.Elems) != 2 {
		t.Fatalf("CONFIG GET tls-port on %s: %v %v", n.Addr, v, err)
	}
	return string(v.Elems[1].Str)
}
