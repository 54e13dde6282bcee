package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/resp"
)

// TestReloadRotatesTLSCertificates: certificates replaced in their files
// and reloaded are used without a restart: clients that connect after the
// reload get the new server certificate and must show a certificate of
// the new client CA; Redis, once it trusts only the new CA and has closed
// rproxy's connections, accepts rproxy's new client certificate; a client
// connected throughout carries on.
func TestReloadRotatesTLSCertificates(t *testing.T) {
	bin := buildBinary(t)
	a, b := tlstest.New(t), tlstest.New(t) // two CAs, each with a server and a client certificate
	tlsPort := redistest.FreePort(t)
	rs := redistest.Start(t, a.RedisArgs(tlsPort, "yes")...)
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	install := func(c *tlstest.Certs) {
		t.Helper()
		for src, dst := range map[string]string{c.ServerCert: "server.pem", c.ServerKey: "server-key.pem",
			c.ClientCert: "client.pem", c.ClientKey: "client-key.pem"} {
			copyFile(t, src, file(dst))
		}
		copyFile(t, c.CA, file("client-ca.pem"))
		copyFile(t, c.CA, file("upstream-ca.pem")) // Redis's server certificate is of the same CA
	}
	install(a)
	listen, admin := freeAddr(t), freeAddr(t)
	path := file("rproxy.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`log: {format: json}
tls:
  cert_file: %s
  key_file: %s
  client_ca_file: %s
upstream:
  address: 127.0.0.1:%d
  tls:
    enabled: true
    ca_file: %s
    cert_file: %s
    key_file: %s
`, file("server.pem"), file("server-key.pem"), file("client-ca.pem"), tlsPort, file("upstream-ca.pem"), file("client.pem"), file("client-key.pem"))), 0o644)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-admin", admin)

	both := x509.NewCertPool()
	for _, c := range []*tlstest.Certs{a, b} {
		pem, _ := os.ReadFile(c.CA)
		both.AppendCertsFromPEM(pem)
	}
	dial := func(client tls.Certificate) (*tls.Conn, error) {
		return tls.Dial("tcp", listen, &tls.Config{RootCAs: both, ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}})
	}
	nc, err := dial(a.Client)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	do := clientDo(t, nc)
	if r := do("SET", "k", "v1"); r != "+OK\r\n" {
		t.Fatalf("SET over TLS = %q", r)
	}

	// Rotate: Redis trusts both CAs, rproxy's files become B's, reload,
	// then Redis trusts only B, shows B's server certificate (which
	// rproxy verifies with B's CA, its new upstream.tls.ca_file) and
	// closes every other connection.
	bundle := file("redis-ca.pem")
	pa, _ := os.ReadFile(a.CA)
	pb, _ := os.ReadFile(b.CA)
	os.WriteFile(bundle, append(pa, pb...), 0o600)
	if r := string(rs.Do(t, "CONFIG", "SET", "tls-ca-cert-file", bundle)); r != "+OK\r\n" {
		t.Fatalf("CONFIG SET tls-ca-cert-file: %q", r)
	}
	install(b)
	if r := do("PROXY", "RELOAD"); r != "+OK\r\n" {
		t.Fatalf("PROXY RELOAD = %q", r)
	}
	if r := string(rs.Do(t, "CONFIG", "SET", "tls-ca-cert-file", b.CA, "tls-cert-file", b.ServerCert, "tls-key-file", b.ServerKey)); r != "+OK\r\n" {
		t.Fatalf("CONFIG SET Redis's TLS files to B's: %q", r)
	}
	rs.Do(t, "CLIENT", "KILL", "SKIPME", "yes")
	var last string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if last = do("SET", "k", "v2"); last == "+OK\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET once Redis trusts only the new CA: %q, never OK (rproxy still shows the old certificate, or trusts the old CA only?)", last)
		}
	}

	nb, err := dial(b.Client)
	if err != nil {
		t.Fatalf("a client with the new CA's certificate after the reload: %v", err)
	}
	if got := nb.ConnectionState().PeerCertificates[0].Raw; !bytes.Equal(got, b.Server.Certificate[0]) {
		t.Error("a client connecting after the reload did not get the new server certificate")
	}
	nb.Close()
	if old, err := dial(a.Client); err == nil {
		// TLS 1.3: the server's refusal of the client certificate comes
		// with the first read.
		old.SetDeadline(time.Now().Add(5 * time.Second))
		old.Write(resp.AppendCommandString(nil, "PING"))
		if _, err := old.Read(make([]byte, 16)); err == nil {
			t.Error("a client certificate of the old client CA was accepted after the reload")
		}
		old.Close()
	}
	// TLS off by reload: refused (the listener is made at start).
	os.WriteFile(path, []byte(fmt.Sprintf("log: {format: json}\nupstream:\n  address: 127.0.0.1:%d\n", tlsPort)), 0o644)
	if r := do("PROXY", "RELOAD"); !strings.Contains(r, "turning client TLS on or off needs a restart") {
		t.Errorf("PROXY RELOAD without tls = %q", r)
	}
	if r := do("GET", "k"); r != "$2\r\nv2\r\n" {
		t.Errorf("GET after the refused reload = %q", r)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logs
	cmd.Wait()
	if !strings.Contains(out, `"msg":"reload: TLS certificates changed`) || !strings.Contains(out, `"keys":["tls.cert_file","tls.client_ca_file","upstream.tls.ca_file","upstream.tls.cert_file"]`) {
		t.Errorf("the log does not name the certificates that changed:\n%s", out)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
