package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/resp"
)

// NumSlots is the number of hash slots in a Redis Cluster.
const NumSlots = 16384

const (
	// clusterNodeTimeout is short so that failure detection and failover
	// take a couple of seconds; pass "--cluster-node-timeout" to
	// StartCluster to override it.
	clusterNodeTimeout = "1000"
	clusterWait        = 30 * time.Second              // budget of every cluster-wide wait
	clusterPoll        = 20 * time.Millisecond         // poll interval of those waits
	clusterIOTimeout   = 2 * time.Second               // per-command deadline while polling
	migrateBatch       = 100                           // keys per GETKEYSINSLOT/MIGRATE round
	migrateTimeout     = "5000"                        // MIGRATE's own timeout, in ms
	replicaLinkPrefix  = "master_link_status:"         // INFO replication field
	clusterStatePrefix = "cluster_state:"              // CLUSTER INFO field
	announcedIP        = "127.0.0.1"                   // every node binds here (see Server.args)
	badPeerFlags       = "fail,fail?,handshake,noaddr" // flags a healthy peer must not carry
)

// Cluster is a Redis Cluster of redis-server processes started by
// StartCluster. Its methods must be called from the test's goroutine.
type Cluster struct {
	// Nodes holds every node: the masters first, then the replicas grouped
	// by master, in the order StartCluster created them. Killed nodes stay
	// in the list.
	Nodes []*ClusterNode

	args     []string                       // extra node arguments given to StartCluster
	nodeArgs func(testing.TB, int) []string // more, made for each node (StartClusterWith)
	busPort  func(testing.TB) int           // picks a bus port; FreePort when nil
}

// ClusterNode is one node of a Cluster. The embedded *Server gives its
// address and the Do/Exec/Kill/Pause/... helpers.
type ClusterNode struct {
	*Server
	ID      string // cluster node id (CLUSTER MYID)
	BusPort int    // cluster bus port (--cluster-port)

	// Master is the node this one replicates, nil for a master. It is the
	// node's own view as of the last StartCluster, WaitStable, Failover or
	// MigrateSlot; a killed master that lost a failover points at its
	// successor, since that is what it becomes when restarted.
	Master *ClusterNode
}

// IsMaster reports whether the node was a master at the last refresh (see
// ClusterNode.Master).
func (n *ClusterNode) IsMaster() bool { return n.Master == nil }

// running reports whether the node's process is up (not killed or stopped).
func (n *ClusterNode) running() bool { return n.Pid() != 0 }

func (n *ClusterNode) String() string {
	role := "master"
	if n.Master != nil {
		role = "replica of " + n.Master.Addr
	}
	return fmt.Sprintf("%s (%s, %s)", n.Addr, shortID(n.ID), role)
}

// StartCluster starts masters*(1+replicasPerMaster) cluster-enabled
// redis-servers, spreads the 16384 slots evenly over the masters, attaches
// replicasPerMaster replicas to each master and waits until every node
// reports cluster_state:ok, all nodes agree on the slot map and every
// replica's link to its master is up. Extra args are appended to every
// node's command line and override the defaults (e.g.
// "--cluster-node-timeout", "5000"). Cleanup goes through Start's.
//
// A master cannot report cluster_state:ok until 2 s after it started
// (Redis's CLUSTER_WRITABLE_DELAY), so startup takes at least that long.
func StartCluster(tb testing.TB, masters, replicasPerMaster int, args ...string) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, masters, replicasPerMaster, nil, args...)
}

// TLSNodes is a nodeArgs for StartClusterWith: a cluster serving TLS to
// clients and on its bus, whose node i (in start order; ips and certNames
// give one entry per node it starts) is announced at ips[i] and serves a
// certificate for certNames[i] alone (tlstest.Certs.ClusterNodeArgs).
func TLSNodes(certs *tlstest.Certs, ips, certNames []string) func(testing.TB, int) []string {
	return func(tb testing.TB, i int) []string {
		return certs.ClusterNodeArgs(tb, FreePort(tb), certNames[i], ips[i])
	}
}

// StartClusterWith is StartCluster with nodeArgs, if not nil, called for
// each node (those AddMaster starts too) for arguments of its own, such
// as a TLS port (--tls-port). It is given the node's index in start order
// and called again for the same node when a start attempt met a taken
// port, so it must pick its ports afresh on each call.
func StartClusterWith(tb testing.TB, masters, replicasPerMaster int, nodeArgs func(testing.TB, int) []string, args ...string) *Cluster {
	tb.Helper()
	if masters < 1 || replicasPerMaster < 0 {
		tb.Fatalf("redistest: StartCluster(%d masters, %d replicas per master): need at least one master", masters, replicasPerMaster)
	}
	c := &Cluster{args: args, nodeArgs: nodeArgs}
	total := masters * (1 + replicasPerMaster)
	if nodeArgs == nil && len(args) == 0 {
		// Nodes of the default arguments started ahead (spareNodes): a
		// new master waits 2 s after its start before it declares the
		// cluster up, which a spare has usually spent already.
		c.Nodes = spares.take(tb, total)
		spares.refill(total)
	}
	for len(c.Nodes) < total {
		c.Nodes = append(c.Nodes, c.startNode(tb))
	}
	// Run before the nodes stop: what the nodes saw (a state change, a
	// failure report) explains many a failure of a test under load.
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("redistest: the cluster's logs at the failure:\n%s", c.logTails())
		}
	})
	for _, n := range c.Nodes {
		c.readIdentity(tb, n)
	}

	// Slots, and a distinct config epoch for every node, replicas-to-be
	// included, before the nodes meet, as redis-cli --cluster create
	// does. Nodes that meet as masters with equal epochs (the replicas'
	// 0 among them) run the epoch-collision protocol, one bump at a
	// time; a bump of a slot owner's epoch that its replica has not
	// seen when the owner dies makes every vote for that replica fail
	// ("slot epoch > reqEpoch"), and the failover never happens.
	for i, n := range c.Nodes {
		if i < masters {
			first, last := i*NumSlots/masters, (i+1)*NumSlots/masters-1
			c.mustOK(tb, n, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last))
		}
		c.mustOK(tb, n, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
	}
	// Every pair meets directly: a full mesh at once, instead of waiting
	// for gossip to introduce the nodes to each other.
	for i, a := range c.Nodes {
		for _, b := range c.Nodes[i+1:] {
			c.mustOK(tb, a, "CLUSTER", "MEET", announcedIP, strconv.Itoa(b.Port), strconv.Itoa(b.BusPort))
		}
	}
	// CLUSTER REPLICATE needs the master to be known (handshake done).
	c.waitFor(tb, "all nodes know each other", func() error {
		for _, n := range c.Nodes {
			peers, _, _, err := c.clusterNodes(n)
			if err != nil {
				return err
			}
			for _, o := range c.Nodes {
				if o == n {
					continue
				}
				if flags, ok := peers[o.ID]; !ok || hasFlag(flags, "handshake,noaddr") {
					return fmt.Errorf("%s does not know %s yet", n, o)
				}
			}
		}
		return nil
	})
	for i := 0; i < masters; i++ {
		for j := 0; j < replicasPerMaster; j++ {
			r := c.Nodes[masters+i*replicasPerMaster+j]
			r.Master = c.Nodes[i]
			c.mustOK(tb, r, "CLUSTER", "REPLICATE", r.Master.ID)
		}
	}
	c.waitStable(tb, "cluster start", true, func(views []nodeView) error {
		// No epoch was bumped, and every node knows every master's.
		for _, v := range views {
			if v.currentEpoch != strconv.Itoa(total) {
				return fmt.Errorf("%s: cluster_current_epoch:%s, want %d", v.node, v.currentEpoch, total)
			}
		}
		if err := epochsSettled(views); err != nil {
			return err
		}
		// The agreed map must also be the one we built.
		slots := views[0].slots
		if len(slots) != masters {
			return fmt.Errorf("%d slot ranges, want %d: %v", len(slots), masters, slots)
		}
		for i, r := range slots {
			m := c.Nodes[i]
			var want []string
			for _, n := range c.Nodes[masters:] {
				if n.Master == m {
					want = append(want, n.ID)
				}
			}
			slices.Sort(want)
			if r.start != i*NumSlots/masters || r.end != (i+1)*NumSlots/masters-1 || r.master != m.ID || !slices.Equal(r.replicas, want) {
				return fmt.Errorf("unexpected slot range %v for master %s", r, m)
			}
		}
		return nil
	})
	return c
}

// Masters returns the running nodes that are masters (see
// ClusterNode.Master), in Nodes order.
func (c *Cluster) Masters() []*ClusterNode {
	var out []*ClusterNode
	for _, n := range c.Nodes {
		if n.running() && n.Master == nil {
			out = append(out, n)
		}
	}
	return out
}

// Replicas returns the running nodes that are replicas, in Nodes order.
func (c *Cluster) Replicas() []*ClusterNode {
	var out []*ClusterNode
	for _, n := range c.Nodes {
		if n.running() && n.Master != nil {
			out = append(out, n)
		}
	}
	return out
}

// Seeds returns the addresses of all nodes, running or not, in Nodes order:
// the seed list a cluster client is configured with.
func (c *Cluster) Seeds() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Slot returns the hash slot of key, as CLUSTER KEYSLOT computes it.
func (c *Cluster) Slot(key string) int { return keySlot(key) }

// keySlot is CRC16-XMODEM of the key's hash tag, or of the whole key when
// it has no non-empty tag, mod 16384. The tag is the text between the first
// '{' and the first '}' after it.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(CRC16(key) % NumSlots)
}

// CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the variant
// Redis Cluster uses, computed bit by bit: the reference that faster
// implementations are tested against.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// MasterForSlot returns the master that serves slot according to a live
// CLUSTER SLOTS query (of the first running node that answers).
func (c *Cluster) MasterForSlot(tb testing.TB, slot int) *ClusterNode {
	tb.Helper()
	var errs []error
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		slots, err := c.clusterSlots(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id := ownerOf(slots, slot)
		if id == "" {
			tb.Fatalf("redistest: slot %d is not served according to %s: %v", slot, n, slots)
		}
		owner := c.byID(id)
		if owner == nil {
			tb.Fatalf("redistest: slot %d is served by unknown node %s according to %s", slot, id, n)
		}
		return owner
	}
	tb.Fatalf("redistest: no running node answered CLUSTER SLOTS: %v", errors.Join(errs...))
	return nil
}

// WaitStable waits until every running node reports cluster_state:ok, they
// all agree on the slot map and on each other's health, and every running
// replica of a running master has its replication link up. Killed nodes are
// ignored. It then refreshes ClusterNode.Master from the nodes' own views.
func (c *Cluster) WaitStable(tb testing.TB) {
	tb.Helper()
	c.waitStable(tb, "stable cluster", true, nil)
}

// MigrateSlot moves slot, with its keys, from its current master to the
// master to, as redis-cli --cluster reshard does, and waits until every
// running node agrees on the new owner. It expects a healthy cluster.
func (c *Cluster) MigrateSlot(tb testing.TB, slot int, to *ClusterNode) {
	tb.Helper()
	c.BeginMigration(tb, slot, to).Finish(tb)
}

// Migration is a slot migration in progress (see BeginMigration). While it
// lasts, the source answers -ASK for keys of the slot it no longer holds
// and the target serves them only after ASKING.
type Migration struct {
	Slot     int
	From, To *ClusterNode

	c        *Cluster
	finished bool
}

// BeginMigration marks slot IMPORTING on to and MIGRATING on its current
// master, in that order (the source must not send -ASK before the target
// accepts ASKING), and moves no keys yet.
func (c *Cluster) BeginMigration(tb testing.TB, slot int, to *ClusterNode) *Migration {
	tb.Helper()
	if slot < 0 || slot >= NumSlots {
		tb.Fatalf("redistest: BeginMigration: slot %d out of range", slot)
	}
	if !to.IsMaster() {
		tb.Fatalf("redistest: BeginMigration: target %s is not a master", to)
	}
	from := c.MasterForSlot(tb, slot)
	if from == to {
		tb.Fatalf("redistest: BeginMigration: slot %d is already served by %s", slot, to)
	}
	s := strconv.Itoa(slot)
	c.mustOK(tb, to, "CLUSTER", "SETSLOT", s, "IMPORTING", from.ID)
	c.mustOK(tb, from, "CLUSTER", "SETSLOT", s, "MIGRATING", to.ID)
	return &Migration{Slot: slot, From: from, To: to, c: c}
}

// MoveKeys moves up to n keys of the slot (all of them if n <= 0) from the
// source to the target with GETKEYSINSLOT + MIGRATE ... KEYS, in batches,
// and returns how many keys it handed to MIGRATE. It returns 0 once the
// source holds no keys of the slot.
func (m *Migration) MoveKeys(tb testing.TB, n int) (moved int) {
	tb.Helper()
	if m.finished {
		tb.Fatalf("redistest: MoveKeys after Finish (slot %d)", m.Slot)
	}
	for n <= 0 || moved < n {
		count := migrateBatch
		if n > 0 {
			count = min(count, n-moved)
		}
		v := m.c.mustQuery(tb, m.From, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.Slot), strconv.Itoa(count))
		if len(v.Elems) == 0 {
			break
		}
		cmd := []string{"MIGRATE", announcedIP, strconv.Itoa(m.To.Port), "", "0", migrateTimeout, "KEYS"}
		for _, k := range v.Elems {
			cmd = append(cmd, string(k.Str))
		}
		// +NOKEY (the keys expired meanwhile) is fine too.
		m.c.mustQuery(tb, m.From, cmd...)
		moved += len(v.Elems)
	}
	return moved
}

// Finish moves the remaining keys, assigns the slot to the target with
// CLUSTER SETSLOT NODE on the target first (which bumps its config epoch so
// its claim wins), then the source, then the other masters, and waits until
// every running node agrees on the new owner and on every master's
// configEpoch (epochsSettled), so the next migration starts clean.
func (m *Migration) Finish(tb testing.TB) {
	tb.Helper()
	m.MoveKeys(tb, 0)
	m.finished = true
	s := strconv.Itoa(m.Slot)
	m.c.mustOK(tb, m.To, "CLUSTER", "SETSLOT", s, "NODE", m.To.ID)
	targets := []*ClusterNode{m.From} // the source, then the other masters
	for _, n := range m.c.Masters() {
		if n != m.To && n != m.From {
			targets = append(targets, n)
		}
	}
	for _, n := range targets {
		// The source (once this was its last slot) or another master
		// emptied meanwhile may have become a replica of the master that
		// took its slot (cluster-allow-replica-migration, on by default):
		// it follows its master's view.
		if _, err := m.c.query(n, "CLUSTER", "SETSLOT", s, "NODE", m.To.ID); err != nil && !strings.Contains(err.Error(), "only with masters") {
			tb.Fatalf("redistest: %v", err)
		}
	}
	m.c.waitStable(tb, fmt.Sprintf("slot %d owned by %s everywhere", m.Slot, m.To), false, func(views []nodeView) error {
		if id := ownerOf(views[0].slots, m.Slot); id != m.To.ID {
			return fmt.Errorf("slot %d owned by %s, want %s", m.Slot, id, m.To.ID)
		}
		return epochsSettled(views)
	})
}

// Failover kills master with SIGKILL and waits until one of its replicas
// has been promoted and every surviving node reports cluster_state:ok with
// the promoted node serving the dead master's slots. It returns the
// promoted node and the time from the kill to that point. Replicas are not
// required to have resynced; call WaitStable for that.
func (c *Cluster) Failover(tb testing.TB, master *ClusterNode) (*ClusterNode, time.Duration) {
	tb.Helper()
	if !master.running() || !master.IsMaster() {
		tb.Fatalf("redistest: Failover: %s is not a running master", master)
	}
	var candidates []*ClusterNode
	for _, n := range c.Replicas() {
		if n.Master == master {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		tb.Fatalf("redistest: Failover: master %s has no running replica", master)
	}
	// A replica asks for votes with its master's configEpoch as it sees
	// it; one that missed a bump is refused by every voter, for good
	// once the master is dead.
	c.waitStable(tb, fmt.Sprintf("epochs agreed before the failover of %s", master), false, func(views []nodeView) error {
		return epochsSettled(views)
	})
	slots, err := c.clusterSlots(master)
	if err != nil {
		tb.Fatalf("redistest: Failover: CLUSTER SLOTS on %s: %v", master, err)
	}
	var owned []slotRange
	for _, r := range slots {
		if r.master == master.ID {
			owned = append(owned, r)
		}
	}
	if len(owned) == 0 {
		tb.Fatalf("redistest: Failover: master %s serves no slots", master)
	}

	start := time.Now()
	master.Kill()
	var promoted *ClusterNode
	c.waitStable(tb, fmt.Sprintf("failover of %s", master), false, func(views []nodeView) error {
		id := ownerOf(views[0].slots, owned[0].start)
		promoted = nil
		for _, n := range candidates {
			if n.ID == id {
				promoted = n
			}
		}
		if promoted == nil {
			return fmt.Errorf("slot %d still served by %s", owned[0].start, id)
		}
		for _, r := range owned {
			if !servesRange(views[0].slots, r.start, r.end, id) {
				return fmt.Errorf("slots %d-%d not all served by %s", r.start, r.end, promoted)
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	master.Master = promoted // what it becomes if restarted
	return promoted, elapsed
}

// nodeView is one running node's view of the cluster.
type nodeView struct {
	node  *ClusterNode
	state string // cluster_state from CLUSTER INFO
	// slotCounts is CLUSTER INFO's slot counters (assigned, ok, pfail,
	// fail), for the message of a node not "ok".
	slotCounts   string
	currentEpoch string            // cluster_current_epoch from CLUSTER INFO
	slots        []slotRange       // CLUSTER SLOTS, canonical
	peers        map[string]string // node id -> flags, from CLUSTER NODES, without myself
	master       string            // id of the node it replicates (own view), "" for a master
	linkUp       bool              // master_link_status:up (replicas only)
	// masterEpochs is the configEpoch of each master, itself included, as
	// this node sees them.
	masterEpochs map[string]string
}

// slotRange is one entry of CLUSTER SLOTS, reduced to node ids. Replicas
// are sorted: their order in the reply is the order the node learned them.
type slotRange struct {
	start, end int
	master     string
	replicas   []string
}

func (r slotRange) String() string {
	reps := make([]string, len(r.replicas))
	for i, id := range r.replicas {
		reps[i] = shortID(id)
	}
	return fmt.Sprintf("%d-%d:%s%v", r.start, r.end, shortID(r.master), reps)
}

func (r slotRange) equal(o slotRange) bool {
	return r.start == o.start && r.end == o.end && r.master == o.master && slices.Equal(r.replicas, o.replicas)
}

// servesRange reports whether id serves every slot of first..last.
func servesRange(slots []slotRange, first, last int, id string) bool {
	for _, r := range slots {
		if r.end >= first && r.start <= last && r.master != id {
			return false
		}
	}
	return ownerOf(slots, first) == id && ownerOf(slots, last) == id
}

func ownerOf(slots []slotRange, slot int) string {
	for _, r := range slots {
		if r.start <= slot && slot <= r.end {
			return r.master
		}
	}
	return ""
}

// waitStable polls the running nodes until the checks of WaitStable pass
// (replica links only if links is set) and extra, if any, accepts the
// agreed views, then refreshes ClusterNode.Master. It fails tb with the
// last reason and the nodes' log tails after clusterWait.
func (c *Cluster) waitStable(tb testing.TB, what string, links bool, extra func([]nodeView) error) {
	tb.Helper()
	var views []nodeView
	c.waitFor(tb, what, func() error {
		var err error
		if views, err = c.observe(); err != nil {
			return err
		}
		if err := c.checkStable(views, links); err != nil {
			return err
		}
		if extra != nil {
			return extra(views)
		}
		return nil
	})
	for _, v := range views {
		v.node.Master = c.byID(v.master)
	}
}

// waitFor polls cond until it returns nil, or fails tb after clusterWait.
func (c *Cluster) waitFor(tb testing.TB, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(clusterWait)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: not reached within %v: %v\n%s", what, clusterWait, err, c.logTails())
		}
		time.Sleep(clusterPoll)
	}
}

// observe collects the view of every running node.
func (c *Cluster) observe() ([]nodeView, error) {
	var views []nodeView
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		v := nodeView{node: n}
		info, err := c.query(n, "CLUSTER", "INFO")
		if err != nil {
			return nil, err
		}
		v.state, _ = infoField(info.Str, clusterStatePrefix)
		v.currentEpoch, _ = infoField(info.Str, "cluster_current_epoch:")
		for _, f := range []string{"assigned", "ok", "pfail", "fail"} {
			n, _ := infoField(info.Str, "cluster_slots_"+f+":")
			v.slotCounts += " slots_" + f + ":" + n
		}
		if v.slots, err = c.clusterSlots(n); err != nil {
			return nil, err
		}
		if v.peers, v.master, v.masterEpochs, err = c.clusterNodes(n); err != nil {
			return nil, err
		}
		if v.master != "" {
			info, err := c.query(n, "INFO", "replication")
			if err != nil {
				return nil, err
			}
			status, _ := infoField(info.Str, replicaLinkPrefix)
			v.linkUp = status == "up"
		}
		views = append(views, v)
	}
	if len(views) == 0 {
		return nil, errors.New("no node is running")
	}
	return views, nil
}

// checkStable checks that the running nodes' views agree and are healthy.
func (c *Cluster) checkStable(views []nodeView, links bool) error {
	running := make(map[string]bool, len(views))
	for _, v := range views {
		running[v.node.ID] = true
	}
	ref := views[0]
	for _, v := range views {
		if v.state != "ok" {
			// What the node sees of the others says why: a peer flagged
			// fail? or fail (unreachable for cluster-node-timeout), or
			// slots it finds unassigned.
			peers := make([]string, 0, len(v.peers))
			for id, flags := range v.peers {
				peers = append(peers, id[:min(8, len(id))]+":"+flags)
			}
			slices.Sort(peers)
			return fmt.Errorf("%s: cluster_state:%s (%s; its peers: %s)", v.node, v.state, strings.TrimSpace(v.slotCounts), strings.Join(peers, " "))
		}
		if !slices.EqualFunc(v.slots, ref.slots, slotRange.equal) {
			return fmt.Errorf("slot maps differ: %s has %v, %s has %v", ref.node, ref.slots, v.node, v.slots)
		}
		for _, o := range views {
			if o.node == v.node {
				continue
			}
			flags, ok := v.peers[o.node.ID]
			if !ok {
				return fmt.Errorf("%s does not know %s", v.node, o.node)
			}
			if hasFlag(flags, badPeerFlags) {
				return fmt.Errorf("%s sees %s as %s", v.node, o.node, flags)
			}
		}
		if v.master == "" || !running[v.master] {
			continue
		}
		if links && !v.linkUp {
			return fmt.Errorf("%s: replication link down", v.node)
		}
		// A replica whose master serves slots must be listed under it.
		for _, r := range ref.slots {
			if r.master == v.master && !slices.Contains(r.replicas, v.node.ID) {
				return fmt.Errorf("%s not yet listed as a replica in %v", v.node, ref.slots)
			}
		}
	}
	return nil
}

// clusterSlots queries CLUSTER SLOTS on n. Each entry is
// [start, end, master, replicas...], each node [ip, port, id, metadata].
func (c *Cluster) clusterSlots(n *ClusterNode) ([]slotRange, error) {
	v, err := c.query(n, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	var out []slotRange
	for _, e := range v.Elems {
		if len(e.Elems) < 3 {
			return nil, fmt.Errorf("%s: malformed CLUSTER SLOTS entry", n.Addr)
		}
		r := slotRange{start: int(e.Elems[0].Int), end: int(e.Elems[1].Int)}
		for i, node := range e.Elems[2:] {
			if len(node.Elems) < 3 {
				return nil, fmt.Errorf("%s: malformed CLUSTER SLOTS node entry", n.Addr)
			}
			if id := string(node.Elems[2].Str); i == 0 {
				r.master = id
			} else {
				r.replicas = append(r.replicas, id)
			}
		}
		slices.Sort(r.replicas)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b slotRange) int { return a.start - b.start })
	return out, nil
}

// clusterNodes queries CLUSTER NODES on n and returns the flags of every
// other node by id and the id of the master n itself replicates ("" for a
// master). Lines are "<id> <addr> <flags> <master-id|-> ...".
func (c *Cluster) clusterNodes(n *ClusterNode) (peers map[string]string, master string, masterEpochs map[string]string, err error) {
	v, err := c.query(n, "CLUSTER", "NODES")
	if err != nil {
		return nil, "", nil, err
	}
	peers, masterEpochs = make(map[string]string), make(map[string]string)
	for _, line := range strings.Split(strings.TrimSpace(string(v.Str)), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			return nil, "", nil, fmt.Errorf("%s: malformed CLUSTER NODES line %q", n.Addr, line)
		}
		if hasFlag(f[2], "master") {
			masterEpochs[f[0]] = f[6]
		}
		if hasFlag(f[2], "myself") {
			if hasFlag(f[2], "slave") && f[3] != "-" {
				master = f[3]
			}
			continue
		}
		peers[f[0]] = f[2]
	}
	return peers, master, masterEpochs, nil
}

// epochsSettled checks that every node sees the same configEpoch for every
// master, and that no two masters share one. Redis 7.0 can lose a slot's
// ownership when a migration begins while an earlier one's epoch bump is
// still spreading or colliding (fixed in Redis 7.2, redis/redis#12344):
// the slot maps then never agree again, and two masters take writes for
// the slot. Migrations wait for this between them.
func epochsSettled(views []nodeView) error {
	ref := views[0]
	seen := make(map[string]string, len(ref.masterEpochs))
	for id, e := range ref.masterEpochs {
		if other, ok := seen[e]; ok {
			return fmt.Errorf("masters %s and %s share configEpoch %s", id, other, e)
		}
		seen[e] = id
	}
	for _, v := range views[1:] {
		if !maps.Equal(v.masterEpochs, ref.masterEpochs) {
			return fmt.Errorf("masters' configEpochs differ: %s sees %v, %s sees %v", ref.node, ref.masterEpochs, v.node, v.masterEpochs)
		}
	}
	return nil
}

// hasFlag reports whether the comma-separated flags contain any of the
// comma-separated wanted ones.
func hasFlag(flags, wanted string) bool {
	have := strings.Split(flags, ",")
	for _, w := range strings.Split(wanted, ",") {
		if slices.Contains(have, w) {
			return true
		}
	}
	return false
}

// infoField returns the value of "prefix<value>" in an INFO-style reply.
func infoField(info []byte, prefix string) (string, bool) {
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			return v, true
		}
	}
	return "", false
}

func (c *Cluster) byID(id string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// query runs one command on n with a short deadline (a paused node must
// not stall a poll for long) and decodes the reply; an error reply is
// returned as an error.
func (c *Cluster) query(n *ClusterNode, args ...string) (resp.Value, error) {
	raw, err := execRaw(n.Addr, clusterIOTimeout, args...)
	if err != nil {
		return resp.Value{}, fmt.Errorf("%s %q: %w", n.Addr, args, err)
	}
	v, err := resp.Parse(raw)
	if err != nil {
		return resp.Value{}, fmt.Errorf("%s %q: %w", n.Addr, args, err)
	}
	if v.Kind == '-' || v.Kind == '!' {
		return resp.Value{}, fmt.Errorf("%s %q: %s", n.Addr, args, v.Str)
	}
	return v, nil
}

func (c *Cluster) mustQuery(tb testing.TB, n *ClusterNode, args ...string) resp.Value {
	tb.Helper()
	v, err := c.query(n, args...)
	if err != nil {
		tb.Fatalf("redistest: %v\n%s", err, n.logTail())
	}
	return v
}

func (c *Cluster) mustOK(tb testing.TB, n *ClusterNode, args ...string) {
	tb.Helper()
	if v := c.mustQuery(tb, n, args...); v.Kind != '+' || string(v.Str) != "OK" {
		tb.Fatalf("redistest: %s %q: got %q, want OK", n.Addr, args, v.Str)
	}
}

// logTails returns the log tails of all nodes, for failure messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for i, n := range c.Nodes {
		state := "running"
		if !n.running() {
			state = "not running"
		}
		fmt.Fprintf(&b, "=== node %d: %s, %s ===\n%s", i, n, state, n.logTail())
	}
	return b.String()
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// execMulti sends cmds over one connection (for ASKING/READONLY, which only
// affect the connection they are sent on) and returns the raw replies.
func execMulti(addr string, cmds ...[]string) ([][]byte, error) {
	conn, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return nil, err
	}
	var req []byte
	for _, c := range cmds {
		req = resp.AppendCommandString(req, c...)
	}
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	out := make([][]byte, len(cmds))
	for i := range cmds {
		if out[i], err = resp.ReadReply(r, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// startNode starts one cluster-enabled redis-server with the cluster's
// arguments (not yet part of the cluster).
func (c *Cluster) startNode(tb testing.TB) *ClusterNode {
	tb.Helper()
	// An explicit bus port (Redis 7) instead of the default port+10000,
	// which does not exist for ports above 55535 and is not checked for
	// being free. It is picked again on every attempt of start's: a bus
	// port taken since it was picked fails the start like a taken client
	// port does.
	pick := c.busPort
	if pick == nil {
		pick = FreePort
	}
	index := len(c.Nodes)
	var bus int
	s := start(tb, func(string) string { return "" }, func() []string {
		bus = pick(tb)
		args := append(clusterNodeArgs(bus), c.args...)
		if c.nodeArgs != nil {
			args = append(args, c.nodeArgs(tb, index)...)
		}
		return args
	})
	return &ClusterNode{Server: s, BusPort: bus}
}

// clusterNodeArgs are a cluster node's arguments, its bus port bus.
func clusterNodeArgs(bus int) []string {
	return []string{
		"--cluster-enabled", "yes",
		// Relative to --dir, i.e. <Server.Dir>/nodes.conf, which is
		// not known before Start; it survives Restart, so a restarted
		// node rejoins the cluster.
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", clusterNodeTimeout,
		"--cluster-port", strconv.Itoa(bus),
		// The default 5 s delay before a diskless full sync would
		// dominate the start-up of replicas.
		"--repl-diskless-sync-delay", "0",
		// CLUSTER SLOTS hides replicas whose replication offset is
		// still 0 (redis/redis#9287), and with no writes only the
		// master's replication PING moves it: every 10 s by default.
		"--repl-ping-replica-period", "1",
	}
}

// readIdentity reads n's node id and the bus port it actually uses (the
// cluster's args may have overridden ours).
func (c *Cluster) readIdentity(tb testing.TB, n *ClusterNode) {
	tb.Helper()
	n.ID = string(c.mustQuery(tb, n, "CLUSTER", "MYID").Str)
	cfg := c.mustQuery(tb, n, "CONFIG", "GET", "cluster-port")
	if len(cfg.Elems) == 2 {
		if p, err := strconv.Atoi(string(cfg.Elems[1].Str)); err == nil && p != 0 {
			n.BusPort = p
		}
	}
}

// AddMaster starts a new node, introduces it to every running node (as
// redis-cli --cluster add-node does) and waits until the cluster is stable
// with it as a master owning no slots. Give it slots with MigrateSlot.
func (c *Cluster) AddMaster(tb testing.TB) *ClusterNode {
	tb.Helper()
	n := c.startNode(tb)
	c.readIdentity(tb, n)
	for _, o := range c.Nodes {
		if o.running() {
			c.mustOK(tb, o, "CLUSTER", "MEET", announcedIP, strconv.Itoa(n.Port), strconv.Itoa(n.BusPort))
		}
	}
	c.Nodes = append(c.Nodes, n)
	c.waitStable(tb, fmt.Sprintf("%s joined", n), true, nil)
	return n
}

// RemoveNode takes n, a master that owns no slots, out of the cluster as
// redis-cli --cluster del-node does: every other running node forgets it
// (CLUSTER FORGET, within the minute its ban on gossip lasts), then it is
// shut down. It waits until the rest agree and are healthy.
func (c *Cluster) RemoveNode(tb testing.TB, n *ClusterNode) {
	tb.Helper()
	i := slices.Index(c.Nodes, n)
	if i < 0 {
		tb.Fatalf("redistest: RemoveNode: %s is not a node of the cluster", n)
	}
	c.Nodes = slices.Delete(c.Nodes, i, i+1)
	for _, o := range c.Nodes {
		if o.running() {
			c.mustOK(tb, o, "CLUSTER", "FORGET", n.ID)
		}
	}
	n.Stop()
	c.waitStable(tb, fmt.Sprintf("%s removed", n), true, func(views []nodeView) error {
		for _, v := range views {
			if _, ok := v.peers[n.ID]; ok {
				return fmt.Errorf("%s still knows %s", v.node, n)
			}
		}
		return nil
	})
}
