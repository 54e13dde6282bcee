package config

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rproxy/rproxy/coalesce"
	"github.com/rproxy/rproxy/hotkey"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/salt"
	"github.com/rproxy/rproxy/tier"
	"github.com/rproxy/rproxy/upstream"
)

// The file-to-stage mapping, in one place: each method builds one stage's
// own Config from the file's sections. Validate checks the file's keys,
// then has each stage validate what is built for it here (stageProblems),
// so a stage's own rules live in its package and every caller (start,
// -check, reload) gets them from Validate.

// ProxyConfig maps the file onto the proxy's Config. What needs files or
// running parts (TLS, the Sentinel client, the ops hooks) is added by the
// caller.
func (c Config) ProxyConfig() proxy.Config {
	pc := c.PolicyConfig()
	var cluster *upstream.ClusterConfig
	if c.Upstream.Mode == "cluster" {
		cluster = &upstream.ClusterConfig{
			Seeds:        append([]string{c.Upstream.Address}, c.Upstream.Cluster.Seeds...),
			Refresh:      c.Upstream.Cluster.Refresh.D(),
			MaxRedirects: c.Upstream.Cluster.MaxRedirects,
			ReplicaReads: len(c.Upstream.Cluster.ReplicaReadPrefixes) > 0,
		}
	}
	return proxy.Config{
		Listen: c.Listen,
		Upstream: upstream.Config{
			Address:       c.Upstream.Address,
			Connections:   c.Upstream.Connections,
			DialTimeout:   c.Upstream.DialTimeout.D(),
			Timeout:       c.Upstream.Timeout.D(),
			BackoffMin:    c.Upstream.BackoffMin.D(),
			BackoffMax:    c.Upstream.BackoffMax.D(),
			GatherYields:  c.Upstream.GatherYields,
			StallDivert:   min(c.Upstream.StallDivert.D(), c.Upstream.Timeout.D()/2),
			BacklogDivert: int(c.Upstream.BacklogDivert),
			Username:      c.Upstream.Username,
		},
		Cluster:             cluster,
		ReplicaReadPrefixes: c.replicaReadPrefixes(),
		ClusterAnnounce:     c.Upstream.Cluster.Announce,
		Salt:                c.SaltConfig(),
		Limits:              c.ProxyLimits(),
		ShutdownDrain:       c.Limits.ShutdownDrain.D(),
		IdleParkAfter:       c.idleParkAfter(),
		Users:               c.proxyUsers(),
		AuthPassthrough:     c.Auth.Mode == "passthrough",
		Coalesce:            c.CoalesceConfig(),
		HotKey:              c.HotKeyConfig(),
		SlowLogThreshold:    c.SlowLog.Threshold.D(),
		SlowLogLen:          c.SlowLog.MaxLen,
		LogRequests:         c.Log.Requests,
		Policy:              &pc,
		FollowMaster:        c.Upstream.FollowMaster, // proxy.New: a standalone upstream only
	}
}

// CoalesceConfig maps the coalesce section onto the coalescing stage's
// Config; nil when no command is listed (coalescing off).
func (c Config) CoalesceConfig() *coalesce.Config {
	if len(c.Coalesce.Commands) == 0 {
		return nil
	}
	window := coalesce.Unsent
	if c.Coalesce.Window == "inflight" {
		window = coalesce.InFlight
	}
	return &coalesce.Config{Commands: c.Coalesce.Commands, Window: window}
}

// ProxyLimits maps the client limits (those a reload can change).
func (c Config) ProxyLimits() proxy.Limits {
	l := c.Limits
	return proxy.Limits{
		MaxClients:         l.MaxClients,
		MaxBulkLen:         l.MaxBulkLen.Bytes(),
		MaxQueryBuffer:     l.MaxQueryBuffer.Bytes(),
		MaxReplyBuffer:     l.MaxReplyBuffer.Bytes(),
		ClientWriteTimeout: l.WriteTimeout.D(),
		IdleTimeout:        l.IdleTimeout.D(),
	}
}

// SaltConfig maps hotkeys.salt; nil when it is off.
func (c Config) SaltConfig() *salt.Config {
	s := c.HotKeys.Salt
	if s.Copies == 0 {
		return nil
	}
	return &salt.Config{Copies: s.Copies, TTL: s.TTL.D(), Prefixes: s.Prefixes}
}

// HotKeyConfig maps the hotkeys section onto the tier engine's Config;
// sketch sizes keep their defaults.
func (c Config) HotKeyConfig() *tier.Config {
	h := c.HotKeys
	det := hotkey.DefaultDetectorConfig()
	det.Threshold, det.Window, det.TopK = h.Threshold, h.Window.D(), h.TopK
	tc := hotkey.DefaultTierConfig()
	tc.MaxBytes, tc.TTLCap = h.MaxBytes.Bytes(), h.TTLCap.D()
	return &tier.Config{
		Detector:   det,
		Tier:       h.Tier,
		TierConfig: tc,
		Prefixes:   h.Prefixes,
		MaxLag:     h.MaxLag.D(),
		MissWait:   h.MissWait.D(),
		Churn:      hotkey.ChurnConfig{Window: h.Window.D(), Limit: h.WriteLimit},
	}
}

// PolicyConfig maps the policy and jitter sections onto policy.Config.
func (c Config) PolicyConfig() policy.Config {
	pc := policy.Config{
		NoDefaults:  !c.Policy.Defaults,
		Passthrough: c.Auth.Mode == "passthrough",
		BigKeys: policy.BigKeyConfig{
			DelMaxElements: c.Policy.BigKeys.DelMaxElements,
			DelMaxBytes:    c.Policy.BigKeys.DelMaxBytes.Bytes(),
			Action:         policy.Action(c.Policy.BigKeys.Action),
			MaxValueBytes:  c.Policy.BigKeys.MaxValueBytes.Bytes(),
		},
		Jitter: policy.JitterConfig{
			Disabled:       !c.Jitter.Enabled,
			MaxFraction:    c.Jitter.MaxFraction,
			Exclude:        c.Jitter.Exclude,
			DefaultTTL:     c.Jitter.DefaultTTL.D(),
			DefaultTTLKeys: c.Jitter.DefaultTTLKeys,
			Seed:           c.Jitter.Seed,
		},
	}
	for _, r := range c.Policy.Rules {
		pc.Rules = append(pc.Rules, policy.Rule{
			Name: r.Name, Commands: r.Commands, Args: r.Args, Keys: r.Keys, Users: r.Users, Addrs: r.Addrs,
			Action: policy.Action(r.Action), Message: r.Message, RewriteTo: r.RewriteTo, LogAction: policy.Action(r.LogAction),
		})
	}
	return pc
}

// proxyUsers decodes the users' password hashes; Validate has checked them.
func (c Config) proxyUsers() proxy.Users {
	if c.Auth.Mode != "proxy" {
		return nil
	}
	users := make(proxy.Users, len(c.Auth.Users))
	for name, h := range c.Auth.Users {
		var sum [32]byte
		hex.Decode(sum[:], []byte(h))
		users[name] = sum
	}
	return users
}

// replicaReadPrefixes are the mode's: upstream.cluster's or
// upstream.sentinel's replica_read_prefixes.
func (c Config) replicaReadPrefixes() []string {
	if c.Upstream.Mode == "sentinel" {
		return c.Upstream.Sentinel.ReplicaReadPrefixes
	}
	return c.Upstream.Cluster.ReplicaReadPrefixes
}

// stageProblems has the stages of the named file sections validate the
// Config built for each, their problems named by the section.
func (c Config) stageProblems(sections ...string) []error {
	var errs []error
	for _, name := range sections {
		var err error
		switch name {
		case "policy":
			err = c.PolicyConfig().Validate()
		case "coalesce":
			if cc := c.CoalesceConfig(); cc != nil {
				err = cc.Validate()
			}
		case "hotkeys":
			err = c.HotKeyConfig().Validate()
		case "hotkeys.salt":
			if s := c.SaltConfig(); s != nil {
				err = s.Validate()
			}
		case "limits":
			err = c.ProxyLimits().Validate()
		}
		if err == nil {
			continue
		}
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("%s: %w", name, e))
		}
	}
	return errs
}

// idleParkAfter maps limits.idle_park_after to proxy.Config's, where 0
// means the default and a negative value never.
func (c *Config) idleParkAfter() time.Duration {
	if c.Limits.IdleParkAfter == 0 {
		return -1
	}
	return c.Limits.IdleParkAfter.D()
}
