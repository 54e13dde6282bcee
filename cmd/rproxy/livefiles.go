package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"slices"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/config"
	"github.com/rproxy/rproxy/upstream"
)

// tlsFiles is what rproxy reads from its TLS files, kept so that a
// reload can read them again without a restart: the client-facing
// configuration (tls.cert_file, key_file, client_ca_file, min_version),
// handed to each handshake (GetConfigForClient), and the certificate
// rproxy shows Redis (upstream.tls.cert_file, key_file), handed to each
// dial (GetClientCertificate), and the CAs that verify Redis
// (upstream.tls.ca_file), handed to each dial (upstream.Config.TLSRoots).
// Connections made after a reload use the new files; those up keep what
// they were made with.
type tlsFiles struct {
	server  atomic.Pointer[tls.Config]      // nil: clients connect without TLS
	upCert  atomic.Pointer[tls.Certificate] // nil: none shown to Redis
	upRoots atomic.Pointer[x509.CertPool]   // nil: the system's CAs
}

// tlsReading is one reading of the files, not yet in force.
type tlsReading struct {
	server   *tls.Config      // nil: no client TLS
	upstream *tls.Config      // nil: no upstream TLS
	upCert   *tls.Certificate // nil: no client certificate to Redis
	certs    []namedCert      // for the expiry checks
}

// readTLS reads cfg's TLS files: a missing or bad file is an error
// naming its key.
func readTLS(cfg config.Config, readFile func(string) ([]byte, error)) (tlsReading, error) {
	var r tlsReading
	var err error
	if r.server, err = cfg.TLS.ServerConfig(readFile); err != nil {
		return r, err
	}
	if r.upstream, err = cfg.Upstream.TLSConfig(readFile); err != nil {
		return r, err
	}
	if r.upstream != nil && len(r.upstream.Certificates) > 0 {
		r.upCert = &r.upstream.Certificates[0]
	}
	for _, c := range []struct {
		key, file string
		tc        *tls.Config
	}{{"tls.cert_file", cfg.TLS.CertFile, r.server}, {"upstream.tls.cert_file", cfg.Upstream.TLS.CertFile, r.upstream}} {
		nc, err := leafOf(c.key, c.file, c.tc)
		if err != nil {
			return r, err
		}
		if nc != nil {
			r.certs = append(r.certs, *nc)
		}
	}
	cas := []struct{ key, file string }{{"tls.client_ca_file", cfg.TLS.ClientCAFile}}
	if r.upstream != nil {
		cas = append(cas, struct{ key, file string }{"upstream.tls.ca_file", cfg.Upstream.TLS.CAFile})
	}
	for _, c := range cas {
		nc, err := firstCA(c.key, c.file, readFile)
		if err != nil {
			return r, err
		}
		if nc != nil {
			r.certs = append(r.certs, *nc)
		}
	}
	return r, nil
}

// start puts r in force and returns the configurations rproxy starts
// with: the client-facing one (nil: no TLS), which asks tlsFiles for
// the files' current reading at each handshake, and the upstream one
// (nil: no TLS), whose client certificate is tlsFiles' current one, as
// its CAs are (upRoots, for upstream.Config.TLSRoots).
func (f *tlsFiles) start(r tlsReading) (server, up *tls.Config) {
	f.apply(r)
	if r.server != nil {
		server = &tls.Config{
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.server.Load(), nil },
			ClientAuth:         r.server.ClientAuth, // for the start-up log line; the handshake uses the current one
		}
	}
	if r.upstream != nil {
		up = r.upstream.Clone()
		up.Certificates, up.RootCAs = nil, nil
		up.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := f.upCert.Load(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: Redis decides whether that will do
		}
	}
	return server, up
}

// check reports why r cannot replace the reading in force: TLS turned
// on or off for clients (the listener is made at start).
func (f *tlsFiles) check(r tlsReading) error {
	if (r.server == nil) != (f.server.Load() == nil) {
		return errors.New("tls.cert_file: turning client TLS on or off needs a restart")
	}
	return nil
}

// apply puts r in force.
func (f *tlsFiles) apply(r tlsReading) {
	f.server.Store(r.server)
	f.upCert.Store(r.upCert)
	if r.upstream != nil {
		f.upRoots.Store(r.upstream.RootCAs)
	}
}

// roots returns the CAs in force that verify Redis (nil: the system's).
func (f *tlsFiles) roots() *x509.CertPool { return f.upRoots.Load() }

// changedCerts returns the keys whose certificate differs between old
// and next, one added or gone included.
func changedCerts(old, next []namedCert) []string {
	raw := func(l []namedCert) map[string][]byte {
		m := make(map[string][]byte, len(l))
		for _, c := range l {
			m[c.key] = c.leaf.Raw
		}
		return m
	}
	o, n := raw(old), raw(next)
	var keys []string
	for k, v := range n {
		if !bytes.Equal(o[k], v) {
			keys = append(keys, k)
		}
	}
	for k := range o {
		if _, ok := n[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// liveFiles are the files a reload reads again whether or not the config
// file changed, since their content is what a rotation changes: rproxy's
// upstream password, the Sentinels' and the TLS files.
type liveFiles struct {
	creds, sentinelCreds *upstream.Credentials // sentinelCreds nil: no Sentinel
	tls                  tlsFiles
	sec                  *security
	log                  *zap.Logger
}

// liveReading is one reading of liveFiles, not yet in force.
type liveReading struct {
	user, password                 string
	sentinelUser, sentinelPassword string
	tls                            tlsReading
}

// read reads cfg's files: an error names the key and the file, and
// nothing is in force yet.
func (f *liveFiles) read(cfg config.Config) (liveReading, error) {
	r := liveReading{user: cfg.Upstream.Username, sentinelUser: cfg.Upstream.Sentinel.Username}
	var err error
	if r.password, err = cfg.Upstream.Password(os.ReadFile, os.Getenv); err != nil {
		return r, err
	}
	if f.sentinelCreds != nil {
		if r.sentinelPassword, err = cfg.Upstream.Sentinel.Password(os.ReadFile, os.Getenv); err != nil {
			return r, err
		}
	}
	r.tls, err = readTLS(cfg, os.ReadFile)
	return r, err
}

// apply puts r in force and logs what changed: connections made from
// now on use it.
func (f *liveFiles) apply(r liveReading) {
	if f.creds.Set(r.user, r.password) {
		f.log.Warn("reload: upstream credentials changed: connections dialled from now on log in with them; those logged in stay",
			zap.String("user", r.user))
		f.sec.requestCheck()
	}
	if f.sentinelCreds != nil && f.sentinelCreds.Set(r.sentinelUser, r.sentinelPassword) {
		f.log.Warn("reload: the Sentinels' credentials changed: connections to them dialled from now on log in with them",
			zap.String("user", r.sentinelUser))
	}
	f.tls.apply(r.tls)
	certs := r.tls.certs
	if keys := changedCerts(f.sec.loadCerts(), certs); len(keys) > 0 {
		f.log.Warn("reload: TLS certificates changed: connections made from now on use them; those up keep theirs", zap.Strings("keys", keys))
	}
	f.sec.setCerts(certs)
}
