package config

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the content of rproxy.yaml. See rproxy.example.yaml and
// README.md for every key with its default.
type Config struct {
	Listen string `yaml:"listen"` // client listen address; default "127.0.0.1:6380"
	Admin  string `yaml:"admin"`  // admin HTTP listen address (/healthz /readyz /metrics ...); "" = off (default)
	// AdminTokenFile holds a token the admin endpoints require (Bearer),
	// except /healthz and /readyz; "" = no token (bind admin to loopback).
	AdminTokenFile string `yaml:"admin_token_file"`
	// AdminAllowUnauthenticated lets admin listen on an address other than
	// loopback without admin_token_file (as Redis's protected-mode no):
	// anyone who reaches it can reload the configuration and read
	// /debug/pprof. Default false: such a config is refused.
	AdminAllowUnauthenticated bool `yaml:"admin_allow_unauthenticated"`
	// Procs is how many OS threads run Go code (GOMAXPROCS); default 0,
	// auto: the GOMAXPROCS variable if set, else the CPUs this process may
	// use, less one when upstream.address is a loopback address (Redis on
	// this node wants a core of its own); 0..1024.
	Procs    int      `yaml:"procs"`
	TLS      TLS      `yaml:"tls"` // TLS on the client listener
	Upstream Upstream `yaml:"upstream"`
	Auth     Auth     `yaml:"auth"`
	Coalesce Coalesce `yaml:"coalesce"`
	HotKeys  HotKeys  `yaml:"hotkeys"`
	Policy   Policy   `yaml:"policy"`
	Jitter   Jitter   `yaml:"jitter"`
	SlowLog  SlowLog  `yaml:"slowlog"`
	Limits   Limits   `yaml:"limits"` // resource limits
	Log      Log      `yaml:"log"`    // logging
}

// Upstream configures the connections to the Redis server.
type Upstream struct {
	Address     string   `yaml:"address"`               // host:port of the Redis server (mode cluster: a seed node); default "127.0.0.1:6379"
	Mode        string   `yaml:"mode"`                  // "standalone" (default), "cluster" (a Redis Cluster, found from address and cluster.seeds) or "sentinel" (the master Redis Sentinel names, see sentinel)
	Connections int      `yaml:"connections"`           // shared upstream connections per protocol (RESP2, RESP3); default 1 (measured fastest); 1..64
	DialTimeout Duration `yaml:"dial_timeout"`          // default 1s; > 0
	Timeout     Duration `yaml:"timeout"`               // a request with no reply progress for this long fails with "upstream unavailable" and the connection is reset (drained instead while Redis answers nothing, so no later command runs before it); default 5s; > 0
	BackoffMin  Duration `yaml:"reconnect_backoff_min"` // default 50ms; > 0
	BackoffMax  Duration `yaml:"reconnect_backoff_max"` // default 2s; >= BackoffMin
	// GatherYields is how many times an upstream writer yields, while its
	// queue keeps growing, to gather more clients' commands into one write;
	// default 4; 0..64 (0 writes at once: more syscalls, more upstream wakeups).
	GatherYields int `yaml:"gather_yields"`
	// StallDivert: new batches go around a shared connection whose oldest
	// request has seen no reply for this long (a write held by CLIENT
	// PAUSE WRITE or FAILOVER), to a spare connection if need be; default
	// 100ms; 0 = off; at most half of Timeout applies.
	StallDivert Duration `yaml:"stall_divert"`
	// BacklogDivert: a small batch (at most a sixteenth of this) goes
	// around a shared connection holding this many bytes of commands not
	// yet answered and of their expected replies (pipelines of large
	// values), to a spare connection if need be, instead of waiting for
	// Redis to read them all; default 1mb; 0 = off; otherwise at least
	// 64kb.
	BacklogDivert ByteSize `yaml:"backlog_divert"`
	// FollowMaster (mode standalone): once the address has answered as a
	// master, a READONLY reply starts a search for a master at the
	// address, and the connections move to one found there, so that a
	// failover behind a DNS name or a load balancer reaches rproxy's
	// long-lived connections; default true.
	FollowMaster bool `yaml:"follow_master"`
	// Username and a password from a file or an environment variable (never
	// the config itself, never a flag) authenticate every upstream
	// connection; no password means none.
	Username     string `yaml:"username"`      // default "" (Redis's "default" user)
	PasswordFile string `yaml:"password_file"` // path of a file holding the password (trailing newline ignored)
	PasswordEnv  string `yaml:"password_env"`  // name of an environment variable holding the password

	Cluster  UpstreamCluster  `yaml:"cluster"`  // mode cluster only
	Sentinel UpstreamSentinel `yaml:"sentinel"` // mode sentinel only
	TLS      UpstreamTLS      `yaml:"tls"`      // TLS to the Redis server
}

// UpstreamSentinel configures a master found through Redis Sentinel
// (upstream.mode sentinel): upstream.address is then unused.
type UpstreamSentinel struct {
	MasterName string   `yaml:"master_name"` // the name the Sentinels monitor the master under; required in mode sentinel
	Addresses  []string `yaml:"addresses"`   // the Sentinels (host:port), asked in order; at least one in mode sentinel; default []
	// Username and a password from a file or an environment variable
	// authenticate to the Sentinels themselves (not to the master).
	Username     string `yaml:"username"`      // default "" (the Sentinels' default user)
	PasswordFile string `yaml:"password_file"` // path of a file holding the Sentinels' password
	PasswordEnv  string `yaml:"password_env"`  // name of an environment variable holding the Sentinels' password
	TLS          bool   `yaml:"tls"`           // connect to the Sentinels with TLS, as upstream.tls sets it (needs upstream.tls.enabled); default false
	// FailoverHold: while a failover's leader promotes a replica (from its
	// +failover-state-send-slaveof-noone to the +switch-master), commands
	// wait, at most this long, instead of reaching the old master, where
	// writes after the promotion are acknowledged and then lost. Default
	// 5s; 0 turns the hold off.
	FailoverHold Duration `yaml:"failover_hold"`
	// ReplicaReadPrefixes: read-only commands whose keys are all under
	// these prefixes go to one of the master's healthy replicas (as the
	// Sentinels report them); their values may lag writes by the
	// replication delay, even a client's own writes. Default [].
	ReplicaReadPrefixes []string `yaml:"replica_read_prefixes"`
}

// Password reads the Sentinels' password from PasswordFile or
// PasswordEnv; "" when neither is set.
func (s UpstreamSentinel) Password(readFile func(string) ([]byte, error), getenv func(string) string) (string, error) {
	switch {
	case s.PasswordFile != "":
		return readSecretFile("upstream.sentinel.password_file", s.PasswordFile, readFile)
	case s.PasswordEnv != "":
		p := getenv(s.PasswordEnv)
		if p == "" {
			return "", fmt.Errorf("upstream.sentinel.password_env: $%s is empty or unset", s.PasswordEnv)
		}
		return p, nil
	}
	return "", nil
}

// UpstreamCluster configures a Redis Cluster upstream (upstream.mode cluster).
type UpstreamCluster struct {
	Seeds []string `yaml:"seeds"` // more seed nodes (host:port) besides upstream.address; default []
	// Refresh is how often the slot map is read again when nothing asks
	// sooner (MOVED, an unreachable master and CLUSTERDOWN ask at once);
	// default 10s; > 0.
	Refresh      Duration `yaml:"refresh"`
	MaxRedirects int      `yaml:"max_redirects"` // MOVED/ASK/TRYAGAIN/CLUSTERDOWN replies followed per command before the client gets TRYAGAIN (or the CLUSTERDOWN); default 5; 1..16
	// Announce is the host:port the cluster facade gives cluster-mode
	// clients (CLUSTER SLOTS, SHARDS, NODES) as the one node owning every
	// slot; default "" (the address each client connected to).
	Announce string `yaml:"announce"`
	// ReplicaReadPrefixes: read-only commands whose keys are all under
	// these prefixes go to a replica of the keys' master (READONLY), for
	// read-mostly keys; their values may lag writes by the replication
	// delay, even a client's own writes. Default [] (every read from masters).
	ReplicaReadPrefixes []string `yaml:"replica_read_prefixes"`
}

// TLS makes the client listener speak TLS only. The files are read at
// start (ServerConfig); changing them needs a restart.
type TLS struct {
	CertFile string `yaml:"cert_file"` // PEM certificate (chain) clients see; "" = plain TCP (default); set with key_file
	KeyFile  string `yaml:"key_file"`  // PEM private key of cert_file
	// ClientCAFile, when set, makes TLS mutual: clients must present a
	// certificate signed by one of the PEM CAs in this file.
	ClientCAFile string `yaml:"client_ca_file"`
	MinVersion   string `yaml:"min_version"` // "1.2" (default) or "1.3"
}

// UpstreamTLS configures TLS on every connection to the Redis server.
type UpstreamTLS struct {
	Enabled bool   `yaml:"enabled"` // default false
	CAFile  string `yaml:"ca_file"` // PEM CAs that verify the server; "" = the system's roots
	// CertFile and KeyFile are a client certificate for Redis's
	// tls-auth-clients; both or neither.
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"` // name verified in the server's certificate; "" = the host of upstream.address in mode standalone, of each server dialled in mode sentinel, of each node dialled or upstream.address's in mode cluster
	// InsecureSkipVerify accepts any server certificate: for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// TLS versions accepted by TLS.MinVersion.
var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// ServerConfig loads the client side's certificate, key and client CAs:
// nil when tls.cert_file is not set. readFile is injected, as for
// Password. Errors name the key and the file; they never quote the files.
func (t TLS) ServerConfig(readFile func(string) ([]byte, error)) (*tls.Config, error) {
	if t.CertFile == "" && t.KeyFile == "" {
		return nil, nil
	}
	cert, err := loadKeyPair("tls", t.CertFile, t.KeyFile, readFile)
	if err != nil {
		return nil, err
	}
	v, ok := tlsVersions[t.MinVersion]
	if !ok {
		return nil, fmt.Errorf("tls.min_version must be 1.2 or 1.3, got %q", t.MinVersion)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: v}
	if t.ClientCAFile != "" {
		if c.ClientCAs, err = loadCAs("tls.client_ca_file", t.ClientCAFile, readFile); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// TLSConfig loads upstream.tls: nil when it is not enabled. The server name
// defaults to the host of upstream.address in mode standalone. In the other
// modes each server is checked by the host it is dialled at (the master the
// Sentinels name, each Sentinel, each cluster node), and on a cluster by
// TLSOtherName too.
func (u Upstream) TLSConfig(readFile func(string) ([]byte, error)) (*tls.Config, error) {
	t := u.TLS
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
		MinVersion:         tls.VersionTLS12,
		// Pinned connections are dialled often; resumption saves most of
		// the handshake.
		ClientSessionCache: tls.NewLRUClientSessionCache(0),
	}
	if c.ServerName == "" && u.Mode != "sentinel" && u.Mode != "cluster" {
		if host, _, err := net.SplitHostPort(u.Address); err == nil {
			c.ServerName = host
		}
	}
	if t.CAFile != "" {
		var err error
		if c.RootCAs, err = loadCAs("upstream.tls.ca_file", t.CAFile, readFile); err != nil {
			return nil, err
		}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := loadKeyPair("upstream.tls", t.CertFile, t.KeyFile, readFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// TLSOtherName is upstream.Config.TLSOtherName: in mode cluster without
// upstream.tls.server_name, the host of upstream.address (the first seed),
// so that nodes sharing the seed's certificate are accepted as well as
// nodes whose certificates carry their own address.
func (u Upstream) TLSOtherName() string {
	if !u.TLS.Enabled || u.TLS.ServerName != "" || u.Mode != "cluster" {
		return ""
	}
	host, _, err := net.SplitHostPort(u.Address)
	if err != nil {
		return ""
	}
	return host
}

// loadKeyPair reads a PEM certificate and its key; errors name the keys
// section.cert_file and section.key_file and their files.
func loadKeyPair(section, certFile, keyFile string, readFile func(string) ([]byte, error)) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, fmt.Errorf("%s.cert_file and %s.key_file must be set together", section, section)
	}
	certPEM, err := readFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s.cert_file: %w", section, err)
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s.key_file: %w", section, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// crypto/tls's messages describe the problem, never the contents.
		return tls.Certificate{}, fmt.Errorf("%s.cert_file %s with %s.key_file %s: %w", section, certFile, section, keyFile, err)
	}
	return cert, nil
}

// loadCAs reads a file of PEM CA certificates.
func loadCAs(key, path string, readFile func(string) ([]byte, error)) (*x509.CertPool, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s %s: no PEM certificate found", key, path)
	}
	return pool, nil
}

// Password reads the upstream password from PasswordFile or PasswordEnv;
// "" when neither is set. The readers are injected so tests need no files
// or environment.
func (u Upstream) Password(readFile func(string) ([]byte, error), getenv func(string) string) (string, error) {
	switch {
	case u.PasswordFile != "":
		return readSecretFile("upstream.password_file", u.PasswordFile, readFile)
	case u.PasswordEnv != "":
		p := getenv(u.PasswordEnv)
		if p == "" {
			return "", fmt.Errorf("upstream.password_env: $%s is empty or unset", u.PasswordEnv)
		}
		return p, nil
	}
	return "", nil
}

// Auth says how clients authenticate to rproxy.
type Auth struct {
	// Mode is "none" (default: clients do not authenticate; AUTH is
	// refused), "proxy" (clients AUTH as one of Users; until then every
	// command gets -NOAUTH, as on Redis) or "passthrough" (clients' AUTH is
	// checked by Redis, and each upstream user gets its own shared
	// connections, so ACL rules apply as on Redis).
	Mode string `yaml:"mode"`
	// Users maps user names to the SHA-256 of their password, as 64 hex
	// digits (`printf %s "$PASSWORD" | sha256sum`). AUTH <password> alone is
	// user "default".
	Users map[string]string `yaml:"users"`
}

// Coalesce configures read coalescing: concurrent identical reads share one
// upstream call.
type Coalesce struct {
	// Commands lists the eligible commands (read-only, non-blocking,
	// single-key); default [get]; [] turns coalescing off.
	Commands []string `yaml:"commands"`
	// Window is which flights a read may join: "unsent" (default: only
	// flights not yet written upstream, so the value is current during the
	// reader's own call) or "inflight" (also flights awaiting their reply,
	// sent after the reader's last acknowledged write: more joins, values up
	// to one round trip older than the call).
	Window string `yaml:"window"`
}

// HotKeys configures hot-key detection and the local tier that serves hot
// keys' GETs from memory, kept coherent with Redis by client tracking.
// Reloaded on SIGHUP, except turning on a tier that was off at start and
// the salt section.
type HotKeys struct {
	Tier      bool     `yaml:"tier"`      // serve hot keys from the local tier; default true; false = detection only
	Threshold float64  `yaml:"threshold"` // reads per second from which a key is hot; default 500; > 0
	Window    Duration `yaml:"window"`    // rates are measured over this sliding window; default 1s; 10ms..1m
	TopK      int      `yaml:"top_k"`     // most keys tracked as hot at once; default 64; 1..10000
	MaxBytes  ByteSize `yaml:"max_bytes"` // tier memory budget (keys, replies and overhead); default 64mb; >= 1kb
	TTLCap    Duration `yaml:"ttl_cap"`   // longest an entry is served before Redis is read again; default 10s; > 0
	// MaxLag bounds the invalidation lag: when the tracking connection does
	// not answer a probe within it, the tier empties and stops serving.
	MaxLag Duration `yaml:"max_lag"` // default 1s; >= 1ms
	// MissWait collapses cache-aside stampedes: when GETs of a hot key (or
	// one under prefixes) find no value, the first reader fills it and the
	// others wait up to this long for its write, then read again.
	MissWait Duration `yaml:"miss_wait"` // default 200ms; 0 = off; at most 10s
	// WriteLimit: a key invalidated (written) more than this many times
	// per window is not stored in the tier until it is quiet again; it is
	// read from Redis. 0 = off.
	WriteLimit int      `yaml:"write_limit"` // default 4; 0..1000000
	Prefixes   []string `yaml:"prefixes"`    // also cache every key under these prefixes, hot or not; default []
	Salt       Salt     `yaml:"salt"`        // salted fan-out (upstream.mode cluster)
}

// Salt spreads hot keys' reads over copies on other masters of a cluster.
// Changing it needs a restart.
type Salt struct {
	// Copies is how many masters serve each salted key's GETs, the key's
	// own master included (the copies sit on the others); default 0 (off);
	// 0 or 2..16; needs upstream.mode cluster.
	Copies   int      `yaml:"copies"`
	TTL      Duration `yaml:"ttl"`      // longest a copy lives (never past the key's own expiry); default 5s; >= 1ms
	Prefixes []string `yaml:"prefixes"` // also salt every key under these prefixes, hot or not; default []
}

// Policy refuses, rewrites or logs commands by rule (see policy/ and the
// docs/policy.md). Reloaded on SIGHUP.
type Policy struct {
	// Defaults appends the built-in rules after Rules (policy.DefaultRules):
	// KEYS, FLUSHALL, FLUSHDB, server administration, ACL commands on
	// users, CONFIG GET of secrets, commands that affect every client and
	// cluster topology changes are denied; default true.
	Defaults bool    `yaml:"defaults"`
	Rules    []Rule  `yaml:"rules"` // checked in order before the defaults; first match wins; default []
	BigKeys  BigKeys `yaml:"big_keys"`
}

// Rule is one policy rule; see policy.Rule.
type Rule struct {
	Name      string   `yaml:"name"`
	Commands  []string `yaml:"commands"`
	Args      []string `yaml:"args"`
	Keys      []string `yaml:"keys"`
	Users     []string `yaml:"users"`
	Addrs     []string `yaml:"addrs"`
	Action    string   `yaml:"action"`
	Message   string   `yaml:"message"`
	RewriteTo string   `yaml:"rewrite_to"`
	LogAction string   `yaml:"log_action"`
}

// BigKeys guards against deletes and writes that block Redis.
type BigKeys struct {
	DelMaxElements int64    `yaml:"del_max_elements"` // DEL of a collection with more elements is refused or rewritten; default 10000; 0 = off
	DelMaxBytes    ByteSize `yaml:"del_max_bytes"`    // DEL of a longer string is refused or rewritten; default 1mb; 0 = off
	Action         string   `yaml:"action"`           // deny (default) or rewrite (to UNLINK)
	MaxValueBytes  ByteSize `yaml:"max_value_bytes"`  // writes of a longer value are refused; default 0 = off
}

// Jitter spreads the TTL of cache writes below the one asked for, so keys
// written together do not expire together. Reloaded on SIGHUP.
type Jitter struct {
	Enabled        bool     `yaml:"enabled"`          // default true
	MaxFraction    float64  `yaml:"max_fraction"`     // TTLs are lowered by a fraction in [0, max_fraction], never raised; default 0.1; 0 < x <= 1
	Exclude        []string `yaml:"exclude"`          // glob patterns of keys never jittered; default []
	ExpireKeys     []string `yaml:"expire_keys"`      // removed: EXPIRE/PEXPIRE are never jittered; must be empty (kept so old files with [] load)
	DefaultTTL     Duration `yaml:"default_ttl"`      // SET without a TTL on keys matching default_ttl_keys gets this TTL; default 0s = off
	DefaultTTLKeys []string `yaml:"default_ttl_keys"` // default []
	Seed           uint64   `yaml:"seed"`             // same seed on every rproxy of a deployment: same expiry for the same write; default 0
}

// AdminToken reads the admin token from AdminTokenFile ("" when unset).
func (c Config) AdminToken(readFile func(string) ([]byte, error)) (string, error) {
	if c.AdminTokenFile == "" {
		return "", nil
	}
	return readSecretFile("admin_token_file", c.AdminTokenFile, readFile)
}

// readSecretFile reads a one-line secret: the file's content without its
// trailing newline, which must not be empty. Errors name the config key.
func readSecretFile(key, path string, readFile func(string) ([]byte, error)) (string, error) {
	b, err := readFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", key, path)
	}
	return s, nil
}

// SlowLog keeps the proxy's own slow client batches for PROXY SLOWLOG.
type SlowLog struct {
	Threshold Duration `yaml:"threshold"` // batches at least this slow (read to replies written) are kept; default 10ms; 0 = off
	MaxLen    int      `yaml:"max_len"`   // newest entries kept; default 128; 1..100000
}

// Limits bounds the resources clients may use.
type Limits struct {
	MaxClients     int      `yaml:"max_clients"`      // default 10000; >= 1
	MaxBulkLen     ByteSize `yaml:"max_bulk_len"`     // default 512mb (Redis proto-max-bulk-len); >= 1kb
	MaxQueryBuffer ByteSize `yaml:"max_query_buffer"` // default 1gb (Redis client-query-buffer-limit); >= 1kb
	// MaxReplyBuffer bounds the replies rproxy holds for one client: a read
	// of pipelined commands is sent upstream in parts whose replies are
	// expected to fit, each part's replies written before the next is sent.
	MaxReplyBuffer ByteSize `yaml:"max_reply_buffer"` // default 16mb; 0 = unbounded; >= 64kb
	IdleTimeout    Duration `yaml:"idle_timeout"`     // close clients idle this long (not blocked or subscribed ones); 0 = never (default); >= 0
	// WriteTimeout closes a client whose replies cannot be written for this
	// long: it stopped reading (Redis's client-output-buffer-limit, in time).
	WriteTimeout  Duration `yaml:"client_write_timeout"` // default 60s; 0 = never; >= 0
	ShutdownDrain Duration `yaml:"shutdown_drain"`       // on SIGTERM, how long in-flight replies may take to reach clients; default 5s; >= 0
	// IdleParkAfter: a client that has sent nothing this long is parked
	// (its goroutine ends; its socket waits in an epoll set until it sends
	// again), so that an idle connection costs about 4 KB of RSS, not 8.4.
	IdleParkAfter Duration `yaml:"idle_park_after"` // default 250ms; 0 = never (read at start, not on reload); >= 0
}

// Log configures logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info (default), warn, error
	Format string `yaml:"format"` // auto (default: console when stderr is a terminal, else json), json, console
	// Requests logs every client batch at debug level: client address,
	// session id, command names (never arguments or values), count,
	// duration and outcome. Needs level debug; reloaded on SIGHUP.
	Requests bool `yaml:"requests"` // default false
	// Sampling caps repeated log lines, as zap samples: each second, the
	// first Initial lines with the same message are written, then every
	// Thereafter-th. Initial 0 (default) writes every line. Restart to change.
	Sampling LogSampling `yaml:"sampling"`
}

// LogSampling is zap's sampling: per message and second.
type LogSampling struct {
	Initial    int `yaml:"initial"`    // default 0 (no sampling); >= 0
	Thereafter int `yaml:"thereafter"` // default 0 (drop the rest of the second); >= 0
}

// Allowed values of Log.Level and Log.Format.
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"auto", "json", "console"}
)

// Default returns the configuration used for every key the file leaves out.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:6380",
		Admin:  "",
		Procs:  0,
		TLS:    TLS{MinVersion: "1.2"},
		Upstream: Upstream{
			Address:       "127.0.0.1:6379",
			Mode:          "standalone",
			Cluster:       UpstreamCluster{Seeds: []string{}, Refresh: Duration(10 * time.Second), MaxRedirects: 5, ReplicaReadPrefixes: []string{}},
			Sentinel:      UpstreamSentinel{Addresses: []string{}, ReplicaReadPrefixes: []string{}, FailoverHold: Duration(5 * time.Second)},
			Connections:   1,
			DialTimeout:   Duration(time.Second),
			Timeout:       Duration(5 * time.Second),
			BackoffMin:    Duration(50 * time.Millisecond),
			BackoffMax:    Duration(2 * time.Second),
			GatherYields:  4,
			StallDivert:   Duration(100 * time.Millisecond),
			BacklogDivert: Megabyte,
			FollowMaster:  true,
		},
		Auth:     Auth{Mode: "none"},
		Coalesce: Coalesce{Commands: []string{"get"}, Window: "unsent"},
		HotKeys: HotKeys{
			Tier:       true,
			Threshold:  500,
			Window:     Duration(time.Second),
			TopK:       64,
			MaxBytes:   64 * Megabyte,
			TTLCap:     Duration(10 * time.Second),
			MaxLag:     Duration(time.Second),
			MissWait:   Duration(200 * time.Millisecond),
			WriteLimit: 4,
			Prefixes:   []string{},
			Salt:       Salt{TTL: Duration(5 * time.Second), Prefixes: []string{}},
		},
		Policy: Policy{
			Defaults: true,
			Rules:    []Rule{},
			BigKeys:  BigKeys{DelMaxElements: 10000, DelMaxBytes: Megabyte, Action: "deny"},
		},
		Jitter: Jitter{
			Enabled:        true,
			MaxFraction:    0.1,
			Exclude:        []string{},
			ExpireKeys:     []string{},
			DefaultTTLKeys: []string{},
		},
		SlowLog: SlowLog{Threshold: Duration(10 * time.Millisecond), MaxLen: 128},
		Limits: Limits{
			MaxClients:     10000,
			MaxBulkLen:     512 * Megabyte,
			MaxQueryBuffer: 1 * Gigabyte,
			MaxReplyBuffer: 16 * Megabyte,
			IdleTimeout:    0,
			WriteTimeout:   Duration(time.Minute),
			ShutdownDrain:  Duration(5 * time.Second),
			IdleParkAfter:  Duration(250 * time.Millisecond),
		},
		Log: Log{
			Level:    "info",
			Format:   "auto",
			Requests: false,
			Sampling: LogSampling{},
		},
	}
}

// Load reads the file at path and returns Default overlaid with it, validated.
// Errors start with "config: <path>: ".
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse is Load from bytes; name (usually the file name) prefixes errors.
// Every problem found is reported (joined with errors.Join), one per line,
// each as "config: <name>: line <n>: <yaml path>: <problem>" for problems in
// the YAML and "config: <name>: <problem>" for failed Validate rules.
func Parse(data []byte, name string) (Config, error) {
	wrap := func(msg string) error { return fmt.Errorf("config: %s: %s", name, msg) }

	// First pass: syntax, number of documents, and the yaml path of the
	// value on each line (to make the decoder's errors name the key).
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case err == io.EOF:
		return Default(), nil
	case err != nil:
		return Config{}, wrap(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return Config{}, wrap(fmt.Sprintf("line %d: multiple YAML documents; the file must contain exactly one", next.Line))
	case err != io.EOF:
		return Config{}, wrap(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	pos := newPositions(&doc)

	// Second pass: strict decoding over the defaults.
	c := Default()
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var problems []problem
	if err := dec.Decode(&c); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return Config{}, wrap(strings.TrimPrefix(err.Error(), "yaml: "))
		}
		for _, e := range te.Errors {
			problems = append(problems, pos.rewrite(e))
		}
	}
	problems = append(problems, pos.fractions...)
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b problem) int { return a.line - b.line })
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = wrap(p.msg)
		}
		return Config{}, errors.Join(errs...)
	}
	if len(c.Auth.Users) == 0 {
		c.Auth.Users = nil // "users: {}" and no key at all mean the same
	}
	// An empty list value means the same as no key: keep the defaults' [].
	for _, l := range []*[]string{&c.HotKeys.Prefixes, &c.Jitter.Exclude, &c.Jitter.ExpireKeys, &c.Jitter.DefaultTTLKeys} {
		if *l == nil {
			*l = []string{}
		}
	}
	if c.Policy.Rules == nil {
		c.Policy.Rules = []Rule{}
	}
	if c.Coalesce.Commands == nil {
		// "commands:" with no value keeps the default, like every empty
		// value; "commands: []" (empty, not nil) turns coalescing off.
		c.Coalesce.Commands = Default().Coalesce.Commands
	}
	if err := c.Validate(); err != nil {
		var errs []error
		for _, e := range unjoin(err) {
			errs = append(errs, wrap(e.Error()))
		}
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// unjoin returns the errors joined in err, or err itself.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// problem is one error found while decoding, with its line for sorting.
type problem struct {
	line int
	msg  string
}

// positions maps the places in a parsed file to the yaml paths of the values
// found there, so that the decoder's errors can name the key.
type positions struct {
	lines     map[int][]string  // line -> paths of the values starting on it
	at        map[[2]int]string // line, column -> path of the value there
	fractions []problem         // fractional numbers given for integer fields
}

func newPositions(doc *yaml.Node) *positions {
	p := &positions{lines: map[int][]string{}, at: map[[2]int]string{}}
	p.walk(doc, "", reflect.TypeFor[Config]())
	return p
}

// walk records the values under n, which is at path and is decoded into a
// value of type t (nil if unknown). Aliases are not followed.
func (p *positions) walk(n *yaml.Node, path string, t reflect.Type) {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			p.walk(c, path, t)
		}
		return
	}
	if path != "" {
		p.at[[2]int{n.Line, n.Column}] = path
		// A block mapping starts on the line of its first key; only
		// flow mappings can be the sole value reported on a line.
		if n.Kind != yaml.MappingNode || n.Style&yaml.FlowStyle != 0 {
			p.lines[n.Line] = append(p.lines[n.Line], path)
		}
	}
	switch n.Kind {
	case yaml.MappingNode:
		if t == nil || t.Kind() != reflect.Struct {
			return // the decoder reports this mapping as a whole
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			var ft reflect.Type // nil for unknown keys
			for j := range t.NumField() {
				if yamlKey(t.Field(j)) == k {
					ft = t.Field(j).Type
				}
			}
			p.walk(n.Content[i+1], join(path, k), ft)
		}
	case yaml.ScalarNode:
		// The YAML decoder truncates 1.5 to 1 for an int field.
		if t != nil && t.Kind() == reflect.Int && n.ShortTag() == "!!float" {
			p.fractions = append(p.fractions, problem{n.Line,
				fmt.Sprintf("line %d: %s must be a whole number, got %s", n.Line, path, n.Value)})
		}
	}
}

var (
	lineRE       = regexp.MustCompile(`^line (\d+)(?:, column (\d+))?: (.*)$`)
	unknownRE    = regexp.MustCompile(`^field (.+) not found in type (\S+)$`)
	duplicateRE  = regexp.MustCompile(`^field (.+) already set in type (\S+)$`)
	sectionPaths = func() map[string]string {
		m := map[string]string{reflect.TypeFor[Config]().String(): ""}
		walkFields(reflect.TypeFor[Config](), "", func(path string, f reflect.StructField) {
			if f.Type.Kind() == reflect.Struct {
				m[f.Type.String()] = path
			}
		})
		return m
	}()
)

// rewrite turns one of the YAML decoder's messages ("line 7: field upstrem
// not found in type config.Config") into one that names the key by its yaml
// path.
func (p *positions) rewrite(msg string) problem {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return problem{0, msg}
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[3]
	if u := unknownRE.FindStringSubmatch(rest); u != nil {
		if section, ok := sectionPaths[u[2]]; ok {
			rest = fmt.Sprintf("unknown field %q (known fields%s: %s)",
				join(section, u[1]), in(section), strings.Join(fieldNames(u[2]), ", "))
		}
	} else if u := duplicateRE.FindStringSubmatch(rest); u != nil {
		if section, ok := sectionPaths[u[2]]; ok {
			rest = fmt.Sprintf("field %q set twice", join(section, u[1]))
		}
	} else if m[2] != "" {
		col, _ := strconv.Atoi(m[2])
		if path, ok := p.at[[2]int{line, col}]; ok {
			rest = path + ": " + rest
		}
	} else if paths := p.lines[line]; len(paths) == 1 {
		rest = paths[0] + ": " + rest
	}
	return problem{line, fmt.Sprintf("line %d: %s", line, rest)}
}

func join(section, key string) string {
	if section == "" {
		return key
	}
	return section + "." + key
}

func in(section string) string {
	if section == "" {
		return ""
	}
	return " in " + section
}

// fieldNames returns the yaml keys of the struct type named typeName.
func fieldNames(typeName string) []string {
	t := reflect.TypeFor[Config]()
	if typeName != t.String() {
		for i := range t.NumField() {
			if t.Field(i).Type.String() == typeName {
				t = t.Field(i).Type
				break
			}
		}
	}
	var names []string
	for i := range t.NumField() {
		if k := yamlKey(t.Field(i)); k != "" {
			names = append(names, k)
		}
	}
	return names
}

// yamlKey returns the YAML key of struct field f, or "" if it has none.
func yamlKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if k == "-" || !f.IsExported() {
		return ""
	}
	if k == "" {
		k = strings.ToLower(f.Name)
	}
	return k
}

// walkFields calls fn for every yaml field of struct type t, depth first in
// declaration order, with its dotted yaml path (e.g. "upstream.timeout").
// Struct fields other than Duration/ByteSize are sections and are descended.
func walkFields(t reflect.Type, prefix string, fn func(path string, f reflect.StructField)) {
	walkFieldsAt(t, prefix, nil, fn)
}

// walkFieldsAt is walkFields below the field at index; each field's Index
// is its whole index from the top (for reflect.Value.FieldByIndex).
func walkFieldsAt(t reflect.Type, prefix string, index []int, fn func(path string, f reflect.StructField)) {
	for i := range t.NumField() {
		f := t.Field(i)
		k := yamlKey(f)
		if k == "" {
			continue
		}
		path := join(prefix, k)
		f.Index = append(index[:len(index):len(index)], i)
		fn(path, f)
		if f.Type.Kind() == reflect.Struct {
			walkFieldsAt(f.Type, path, f.Index, fn)
		}
	}
}

// Validate checks every rule of the schema and reports all violations, joined
// with errors.Join, each naming the key by its yaml path, e.g.
// "upstream.connections must be between 1 and 64, got 0".
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if err := checkHostPort(c.Listen, 0); err != nil {
		add("listen %v", err)
	}
	if c.Admin != "" {
		if err := checkHostPort(c.Admin, 0); err != nil {
			add("admin %v (use \"\" to disable)", err)
		} else if c.AdminTokenFile == "" && !c.AdminAllowUnauthenticated && !loopback(c.Admin) {
			add("admin %s is not a loopback address and admin_token_file is not set: anyone who reaches it could reload the configuration and read /debug/pprof; set admin_token_file, bind admin to 127.0.0.1, or set admin_allow_unauthenticated: true if a firewall keeps others out", c.Admin)
		}
	}

	u := c.Upstream
	if err := checkHostPort(u.Address, 1); err != nil {
		add("upstream.address %v", err)
	}
	if u.Connections < 1 || u.Connections > 64 {
		add("upstream.connections must be between 1 and 64, got %d", u.Connections)
	}
	if s := c.HotKeys.Salt; s.Copies != 0 && (s.Copies < 2 || s.Copies > 16) {
		add("hotkeys.salt.copies must be 0 (off) or between 2 and 16, got %d", s.Copies)
	} else if s.Copies != 0 && u.Mode != "cluster" {
		add("hotkeys.salt.copies needs upstream.mode cluster (copies go to other masters)")
	}
	if c.HotKeys.Salt.TTL < Duration(time.Millisecond) {
		add("hotkeys.salt.ttl must be at least 1ms, got %s", c.HotKeys.Salt.TTL)
	}
	if len(u.Cluster.ReplicaReadPrefixes) > 0 && u.Mode != "cluster" {
		add("upstream.cluster.replica_read_prefixes needs upstream.mode cluster")
	}
	switch u.Mode {
	case "standalone":
	case "cluster":
	case "sentinel":
		if u.Sentinel.MasterName == "" {
			add("upstream.sentinel.master_name must be set in upstream.mode sentinel")
		}
		if len(u.Sentinel.Addresses) == 0 {
			add("upstream.sentinel.addresses must name at least one Sentinel in upstream.mode sentinel")
		}
		if u.Sentinel.TLS && !u.TLS.Enabled {
			add("upstream.sentinel.tls needs upstream.tls.enabled (its settings are used)")
		}
		if u.Sentinel.FailoverHold < 0 {
			add("upstream.sentinel.failover_hold must be 0 (off) or more, got %s", u.Sentinel.FailoverHold)
		}
	default:
		add("upstream.mode must be standalone, cluster or sentinel, got %q", u.Mode)
	}
	if u.Mode != "sentinel" && (u.Sentinel.MasterName != "" || len(u.Sentinel.Addresses) > 0 || len(u.Sentinel.ReplicaReadPrefixes) > 0) {
		add("upstream.sentinel needs upstream.mode sentinel")
	}
	if u.Sentinel.PasswordFile != "" && u.Sentinel.PasswordEnv != "" {
		add("upstream.sentinel.password_file and upstream.sentinel.password_env exclude each other")
	}
	for i, s := range u.Sentinel.Addresses {
		if err := checkHostPort(s, 1); err != nil {
			add("upstream.sentinel.addresses[%d] %v", i, err)
		}
	}
	if u.Cluster.Announce != "" {
		if err := checkHostPort(u.Cluster.Announce, 1); err != nil {
			add("upstream.cluster.announce %v", err)
		} else if u.Mode != "cluster" {
			add("upstream.cluster.announce needs upstream.mode cluster")
		}
	}
	for i, s := range u.Cluster.Seeds {
		if err := checkHostPort(s, 1); err != nil {
			add("upstream.cluster.seeds[%d] %v", i, err)
		}
	}
	if c.Log.Sampling.Initial < 0 || c.Log.Sampling.Thereafter < 0 {
		add("log.sampling.initial and log.sampling.thereafter must not be negative, got %d and %d", c.Log.Sampling.Initial, c.Log.Sampling.Thereafter)
	}
	if u.Cluster.Refresh <= 0 {
		add("upstream.cluster.refresh must be greater than 0, got %s", u.Cluster.Refresh)
	}
	if u.Cluster.MaxRedirects < 1 || u.Cluster.MaxRedirects > 16 {
		add("upstream.cluster.max_redirects must be between 1 and 16, got %d", u.Cluster.MaxRedirects)
	}
	if c.Procs < 0 || c.Procs > 1024 {
		add("procs must be between 0 and 1024, got %d", c.Procs)
	}
	switch c.Auth.Mode {
	case "none":
		if len(c.Auth.Users) > 0 {
			add("auth.users is set but auth.mode is none: set auth.mode: proxy, or remove the users")
		}
	case "proxy":
		if len(c.Auth.Users) == 0 {
			add("auth.mode proxy needs at least one user in auth.users")
		}
		for name, h := range c.Auth.Users {
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
				add("auth.users.%s must be the SHA-256 of the password as 64 hex digits", name)
			}
		}
	case "passthrough":
		if len(c.Auth.Users) > 0 {
			add("auth.users is set but auth.mode is passthrough: Redis checks the passwords")
		}
	default:
		add("auth.mode must be none, proxy or passthrough, got %q", c.Auth.Mode)
	}
	if c.Coalesce.Window != "unsent" && c.Coalesce.Window != "inflight" {
		add("coalesce.window must be unsent or inflight, got %q", c.Coalesce.Window)
	}
	if u.PasswordFile != "" && u.PasswordEnv != "" {
		add("upstream.password_file and upstream.password_env are both set; use one")
	}
	c.validateTLS(add)
	if u.GatherYields < 0 || u.GatherYields > 64 {
		add("upstream.gather_yields must be between 0 and 64, got %d", u.GatherYields)
	}
	if u.StallDivert < 0 {
		add("upstream.stall_divert must be 0 (off) or more, got %s", u.StallDivert)
	}
	if u.BacklogDivert != 0 && u.BacklogDivert < 64*Kilobyte {
		add("upstream.backlog_divert must be 0 (off) or at least 64kb, got %s", u.BacklogDivert)
	}
	positive := func(path string, d Duration) {
		if d <= 0 {
			add("%s must be greater than 0, got %s", path, d)
		}
	}
	positive("upstream.dial_timeout", u.DialTimeout)
	positive("upstream.timeout", u.Timeout)
	positive("upstream.reconnect_backoff_min", u.BackoffMin)
	if u.BackoffMax < u.BackoffMin {
		add("upstream.reconnect_backoff_max must be at least upstream.reconnect_backoff_min (%s), got %s", u.BackoffMin, u.BackoffMax)
	}

	h := c.HotKeys
	if !(h.Threshold > 0) {
		add("hotkeys.threshold must be greater than 0 (reads per second), got %v", h.Threshold)
	}
	if h.Window < Duration(10*time.Millisecond) || h.Window > Duration(time.Minute) {
		add("hotkeys.window must be between 10ms and 1m, got %s", h.Window)
	}
	if h.TopK < 1 || h.TopK > 10000 {
		add("hotkeys.top_k must be between 1 and 10000, got %d", h.TopK)
	}
	if h.MaxBytes < Kilobyte {
		add("hotkeys.max_bytes must be at least 1kb, got %s", h.MaxBytes)
	}
	positive("hotkeys.ttl_cap", h.TTLCap)
	if h.MaxLag < Duration(time.Millisecond) {
		add("hotkeys.max_lag must be at least 1ms, got %s", h.MaxLag)
	}
	if h.WriteLimit < 0 || h.WriteLimit > 1000000 {
		add("hotkeys.write_limit must be between 0 (off) and 1000000, got %d", h.WriteLimit)
	}
	if h.MissWait < 0 || h.MissWait > Duration(10*time.Second) {
		add("hotkeys.miss_wait must be between 0 (off) and 10s, got %s", h.MissWait)
	}
	for i, p := range h.Prefixes {
		if p == "" {
			add("hotkeys.prefixes[%d] is empty: it would cache every key", i)
		}
	}

	if len(c.Jitter.ExpireKeys) > 0 {
		add("jitter.expire_keys is no longer supported: EXPIRE and PEXPIRE are never jittered (they refresh sliding sessions and windows, and a key must not live longer than asked); remove the key")
	}
	if c.Jitter.Enabled && !(c.Jitter.MaxFraction > 0) {
		add("jitter.max_fraction must be greater than 0 when jitter is enabled (set enabled: false to turn it off), got %v", c.Jitter.MaxFraction)
	}
	// The policy and coalescing have no checks of their own here (but the
	// window's spelling): their stages' are all.
	errs = append(errs, c.stageProblems("policy", "coalesce")...)

	if c.SlowLog.Threshold < 0 {
		add("slowlog.threshold must not be negative (0 = off), got %s", c.SlowLog.Threshold)
	}
	if c.SlowLog.MaxLen < 1 || c.SlowLog.MaxLen > 100000 {
		add("slowlog.max_len must be between 1 and 100000, got %d", c.SlowLog.MaxLen)
	}

	l := c.Limits
	if l.MaxClients < 1 {
		add("limits.max_clients must be at least 1, got %d", l.MaxClients)
	}
	if l.MaxBulkLen < Kilobyte {
		add("limits.max_bulk_len must be at least 1kb, got %s", l.MaxBulkLen)
	}
	if l.MaxQueryBuffer < Kilobyte {
		add("limits.max_query_buffer must be at least 1kb, got %s", l.MaxQueryBuffer)
	}
	if l.MaxReplyBuffer != 0 && l.MaxReplyBuffer < 64*Kilobyte {
		add("limits.max_reply_buffer must be 0 (unbounded) or at least 64kb, got %s", l.MaxReplyBuffer)
	}
	if l.IdleTimeout < 0 {
		add("limits.idle_timeout must not be negative (0 = never), got %s", l.IdleTimeout)
	}
	if l.WriteTimeout < 0 {
		add("limits.client_write_timeout must not be negative (0 = never), got %s", l.WriteTimeout)
	}
	if l.IdleParkAfter < 0 {
		add("limits.idle_park_after must not be negative (0 = never), got %s", l.IdleParkAfter)
	}
	if l.ShutdownDrain < 0 {
		add("limits.shutdown_drain must not be negative, got %s", l.ShutdownDrain)
	}

	if !slices.Contains(LogLevels, c.Log.Level) {
		add("log.level must be one of %s, got %q", strings.Join(LogLevels, ", "), c.Log.Level)
	}
	if !slices.Contains(LogFormats, c.Log.Format) {
		add("log.format must be one of %s, got %q", strings.Join(LogFormats, ", "), c.Log.Format)
	}
	if len(errs) == 0 {
		// The other stages' rules mostly have a check above in the key's
		// terms; theirs would repeat it.
		errs = c.stageProblems("hotkeys", "hotkeys.salt", "limits")
	}
	return errors.Join(errs...)
}

// validateTLS checks the tls and upstream.tls sections; the files are read
// only at start (TLS.ServerConfig, Upstream.TLSConfig).
func (c Config) validateTLS(add func(format string, args ...any)) {
	pair := func(section, cert, key string) {
		switch {
		case cert != "" && key == "":
			add("%s.cert_file is set without %s.key_file: set both, or neither", section, section)
		case cert == "" && key != "":
			add("%s.key_file is set without %s.cert_file: set both, or neither", section, section)
		}
	}
	t := c.TLS
	pair("tls", t.CertFile, t.KeyFile)
	if t.ClientCAFile != "" && t.CertFile == "" && t.KeyFile == "" {
		add("tls.client_ca_file needs tls.cert_file and tls.key_file: client certificates are checked only on a TLS listener")
	}
	if _, ok := tlsVersions[t.MinVersion]; !ok {
		add("tls.min_version must be 1.2 or 1.3, got %q", t.MinVersion)
	}

	u := c.Upstream.TLS
	if !u.Enabled {
		for _, f := range []struct {
			key string
			set bool
		}{
			{"ca_file", u.CAFile != ""}, {"cert_file", u.CertFile != ""}, {"key_file", u.KeyFile != ""},
			{"server_name", u.ServerName != ""}, {"insecure_skip_verify", u.InsecureSkipVerify},
		} {
			if f.set {
				add("upstream.tls.%s is set but upstream.tls.enabled is false: set enabled: true, or remove it", f.key)
			}
		}
		return
	}
	pair("upstream.tls", u.CertFile, u.KeyFile)
	if u.InsecureSkipVerify && u.CAFile != "" {
		add("upstream.tls.insecure_skip_verify accepts any certificate, so upstream.tls.ca_file would be ignored: set one of them")
	}
}

// loopback reports whether the host of addr (host:port) is a loopback
// address or "localhost". An empty host is every interface: not loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkHostPort checks that addr is host:port with a numeric port of at least
// minPort. The host may be empty (all interfaces).
func checkHostPort(addr string, minPort int) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < minPort || p > 65535 {
		return fmt.Errorf("must have a port between %d and 65535, got %q", minPort, addr)
	}
	return nil
}

// Redacted returns a copy of c safe to show (GET /config, PROXY CONFIG
// GET): the users' password hashes are replaced. The upstream password and
// the TLS private keys are never in a Config, only the files or variable
// they are read from.
func (c Config) Redacted() Config {
	if len(c.Auth.Users) > 0 {
		users := make(map[string]string, len(c.Auth.Users))
		for name := range c.Auth.Users {
			users[name] = "<redacted>"
		}
		c.Auth.Users = users
	}
	return c
}

// Marshal renders c as YAML in the format of rproxy.example.yaml (without
// comments). Parse accepts the result and yields c again.
func (c Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// String returns c rendered as YAML, as Marshal does.
func (c Config) String() string {
	b, err := c.Marshal()
	if err != nil {
		return "# " + err.Error() + "\n"
	}
	return string(b)
}

// Merge prepares a reload: it returns next, except that every key for which
// reloadable(key) is false keeps its value from running, and the dotted
// paths of those keys whose value differs (in file order): the changes
// that wait for a restart. A key is a leaf of the file (a section is
// descended: reloadable is asked about "limits.max_clients", never about
// "limits"); lists and maps are compared whole.
func Merge(running, next Config, reloadable func(key string) bool) (Config, []string) {
	merged := next
	var pending []string
	dst, old := reflect.ValueOf(&merged).Elem(), reflect.ValueOf(running)
	walkFields(dst.Type(), "", func(path string, f reflect.StructField) {
		if f.Type.Kind() == reflect.Struct {
			return // its fields come next
		}
		d, o := dst.FieldByIndex(f.Index), old.FieldByIndex(f.Index)
		if reloadable(path) || reflect.DeepEqual(d.Interface(), o.Interface()) {
			return
		}
		d.Set(o)
		pending = append(pending, path)
	})
	return merged, pending
}
