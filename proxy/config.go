package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rproxy/rproxy/coalesce"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// Config configures a Server.
type Config struct {
	Listen string // client listen address, host:port

	// TLS, when not nil, makes the client listener speak TLS only. Each
	// connection's handshake runs in a goroutine of its own, bounded by
	// TLSHandshakeTimeout, before the read loop sees the connection.
	TLS *tls.Config
	// TLSHandshakeTimeout bounds a client's TLS handshake; 0 means 10s.
	TLSHandshakeTimeout time.Duration

	// Upstream configures the shared connections; Protocol is ignored (the
	// server keeps one pool per protocol, RESP2 and RESP3).
	Upstream upstream.Config
	// Cluster, when not nil, makes the upstream a Redis Cluster found from
	// Cluster.Seeds (Upstream.Address is then unused): commands are routed
	// by key slot, and multi-key commands that span slots are split.
	Cluster *upstream.ClusterConfig
	// ReplicaReadPrefixes: on a cluster with Cluster.ReplicaReads (or with
	// a Sentinel whose SentinelConfig.Replicas is set), read-only
	// commands on keys under these prefixes go to a replica of the key's
	// master (their values may lag the master's by the replication delay).
	ReplicaReadPrefixes []string
	// ClusterAnnounce is the host:port the cluster facade (CLUSTER SLOTS,
	// SHARDS, NODES) gives cluster-mode clients as the one node owning
	// every slot; "" means the local address of each client's connection.
	ClusterAnnounce string

	// Limits are the client limits, which SetLimits changes at run time.
	Limits
	ShutdownDrain time.Duration // how long Shutdown lets in-flight replies reach clients
	// IdleParkAfter is how long a client sends nothing before its read
	// loop's goroutine ends and its socket waits in the idle poller
	// (park.go); 0 means 250ms, negative never.
	IdleParkAfter time.Duration

	// Users, when not nil, are the credentials clients must AUTH with
	// (auth mode "proxy"); until then they get -NOAUTH.
	Users Users
	// Coalesce, when not nil and listing commands, has concurrent
	// identical reads share one upstream call (coalescing.go).
	Coalesce *coalesce.Config

	// Salt, when not nil, spreads hot keys' GETs over salted copies on
	// other masters (cluster upstream only; hot keys from HotKey's
	// detector, or Salt.Prefixes).
	Salt *salt.Config

	// HotKey, when not nil, detects hot keys and (HotKey.Tier) serves their
	// GETs from a local tier kept coherent with Redis.
	HotKey *tier.Config

	// Policy, when not nil, is the initial policy (rules, big keys, TTL
	// jitter); SetPolicy replaces it at run time.
	Policy *policy.Config

	// SlowLogThreshold: client batches that take at least this long, from
	// reading to replies written, are kept for PROXY SLOWLOG (0 = off);
	// the newest SlowLogLen of them.
	SlowLogThreshold time.Duration
	SlowLogLen       int

	// LogRequests logs every client batch at debug level (command names,
	// never arguments); SetRequestLog changes it at run time.
	LogRequests bool

	// Ops connects PROXY RELOAD, PROXY CONFIG GET and the version shown
	// by INFO to the process.
	Ops OpsHooks

	// AuthPassthrough checks clients' AUTH against Redis and gives each
	// upstream user its own shared connections (auth mode "passthrough").
	AuthPassthrough bool

	// ConnSummaryEvery is how often the info line summing up client
	// connections opened and closed is logged (connection events
	// themselves are at debug); 0 means one minute, negative turns it off.
	ConnSummaryEvery time.Duration

	// TableRetry is the longest wait between requests for the command
	// table while the upstream does not answer; 0 means one second.
	TableRetry time.Duration

	// FollowMaster keeps a standalone upstream's connections on a master
	// when its address moves to another server (upstream.MasterFollow);
	// not with a Sentinel or a cluster, which name their masters.
	FollowMaster bool
	// FollowEvery is how often a search for the master dials; 0 means a
	// second (tests make it shorter).
	FollowEvery time.Duration

	// TableCheck is how often, once the command table came from the
	// upstream, its COMMAND COUNT is compared with the table's, to load
	// the table again when they differ; 0 means one minute, negative
	// never.
	TableCheck time.Duration
}

// Limits are the client limits that can change while the server runs
// (SetLimits); Config.Limits holds their start values.
type Limits struct {
	MaxClients     int   // clients beyond this get "-ERR max number of clients reached"
	MaxBulkLen     int64 // a client's declared bulk length above this closes it
	MaxQueryBuffer int64 // a client's incomplete command above this many bytes closes it
	// MaxReplyBuffer bounds the replies held for one client: a read's
	// commands go upstream in parts sized from the replies seen so far;
	// 0 = unbounded.
	MaxReplyBuffer int64
	IdleTimeout    time.Duration // close clients idle this long (not blocked or pub/sub ones); 0 = never
	// ClientWriteTimeout closes a client whose replies cannot be written
	// for this long (it stopped reading); 0 = never.
	ClientWriteTimeout time.Duration
}

// Validate reports every problem with l.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxClients < 1 {
		errs = append(errs, fmt.Errorf("proxy: max clients must be at least 1, got %d", l.MaxClients))
	}
	if l.MaxBulkLen < 1 || l.MaxQueryBuffer < 1 {
		errs = append(errs, fmt.Errorf("proxy: max bulk length and query buffer must be positive (got %d, %d)", l.MaxBulkLen, l.MaxQueryBuffer))
	}
	if l.MaxReplyBuffer < 0 {
		errs = append(errs, fmt.Errorf("proxy: max reply buffer must not be negative (0 = unbounded), got %d", l.MaxReplyBuffer))
	}
	if l.IdleTimeout < 0 || l.ClientWriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("proxy: idle timeout and client write timeout must not be negative (got %v, %v)", l.IdleTimeout, l.ClientWriteTimeout))
	}
	return errors.Join(errs...)
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("proxy: listen address is empty"))
	}
	up := c.Upstream
	up.Protocol = 2
	if c.Upstream.Sentinel != nil && c.Cluster != nil {
		errs = append(errs, errors.New("proxy: a Sentinel upstream and a cluster upstream exclude each other"))
	}
	if c.Cluster == nil && len(c.ReplicaReadPrefixes) > 0 && (c.Upstream.Sentinel == nil || !c.Upstream.Sentinel.ReplicasOn()) {
		errs = append(errs, errors.New("proxy: replica read prefixes need a cluster upstream with ReplicaReads or a Sentinel asking for replicas"))
	}
	if c.Salt != nil && c.Cluster == nil {
		errs = append(errs, errors.New("proxy: salted fan-out needs a cluster upstream"))
	}
	if c.Cluster != nil {
		if len(c.Cluster.Seeds) == 0 {
			errs = append(errs, errors.New("proxy: cluster mode needs at least one seed address"))
		} else {
			up.Address = c.Cluster.Seeds[0]
		}
		if c.Salt != nil {
			if err := c.Salt.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
		if c.ClusterAnnounce != "" {
			if err := validAnnounce(c.ClusterAnnounce); err != nil {
				errs = append(errs, err)
			}
		}
		if len(c.ReplicaReadPrefixes) > 0 && !c.Cluster.ReplicaReads {
			errs = append(errs, errors.New("proxy: replica read prefixes need Cluster.ReplicaReads"))
		}
	}
	if err := up.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Users != nil && c.AuthPassthrough {
		errs = append(errs, errors.New("proxy: users and auth passthrough exclude each other"))
	}
	if c.Coalesce != nil {
		if err := c.Coalesce.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil {
		errs = append(errs, errors.New("proxy: the client TLS configuration has no certificate"))
	}
	if c.SlowLogThreshold < 0 || (c.SlowLogThreshold > 0 && c.SlowLogLen < 1) {
		errs = append(errs, fmt.Errorf("proxy: slow log threshold must not be negative and its length must be at least 1 (got %v, %d)", c.SlowLogThreshold, c.SlowLogLen))
	}
	if c.HotKey != nil {
		if err := c.HotKey.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.TLSHandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("proxy: TLS handshake timeout must not be negative, got %v", c.TLSHandshakeTimeout))
	}
	if c.ShutdownDrain < 0 {
		errs = append(errs, fmt.Errorf("proxy: shutdown drain must not be negative, got %v", c.ShutdownDrain))
	}
	return errors.Join(errs...)
}

// validAnnounce checks a cluster announce address: host:port, port 1..65535.
func validAnnounce(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("proxy: cluster announce address %q: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return fmt.Errorf("proxy: cluster announce address %q: want host:port with a port 1..65535", addr)
	}
	return nil
}
