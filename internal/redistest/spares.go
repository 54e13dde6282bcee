package redistest

import (
	"os"
	"sync"
	"testing"
)

// maxSpares bounds the cluster nodes a test binary keeps started ahead:
// the largest cluster of the default arguments its tests start at once
// (three masters with a replica each).
const maxSpares = 6

// spares is the test binary's cluster nodes started ahead of the
// StartCluster calls that take them. Redis Cluster holds a new master's
// state at fail for 2 s after the process starts (CLUSTER_WRITABLE_DELAY),
// so a cluster of nodes started on demand is up 2 s later at the earliest;
// spares are started while the previous test runs. Unused spares die with
// the test binary (Pdeathsig, see launch); their directories stay in the
// temporary directory.
var spares spareNodes

// spareNodes is a pool of started cluster nodes with the default
// arguments (clusterNodeArgs), not yet part of any cluster.
type spareNodes struct {
	mu       sync.Mutex
	ready    []*ClusterNode
	starting int
}

// take returns up to n spare nodes, now tb's: stopped and removed when it
// ends.
func (sp *spareNodes) take(tb testing.TB, n int) []*ClusterNode {
	sp.mu.Lock()
	k := min(n, len(sp.ready))
	nodes := append([]*ClusterNode(nil), sp.ready[:k]...)
	sp.ready = sp.ready[k:]
	sp.mu.Unlock()
	for _, node := range nodes {
		s := node.Server
		tb.Cleanup(func() {
			s.Stop()
			os.RemoveAll(s.Dir)
		})
	}
	return nodes
}

// refill starts, in the background, nodes until n (at most maxSpares) are
// ready or starting. A node that fails to start is not retried: the next
// StartCluster starts what it lacks itself.
func (sp *spareNodes) refill(n int) {
	sp.mu.Lock()
	missing := min(n, maxSpares) - len(sp.ready) - sp.starting
	if missing <= 0 {
		sp.mu.Unlock()
		return
	}
	sp.starting += missing
	sp.mu.Unlock()
	for range missing {
		go func() {
			node := startSpare()
			sp.mu.Lock()
			defer sp.mu.Unlock()
			sp.starting--
			if node != nil {
				sp.ready = append(sp.ready, node)
			}
		}()
	}
}

// startSpare starts one cluster node outside any test (nil if it fails).
func startSpare() *ClusterNode {
	bin, err := lookBinary("redis-server")
	if err != nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "redistest-spare-")
	if err != nil {
		return nil
	}
	for range startRetries {
		bus, err := freePort()
		if err != nil {
			break
		}
		port, err := freePort()
		if err != nil {
			break
		}
		s := newServer(bin, dir, clusterNodeArgs(bus))
		if p, err := s.launchAndWait(port); err == nil {
			s.setProcess(port, p)
			return &ClusterNode{Server: s, BusPort: bus}
		}
	}
	os.RemoveAll(dir)
	return nil
}
