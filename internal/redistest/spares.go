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
// spares are started while the previous test runs. A package whose tests
// start clusters runs them through Main, which stops the spares left and
// removes their directories; without it they die with the test binary
// (Pdeathsig, see launch) and their directories stay behind.
var spares spareNodes

// spareNodes is a pool of started cluster nodes with the default
// arguments (clusterNodeArgs), not yet part of any cluster.
type spareNodes struct {
	mu       sync.Mutex
	ready    []*ClusterNode
	starting int
	// done: Main has stopped the pool; a node still starting then is
	// stopped as it comes up. starts counts the starting goroutines.
	done   bool
	starts sync.WaitGroup
}

// Main runs m's tests and then stops the spare cluster nodes left and
// removes their directories; it returns m.Run's exit code. Call it from
// TestMain in a package whose tests call StartCluster:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	spares.stop()
	return code
}

// stop stops the pool: the ready nodes, and the starting ones once they
// are up (refill starts no more).
func (sp *spareNodes) stop() {
	sp.mu.Lock()
	ready := sp.ready
	sp.ready, sp.done = nil, true
	sp.mu.Unlock()
	for _, node := range ready {
		node.remove()
	}
	sp.starts.Wait()
}

// remove stops a spare node and removes its directory.
func (node *ClusterNode) remove() {
	node.Server.Stop()
	os.RemoveAll(node.Server.Dir)
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
		tb.Cleanup(node.remove)
	}
	return nodes
}

// refill starts, in the background, nodes until n (at most maxSpares) are
// ready or starting. A node that fails to start is not retried: the next
// StartCluster starts what it lacks itself.
func (sp *spareNodes) refill(n int) {
	sp.mu.Lock()
	missing := min(n, maxSpares) - len(sp.ready) - sp.starting
	if missing <= 0 || sp.done {
		sp.mu.Unlock()
		return
	}
	sp.starting += missing
	sp.starts.Add(missing)
	sp.mu.Unlock()
	for range missing {
		go func() {
			defer sp.starts.Done()
			node := startSpare()
			sp.mu.Lock()
			sp.starting--
			stopped := sp.done
			if node != nil && !stopped {
				sp.ready = append(sp.ready, node)
			}
			sp.mu.Unlock()
			if node != nil && stopped {
				node.remove()
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
