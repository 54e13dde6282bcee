// Package tlstest makes the certificates TLS tests need, at test time: a CA,
// a server certificate for 127.0.0.1, ::1 and localhost, and a client
// certificate, both signed by the CA, written as PEM files to a
// t.TempDir(). Keys are ECDSA P-256, certificates valid for a day.
//
//	certs := tlstest.New(t)
//	// certs.ServerCert, certs.ServerKey: rproxy's tls.cert_file, key_file
//	// certs.CA: tls.client_ca_file, or a client's root
//	conn, err := tls.Dial("tcp", addr, certs.ClientConfig(true))
//
// Each New makes an independent CA, so a second set's client certificate
// is one the first set's CA did not sign. RedisArgs starts a redis-server
// (through internal/redistest) that serves TLS with the same files;
// ServerCertFor makes a server certificate for one name, and
// ClusterNodeArgs a cluster node serving one (redistest.TLSNodes).
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Certs are the PEM files of one CA and the certificates it signed, and the
// same material loaded for Go clients and servers.
type Certs struct {
	Dir        string // the t.TempDir() holding the files
	CA         string // CA certificate (PEM)
	ServerCert string // server certificate for 127.0.0.1, ::1 and localhost (PEM)
	ServerKey  string // its private key (PKCS #8 PEM)
	ClientCert string // client certificate, CN rproxy-test-client (PEM)
	ClientKey  string // its private key (PKCS #8 PEM)

	Pool   *x509.CertPool  // holds the CA
	Server tls.Certificate // ServerCert with ServerKey
	Client tls.Certificate // ClientCert with ClientKey

	caCert              *x509.Certificate
	caKey               *ecdsa.PrivateKey
	notBefore, notAfter time.Time
}

// New generates a CA, a server and a client certificate and writes them to
// a new t.TempDir().
func New(tb testing.TB) *Certs {
	tb.Helper()
	now := time.Now()
	return NewValid(tb, now.Add(-time.Hour), now.Add(24*time.Hour))
}

// NewValid is New with the server and client certificates valid from
// notBefore to notAfter (the CA from an hour before to a day after both):
// an expired set is NewValid(t, now.Add(-48*time.Hour), now.Add(-time.Hour)).
func NewValid(tb testing.TB, notBefore, notAfter time.Time) *Certs {
	tb.Helper()
	dir := tb.TempDir()
	c := &Certs{
		Dir:        dir,
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	caFrom, caTo := time.Now(), time.Now()
	if notBefore.Before(caFrom) {
		caFrom = notBefore
	}
	if notAfter.After(caTo) {
		caTo = notAfter
	}
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: "rproxy test CA"},
		NotBefore:             caFrom.Add(-time.Hour),
		NotAfter:              caTo.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("tlstest: CA: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatalf("tlstest: CA: %v", err)
	}
	writePEM(tb, c.CA, "CERTIFICATE", caDER)
	c.Pool = x509.NewCertPool()
	c.Pool.AddCert(caCert)

	c.caCert, c.caKey, c.notBefore, c.notAfter = caCert, caKey, notBefore, notAfter
	c.Server = c.leaf(tb, "localhost", x509.ExtKeyUsageServerAuth, c.ServerCert, c.ServerKey,
		[]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
	c.Client = c.leaf(tb, "rproxy-test-client", x509.ExtKeyUsageClientAuth, c.ClientCert, c.ClientKey, nil, nil)
	return c
}

// ServerCertFor writes a server certificate signed by the CA that is valid
// for name alone (an IP address or a DNS name), and returns its PEM files:
// a server that is not 127.0.0.1 to the client though it listens there.
func (c *Certs) ServerCertFor(tb testing.TB, name string) (certFile, keyFile string) {
	tb.Helper()
	var dns []string
	var ips []net.IP
	if ip := net.ParseIP(name); ip != nil {
		ips = []net.IP{ip}
	} else {
		dns = []string{name}
	}
	base := filepath.Join(c.Dir, "server-"+strings.NewReplacer(":", "_", "/", "_").Replace(name))
	certFile, keyFile = base+".pem", base+"-key.pem"
	c.leaf(tb, name, x509.ExtKeyUsageServerAuth, certFile, keyFile, dns, ips)
	return certFile, keyFile
}

// leaf makes a certificate signed by the CA and writes it and its key.
func (c *Certs) leaf(tb testing.TB, cn string, usage x509.ExtKeyUsage, certFile, keyFile string, dns []string, ips []net.IP) tls.Certificate {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    c.notBefore,
		NotAfter:     c.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.caCert, &key.PublicKey, c.caKey)
	if err != nil {
		tb.Fatalf("tlstest: %s: %v", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("tlstest: %s key: %v", cn, err)
	}
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "PRIVATE KEY", keyDER)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		tb.Fatalf("tlstest: %s: %v", cn, err)
	}
	return pair
}

// ClientConfig returns a client configuration that trusts the CA, for a
// server at 127.0.0.1, presenting the client certificate if withCert.
func (c *Certs) ClientConfig(withCert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: c.Pool, ServerName: "127.0.0.1"}
	if withCert {
		cfg.Certificates = []tls.Certificate{c.Client}
	}
	return cfg
}

// ServerConfig returns a server configuration with the server certificate;
// with clientCerts it requires client certificates signed by the CA.
func (c *Certs) ServerConfig(clientCerts bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.Server}, MinVersion: tls.VersionTLS12}
	if clientCerts {
		cfg.ClientCAs = c.Pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

// RedisArgs returns redis-server arguments that serve TLS on tlsPort with
// the server certificate, checking client certificates against the CA as
// authClients says ("yes", "optional" or "no"). redistest.Start keeps its
// plain port as well (it waits for PING there).
func (c *Certs) RedisArgs(tlsPort int, authClients string) []string {
	return []string{
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", c.ServerCert,
		"--tls-key-file", c.ServerKey,
		"--tls-ca-cert-file", c.CA,
		"--tls-auth-clients", authClients,
	}
}

// ClusterNodeArgs returns the redis-server arguments of a cluster node
// serving TLS on tlsPort, to clients and on its bus (tls-cluster yes, with
// the client certificate for the bus's outgoing links), with a server
// certificate for certName alone (ServerCertFor). A node whose announceIP
// is not 127.0.0.1 binds it too and announces it (any 127/8 address is
// the loopback): CLUSTER SHARDS then names it there.
func (c *Certs) ClusterNodeArgs(tb testing.TB, tlsPort int, certName, announceIP string) []string {
	tb.Helper()
	certFile, keyFile := c.ServerCertFor(tb, certName)
	args := append(c.RedisArgs(tlsPort, "no"), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-cluster", "yes", "--tls-client-cert-file", c.ClientCert, "--tls-client-key-file", c.ClientKey)
	if announceIP != "127.0.0.1" {
		args = append(args, "--bind", "127.0.0.1", announceIP, "--cluster-announce-ip", announceIP)
	}
	return args
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("tlstest: key: %v", err)
	}
	return k
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatalf("tlstest: serial: %v", err)
	}
	return n
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
}
