// Package tier keeps package hotkey's local tier coherent with Redis: it
// is the engine behind hotkeys.tier. It needs no client session, so it
// lives apart from package proxy, which calls it on the request path.
//
// The tier is filled through one RESP3 connection with CLIENT TRACKING ON
// (default mode; on a cluster, one per master), so Redis remembers only
// the keys rproxy cached and pushes their invalidations on that same
// connection, in order with the fill replies: an invalidation that Redis
// sent before a fill's reply is seen before it. The caller invalidates a
// write's keys before it is sent (Invalidate) and again when Redis
// acknowledged it (Written), so a fill racing the write cannot outlive
// it; writes whose keys are not known (scripts, EXEC, modules) and lock
// acquisitions (LockAcquire) wait for Barrier: a PING on the tracking
// connection, whose reply follows every invalidation the write caused.
// While the tracking connection is down, or its probe (or a fill) comes
// back later than Config.MaxLag, the tier is emptied and does not serve.
// The probe runs only while the tier is on and holds or fills something,
// and after a stop of a tier that did, until it serves again (a tier
// that stops while empty serves again with its connection, and its
// first fill counts as a probe): an idle rproxy, or one whose tier is
// off by configuration, sends Redis no PINGs (probeLoop).
//
// Besides GET, the tier holds the replies of the read-only single-key
// commands that Cacheable accepts. Keys invalidated too often are not
// stored (Config.Churn), and the miss gate (MissGate) collapses readers
// of a missing hot key.
//
// Metrics, on Deps.Registry, namespace rproxy, subsystem hotkey:
// tier_fills_total, tier_fills_refused_total, tier_fills_write_hot_total,
// tracking_invalidations_total, tracking_barriers_total, tier_serving,
// tier_stops_total and tracking_probe_seconds, besides package hotkey's.
package tier
