package tier

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/hotkey"
)

// TestTierNodeStateBeforeClusterKnown: a tracking connection of a cluster
// may come up (and report) before New has the cluster in hand; the
// report is kept, and the tier does not serve on it alone. (CI once caught
// this as a nil dereference in a cluster test.)
func TestTierNodeStateBeforeClusterKnown(t *testing.T) {
	tier, err := hotkey.NewTier(hotkey.DefaultTierConfig(), time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &Engine{tier: tier, nodeUp: map[string]bool{}, metrics: newTierMetrics(nil), log: zap.NewNop()}
	h.enabled.Store(true)
	h.lagOK = true
	h.onNodeState("127.0.0.1:7000", true)
	if h.connUp || tier.Serving() {
		t.Fatal("the tier serves before the tracking cluster is known")
	}
	if !h.nodeUp["127.0.0.1:7000"] {
		t.Fatal("the node's state was not kept for the later look")
	}
}

// TestTierLateFillStopsServing: a fill whose round trip on the tracking
// connection took longer than MaxLag counts as a late probe (the probe
// loop may have waited, idle, until that fill was queued), and one within
// it changes nothing.
func TestTierLateFillStopsServing(t *testing.T) {
	tier, err := hotkey.NewTier(hotkey.DefaultTierConfig(), time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &Engine{tier: tier, metrics: newTierMetrics(nil), log: zap.NewNop()}
	h.maxLag.Store(int64(100 * time.Millisecond))
	h.enabled.Store(true)
	h.mu.Lock()
	h.connUp, h.lagOK = true, true
	h.applyLocked()
	h.mu.Unlock()
	tok := tier.Begin([]byte("k"))
	h.noteFillRoundTrip(100 * time.Millisecond)
	if !tier.Serving() {
		t.Fatal("a fill within MaxLag stopped the tier")
	}
	h.noteFillRoundTrip(101 * time.Millisecond)
	if tier.Serving() || h.lagOK {
		t.Fatal("a fill later than MaxLag left the tier serving")
	}
	if tier.Put(tok, []byte("k"), 2, []byte("$1\r\nv\r\n"), 0) {
		t.Fatal("the late fill was stored")
	}
}
