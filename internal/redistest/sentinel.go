package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelGroup is a master, its replicas and three Sentinels monitoring
// the master under Name, started by StartSentinel.
type SentinelGroup struct {
	Name      string
	Master    *Server   // the master at start
	Replica   *Server   // its first replica at start
	Replicas  []*Server // all its replicas at start, Replica first
	Sentinels []*Server
}

// sentinelDownAfter is how long a master must not answer before the
// Sentinels consider it down: short, so a failover takes a few seconds.
const sentinelDownAfter = "1000"

// StartSentinel starts a master, a replica of it, and three Sentinels
// (redis-server --sentinel, each with its own config file) monitoring the
// master as name with quorum 2, then waits until the replica's link is up
// and every Sentinel knows the replica and the other two Sentinels.
func StartSentinel(tb testing.TB, name string) *SentinelGroup {
	tb.Helper()
	return StartSentinelReplicas(tb, name, 1)
}

// StartSentinelReplicas is StartSentinel with replicas replicas (0: none,
// and Replica is nil).
func StartSentinelReplicas(tb testing.TB, name string, replicas int) *SentinelGroup {
	tb.Helper()
	g := &SentinelGroup{Name: name}
	g.Master = Start(tb, "--repl-diskless-sync-delay", "0")
	for range replicas {
		r := Start(tb, "--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port), "--repl-diskless-sync-delay", "0")
		g.Replicas = append(g.Replicas, r)
		waitUntil(tb, "replica link up", func() error {
			info, err := r.Exec("INFO", "replication")
			if err != nil {
				return err
			}
			if v, _ := infoField(info, replicaLinkPrefix); v != "up" {
				return fmt.Errorf("master_link_status:%s", v)
			}
			return nil
		})
	}
	if replicas > 0 {
		g.Replica = g.Replicas[0]
	}
	for range 3 {
		conf := func(dir string) string {
			path := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
				"sentinel down-after-milliseconds %s %s\n"+
				"sentinel failover-timeout %s 10000\n"+
				"sentinel parallel-syncs %s 1\n", name, g.Master.Port, name, sentinelDownAfter, name, name)
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				tb.Fatalf("redistest: writing %s: %v", path, err)
			}
			return path
		}
		g.Sentinels = append(g.Sentinels, start(tb, conf, func() []string { return []string{"--sentinel"} }))
	}
	waitUntil(tb, "sentinels know the replica and each other", func() error {
		for _, s := range g.Sentinels {
			r, err := s.Exec("SENTINEL", "MASTER", name)
			if err != nil {
				return err
			}
			text := string(r)
			slaves := strconv.Itoa(replicas)
			for _, want := range []string{"num-slaves\r\n$" + strconv.Itoa(len(slaves)) + "\r\n" + slaves + "\r\n", "num-other-sentinels\r\n$1\r\n2\r\n"} {
				if !strings.Contains(text, want) {
					return fmt.Errorf("%s: SENTINEL MASTER %s lacks %q", s.Addr, name, strings.TrimSpace(want))
				}
			}
		}
		return nil
	})
	return g
}

// Addrs returns the Sentinels' addresses.
func (g *SentinelGroup) Addrs() []string {
	out := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		out[i] = s.Addr
	}
	return out
}

// IsMaster reports whether s answers ROLE as a master.
func IsMaster(s *Server) bool {
	r, err := s.Exec("ROLE")
	return err == nil && strings.HasPrefix(string(r), "*3\r\n$6\r\nmaster\r\n")
}

// waitUntil polls cond until it returns nil, failing tb after clusterWait.
func waitUntil(tb testing.TB, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(clusterWait)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: not reached within %v: %v", what, clusterWait, err)
		}
		time.Sleep(clusterPoll)
	}
}
