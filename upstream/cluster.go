package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/resp"
)

// ClusterConfig says where a Cluster finds its slot map and how it keeps it.
type ClusterConfig struct {
	// Seeds are node addresses (host:port) to read the slot map from
	// first; afterwards any known master serves.
	Seeds []string
	// Refresh is how often the slot map is read again when nothing asks
	// for it sooner; 0 means 10s. MOVED replies, unreachable masters and
	// CLUSTERDOWN replies ask for a refresh at once.
	Refresh time.Duration
	// MinRefreshGap bounds how often such requests read the map; 0 means
	// 100ms.
	MinRefreshGap time.Duration
	// MaxRedirects bounds the MOVED/ASK/TRYAGAIN/CLUSTERDOWN replies
	// followed for one command before the last one is passed to the
	// client; 0 means 5.
	MaxRedirects int
	// ReplicaReads sends READONLY on every connection and lets commands
	// marked ReplicaRead go to replicas.
	ReplicaReads bool
	// Protocols are the protocols each node gets a pool of (and a
	// Router); nil means 2 and 3.
	Protocols []int
	// OnNodeState, if set, is told when a node's connection (of any of its
	// pools) comes up or goes down, by node address. It replaces the base
	// Config's OnState, which cannot tell the nodes apart.
	OnNodeState func(addr string, up bool)
	// MapVia, if set, is the cluster whose connections read the slot map
	// for this one: a cluster of connections logged in as a client's own
	// user (passthrough auth), who may not be allowed CLUSTER SHARDS,
	// reads it as rproxy's upstream user does.
	MapVia *Cluster
}

// Cluster routes commands to the masters of a Redis Cluster by the hash
// slot of their key. It keeps a Pool per master and protocol, and a slot
// map read with CLUSTER SHARDS (CLUSTER SLOTS on servers before 7.0),
// corrected in place by MOVED replies and refreshed in the background.
// Each protocol is served by a Router.
type Cluster struct {
	base    Config // template of every node's pools; Address and Protocol are set per pool
	cfg     ClusterConfig
	metrics *Metrics
	log     *zap.Logger

	mu     sync.Mutex       // guards node creation and retirement
	byAddr map[string]int32 // live nodes only: a retired node's address is made anew
	// absent counts, per live node, the slot map reads in a row that left
	// it out (under mu); seeds holds the seed addresses, never retired.
	absent map[int32]int
	seeds  map[string]bool
	nodes  atomic.Pointer[[]*clusterNode] // append-only: an index names a node for good
	slots  [Slots]atomic.Int32            // index of the slot's master in nodes; -1: none
	shards atomic.Pointer[[]int]          // one slot of each master, for commands every master runs
	// replicas maps a master's node index to its replicas' (only read
	// with ClusterConfig.ReplicaReads).
	replicas atomic.Pointer[map[int32][]int32]
	loaded   atomic.Bool
	// firstRead is closed when the first slot map read has ended, loaded
	// or not (or the cluster is closed): AwaitMap's wait.
	firstRead     chan struct{}
	firstReadOnce sync.Once
	// version counts changes to the slot map (reads that changed it, MOVED
	// corrections), so users of Owner can tell when to look again.
	version atomic.Uint64
	// learned holds, for each slot a MOVED put on a node, the learnSeq of
	// that MOVED: a map read that began before it is older and leaves the
	// slot as the MOVED said (install).
	learnMu  sync.Mutex
	learned  map[int]uint64
	learnSeq atomic.Uint64
	// migrating: the slots an ASK was met for (migrating.go).
	migrating migratingSlots
	// hostnames: the hostname each node announces, by address, as the
	// last map read gave it (string values): a third name its TLS
	// certificate may carry (Config.TLSAnnouncedName).
	hostnames sync.Map
	// lastErr is why the last slot map read failed ("" after a success).
	lastErr atomic.Pointer[string]
	// assigned is how many slots the map in force assigns; readAt is when
	// a map was last read (unix nanos, base.Now), 0 before the first.
	assigned atomic.Int32
	readAt   atomic.Int64

	trigger chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	routers [4]*Router
}

// clusterNode is one node the cluster told us of (or a seed).
type clusterNode struct {
	addr  string
	pools [4]*Pool // [2] and [3]
}

// NewCluster validates the configuration and starts reading the slot map
// in the background from the seeds; Ready says when it is loaded. base is
// the template for each node's pools (its Address is ignored).
func NewCluster(base Config, cfg ClusterConfig, m *Metrics, log *zap.Logger) (*Cluster, error) {
	if len(cfg.Seeds) == 0 {
		return nil, errors.New("upstream: cluster mode needs at least one seed address")
	}
	if len(cfg.Protocols) == 0 {
		cfg.Protocols = []int{2, 3}
	}
	for _, p := range cfg.Protocols {
		check := base
		check.Address, check.Protocol = cfg.Seeds[0], p
		if err := check.Validate(); err != nil {
			return nil, err
		}
	}
	if base.SendSeq == nil {
		base.SendSeq = new(atomic.Uint64) // shared by every node's pools
	}
	if base.Now == nil {
		base.Now = time.Now
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 10 * time.Second
	}
	if cfg.MinRefreshGap <= 0 {
		cfg.MinRefreshGap = 100 * time.Millisecond
	}
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 5
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = zap.NewNop()
	}
	c := &Cluster{
		base:    base,
		cfg:     cfg,
		metrics: m,
		log:     log,
		byAddr:  make(map[string]int32),
		absent:  make(map[int32]int),
		seeds:   make(map[string]bool),
		trigger: make(chan struct{}, 1),

		firstRead: make(chan struct{}),
	}
	for _, a := range cfg.Seeds {
		c.seeds[a] = true
	}
	empty := []*clusterNode{}
	c.nodes.Store(&empty)
	noShards := []int{}
	c.shards.Store(&noShards)
	noReplicas := map[int32][]int32{}
	c.replicas.Store(&noReplicas)
	if cfg.ReplicaReads {
		// READONLY lets a replica serve reads of its master's slots; a
		// master ignores it, so every pool can carry it.
		c.base.Setup = append(append([][]byte(nil), c.base.Setup...), resp.AppendCommandString(nil, "READONLY"))
	}
	for i := range c.slots {
		c.slots[i].Store(-1)
	}
	msg := "not read yet"
	c.lastErr.Store(&msg)
	for _, seed := range cfg.Seeds {
		if _, err := c.node(seed); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, p := range cfg.Protocols {
		c.routers[p] = &Router{c: c, proto: p}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.refreshLoop(ctx)
	}()
	return c, nil
}

// Router returns the router of protocol proto (2 or 3).
func (c *Cluster) Router(proto int) *Router { return c.routers[proto] }

// dest is the node index for a command's slot s (with ReplicaRead: one of
// the master's replicas, chosen by pick, when it has any), or -1.
func (c *Cluster) dest(s int32, pick uint32) int32 {
	i := c.slots[s&(Slots-1)].Load()
	if s&ReplicaRead == 0 || i < 0 {
		return i
	}
	if reps := (*c.replicas.Load())[i]; len(reps) > 0 {
		return reps[pick%uint32(len(reps))]
	}
	return i
}

// Owner returns an identifier of the master serving slot (stable for the
// life of the Cluster: equal identifiers are the same node), or -1.
func (c *Cluster) Owner(slot int) int {
	if slot < 0 || slot >= Slots {
		return -1
	}
	return int(c.slots[slot].Load())
}

// MasterAddrs returns the address of each master in the slot map.
func (c *Cluster) MasterAddrs() []string {
	nodes := *c.nodes.Load()
	var out []string
	for _, s := range *c.shards.Load() {
		if i := c.slots[s].Load(); i >= 0 {
			out = append(out, nodes[i].addr)
		}
	}
	return out
}

// SlotsAssigned is how many slots the slot map in force assigns to a
// master (0 before the first map is read).
func (c *Cluster) SlotsAssigned() int { return int(c.assigned.Load()) }

// MapAge is how long ago the slot map was last read successfully, and
// false before the first read.
func (c *Cluster) MapAge() (time.Duration, bool) {
	at := c.readAt.Load()
	if at == 0 {
		return 0, false
	}
	return c.base.Now().Sub(time.Unix(0, at)), true
}

// MasterState is a master of the slot map and whether rproxy has a shared
// connection up to it.
type MasterState struct {
	Addr string
	Up   bool
}

// MasterStates returns each master of the slot map, in map order.
func (c *Cluster) MasterStates() []MasterState {
	nodes := *c.nodes.Load()
	seen := map[int32]bool{}
	var out []MasterState
	for _, s := range *c.shards.Load() {
		i := c.slots[s].Load()
		if i < 0 || seen[i] {
			continue
		}
		seen[i] = true
		out = append(out, MasterState{Addr: nodes[i].addr, Up: nodes[i].pools[c.cfg.Protocols[0]].Ready()})
	}
	return out
}

// HasConn reports whether addr is the local address of a shared
// connection of one of the cluster's pools (Pool.HasConn).
func (c *Cluster) HasConn(addr string) bool {
	for _, n := range *c.nodes.Load() {
		for _, p := range n.pools {
			if p != nil && p.HasConn(addr) {
				return true
			}
		}
	}
	return false
}

// MasterAddr returns the address of the master serving slot, or "".
func (c *Cluster) MasterAddr(slot int) string {
	if i := c.Owner(slot); i >= 0 {
		return (*c.nodes.Load())[i].addr
	}
	return ""
}

// MapVersion changes whenever the slot map does.
func (c *Cluster) MapVersion() uint64 { return c.version.Load() }

// Masters is the number of masters in the slot map.
func (c *Cluster) Masters() int { return len(*c.shards.Load()) }

// Close stops refreshing and closes every node's pools.
func (c *Cluster) Close() {
	c.once.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		c.wg.Wait()
		c.endFirstRead()
		for _, n := range *c.nodes.Load() {
			for _, p := range n.pools {
				if p != nil {
					p.Close()
				}
			}
		}
	})
}

// node returns the index of the node at addr, creating its pools (which
// connect in the background) the first time.
func (c *Cluster) node(addr string) (int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.byAddr[addr]; ok {
		return i, nil
	}
	n := &clusterNode{addr: addr}
	for _, proto := range c.cfg.Protocols {
		cfg := c.base
		cfg.Address, cfg.Protocol = addr, proto
		if cfg.TLS != nil {
			cfg.TLSAnnouncedName = func() string {
				name, _ := c.hostnames.Load(addr)
				s, _ := name.(string)
				return s
			}
		}
		if on := c.cfg.OnNodeState; on != nil {
			cfg.OnState = func(up bool) { on(addr, up) }
		}
		p, err := NewPool(cfg, c.metrics, c.log)
		if err != nil {
			for _, q := range n.pools {
				if q != nil {
					q.Close()
				}
			}
			return -1, err
		}
		n.pools[proto] = p
	}
	old := *c.nodes.Load()
	nodes := append(old[:len(old):len(old)], n)
	c.nodes.Store(&nodes)
	i := int32(len(nodes) - 1)
	c.byAddr[addr] = i
	return i, nil
}

// NoteMoved learns from reply, a MOVED a node sent on a connection that
// does not follow redirects (a stream-mode session's), that its slot is on
// the node it names, as a followed MOVED does, and asks for a new map.
func (c *Cluster) NoteMoved(reply []byte) {
	kind, slot, addr, ok := parseRedirect(reply)
	if !ok || kind != "moved" || slot < 0 || slot >= Slots {
		return
	}
	if d, err := c.node(addr); err == nil {
		c.learnMoved(slot, d)
	}
}

// learnMoved puts slot on node d, as a MOVED said, and asks for a new map.
func (c *Cluster) learnMoved(slot int, d int32) {
	c.learnMu.Lock()
	if c.learned == nil {
		c.learned = make(map[int]uint64)
	}
	c.learned[slot] = c.learnSeq.Add(1)
	changed := c.slots[slot].Swap(d) != d
	c.learnMu.Unlock()
	if changed {
		c.version.Add(1)
	}
	c.requestRefresh()
	if via := c.cfg.MapVia; via != nil {
		// The map this one is read from learns it too: routing reads it
		// (a passthrough user's connections are this one's).
		if vd, err := via.node((*c.nodes.Load())[d].addr); err == nil {
			via.learnMoved(slot, vd)
		}
	}
}

// RequestRefresh asks for the slot map to be read again soon: the caller
// learnt that a slot moved (a node unsubscribed a shard channel of it).
func (c *Cluster) RequestRefresh() { c.requestRefresh() }

// requestRefresh asks the refresh loop to read the slot map soon.
func (c *Cluster) requestRefresh() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// refreshLoop reads the slot map at start (retrying quickly until it has
// one), then every Refresh and whenever asked, at most once per
// MinRefreshGap.
func (c *Cluster) refreshLoop(ctx context.Context) {
	retry := 10 * time.Millisecond
	for ctx.Err() == nil {
		last := time.Now()
		err := c.refresh(ctx)
		c.endFirstRead()
		wait := c.cfg.Refresh
		if err != nil {
			msg := err.Error()
			c.lastErr.Store(&msg)
			if !c.loaded.Load() {
				// At start the seeds' connections are usually still
				// coming up: warn once retries have slowed to a second.
				if retry >= time.Second {
					c.log.Warn("cluster slot map read failed", zap.Error(err))
				} else {
					c.log.Debug("cluster slot map read failed", zap.Error(err))
				}
				wait, retry = retry, min(retry*2, time.Second)
			} else {
				c.log.Warn("cluster slot map read failed", zap.Error(err))
				wait = c.cfg.MinRefreshGap // keep trying while the map is in doubt
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-c.trigger:
			timer.Stop()
			// Only what is left of the gap since the last read began: a
			// MOVED after a quiet period is acted on at once.
			if !sleep(ctx, c.cfg.MinRefreshGap-time.Since(last)) {
				return
			}
		}
	}
}

// endFirstRead lets AwaitMap's waiters go on.
func (c *Cluster) endFirstRead() {
	c.firstReadOnce.Do(func() { close(c.firstRead) })
}

// AwaitMap waits, when no slot map is loaded yet, until the first read of
// it has ended (within the pools' Timeout, as a command waits for its
// pool's first dial): a command that comes in the moments after start is
// then routed by the map, where without one it would fail, or a
// transaction be pinned to a seed and its commands for other masters
// answered CROSSSLOT.
func (c *Cluster) AwaitMap() {
	if c.loaded.Load() {
		return
	}
	t := time.NewTimer(c.base.Timeout)
	defer t.Stop()
	select {
	case <-c.firstRead:
	case <-t.C:
	}
}

// refreshTimeout bounds one node's answer to a slot map read, so that a
// stopped node does not hold the map back.
const refreshTimeout = time.Second

// refresh reads the slot map from the first known master or seed that
// answers, and installs it.
func (c *Cluster) refresh(ctx context.Context) error {
	// Nodes made from here on (a MOVED naming a new node, a caller's
	// lookup) may be missing from the map this read finds only because
	// the map is older than they are: they are not counted as left out.
	known := int32(len(*c.nodes.Load()))
	since := c.learnSeq.Load() // MOVEDs after this are newer than the map read
	candidates := c.MasterAddrs()
	seen := make(map[string]bool)
	for _, a := range candidates {
		seen[a] = true
	}
	for _, s := range c.cfg.Seeds {
		if !seen[s] {
			seen[s] = true
			candidates = append(candidates, s)
		}
	}
	var errs []error
	for _, addr := range candidates {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		src := c
		if c.cfg.MapVia != nil {
			src = c.cfg.MapVia
		}
		shards, err := src.readSlotMap(addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		if err := c.install(shards, addr, known, since); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		msg := ""
		c.lastErr.Store(&msg)
		return nil
	}
	c.metrics.refreshes.WithLabelValues("error").Inc()
	return fmt.Errorf("upstream: cannot read the cluster slot map: %w", errors.Join(errs...))
}

// readSlotMap asks one node for the slot map: CLUSTER SHARDS, or CLUSTER
// SLOTS when the server does not know SHARDS.
func (c *Cluster) readSlotMap(addr string) ([]shard, error) {
	i, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	pool := (*c.nodes.Load())[i].pools[c.cfg.Protocols[0]]
	if !pool.Ready() && !c.loaded.Load() {
		// The first read, at start: the seed's connection may still be
		// dialling. That read is what AwaitMap's commands wait for.
		pool.awaitDial()
	}
	if !pool.Ready() {
		return nil, errors.New("not connected")
	}
	reply, err := askWithin(pool, resp.AppendCommandString(nil, "CLUSTER", "SHARDS"), refreshTimeout)
	if err != nil {
		return nil, err
	}
	tls := c.base.TLS != nil
	if len(reply) > 0 && reply[0] == '-' {
		if !bytes.Contains(bytes.ToLower(reply), []byte("unknown subcommand")) {
			return nil, fmt.Errorf("CLUSTER SHARDS: %s", bytes.TrimSpace(reply[1:]))
		}
		reply, err = askWithin(pool, resp.AppendCommandString(nil, "CLUSTER", "SLOTS"), refreshTimeout)
		if err != nil {
			return nil, err
		}
		return parseClusterSlots(reply, hostOf(addr))
	}
	return parseClusterShards(reply, hostOf(addr), tls)
}

// askWithin sends one command on the pool and returns its reply, giving up
// after timeout (the batch is then abandoned to the connection).
func askWithin(p *Pool, cmd []byte, timeout time.Duration) ([]byte, error) {
	b := NewBatch()
	b.Add(cmd)
	p.Send(b)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-b.done:
	case <-t.C:
		return nil, fmt.Errorf("no reply within %v", timeout)
	}
	r := b.Reply(0)
	if bytes.HasPrefix(r, []byte("-ERR upstream unavailable")) {
		return nil, errors.New(string(bytes.TrimSpace(r[1:])))
	}
	return r, nil
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// noteHostnames keeps the hostnames this map read gives (before a pool
// dials a node it names), and forgets those of addresses it no longer
// names, so that the map of them does not grow with every node a cluster
// ever had.
func (c *Cluster) noteHostnames(shards []shard) {
	named := map[string]bool{}
	for _, sh := range shards {
		for addr, name := range sh.hostnames {
			c.hostnames.Store(addr, name)
			named[addr] = true
		}
	}
	c.hostnames.Range(func(addr, _ any) bool {
		if !named[addr.(string)] {
			c.hostnames.Delete(addr)
		}
		return true
	})
}

// install makes shards the slot map; counted is how many nodes there were
// when the map was asked for (retireAbsent judges only those), and since
// the learnSeq then: a slot a later MOVED put on a node stays there (a
// map read that began before a slot moved twice would put it back on
// the first node until the next read).
func (c *Cluster) install(shards []shard, from string, counted int32, since uint64) error {
	known := int32(len(*c.nodes.Load())) // nodes made from here on are new
	owner := make([]int32, Slots)
	for i := range owner {
		owner[i] = -1
	}
	var firsts []int
	assigned := 0
	replicas := map[int32][]int32{}
	inMap := map[int32]bool{}
	c.noteHostnames(shards)
	for _, sh := range shards {
		if sh.master == "" || len(sh.ranges) == 0 {
			continue
		}
		idx, err := c.node(sh.master)
		if err != nil {
			return err
		}
		inMap[idx] = true
		if c.cfg.ReplicaReads {
			for _, ra := range sh.replicas {
				ri, err := c.node(ra)
				if err != nil {
					return err
				}
				replicas[idx] = append(replicas[idx], ri)
				inMap[ri] = true
			}
		}
		for _, r := range sh.ranges {
			for s := r[0]; s <= r[1]; s++ {
				if owner[s] < 0 {
					assigned++
				}
				owner[s] = idx
			}
		}
	}
	// One slot of each master, its lowest, in slot order: the masters'
	// order for SCAN's cursor (proxy/clusterscan.go).
	seen := map[int32]bool{}
	for s, idx := range owner {
		if idx >= 0 && !seen[idx] {
			seen[idx] = true
			firsts = append(firsts, s)
		}
	}
	if len(firsts) == 0 {
		return errors.New("the cluster has no slots assigned")
	}
	c.awaitConnected(owner, firsts, known)
	changed := 0
	c.learnMu.Lock()
	for s := range owner {
		if seq, ok := c.learned[s]; ok {
			if seq > since {
				continue // a MOVED newer than this map read
			}
			delete(c.learned, s)
		}
		if c.slots[s].Swap(owner[s]) != owner[s] {
			changed++
		}
	}
	c.learnMu.Unlock()
	c.shards.Store(&firsts)
	c.replicas.Store(&replicas)
	c.metrics.clusterNodes.Set(float64(len(firsts)))
	c.metrics.slotsAssigned.Set(float64(assigned))
	c.assigned.Store(int32(assigned))
	c.readAt.Store(c.base.Now().UnixNano())
	if !c.loaded.Swap(true) || changed > 0 {
		c.version.Add(1)
		c.metrics.refreshes.WithLabelValues("changed").Inc()
		c.log.Info("cluster slot map loaded", zap.String("from", from), zap.Int("masters", len(firsts)),
			zap.Int("slots_assigned", assigned), zap.Int("slots_changed", changed))
	} else {
		c.metrics.refreshes.WithLabelValues("unchanged").Inc()
	}
	c.retireAbsent(inMap, counted)
	return nil
}

// retireAfter is how many slot map reads in a row must leave a node out
// before its connections are closed: a failed master that was replaced, a
// node removed from the cluster. Until then a node that comes back (or a
// MOVED that names it) finds its connections up.
const retireAfter = 3

// retireAbsent counts the slot map reads that left each node out of inMap
// and closes the pools of those left out retireAfter times in a row, so
// they stop reconnecting (and logging) for good. The node's index stays,
// with closed pools that fail at once, since stale routing may still hold
// it; if its address comes back, node gives it a new index and new pools.
// Seeds are kept: they are where a lost map is read again. Nodes at
// index counted or above were made after the map was asked for: not judged.
func (c *Cluster) retireAbsent(inMap map[int32]bool, counted int32) {
	var closing []*Pool
	c.mu.Lock()
	nodes := *c.nodes.Load()
	for addr, i := range c.byAddr {
		if i >= counted {
			continue // newer than the map read
		}
		if inMap[i] || c.seeds[addr] {
			delete(c.absent, i)
			continue
		}
		if c.absent[i]++; c.absent[i] < retireAfter {
			continue
		}
		delete(c.absent, i)
		delete(c.byAddr, addr)
		for _, p := range nodes[i].pools {
			if p != nil {
				closing = append(closing, p)
			}
		}
		c.log.Info("cluster node left the slot map: its connections are closed",
			zap.String("node", addr), zap.Int("slot_map_reads", retireAfter))
	}
	c.mu.Unlock()
	// Outside mu: closing waits for the pools' goroutines, whose state
	// callbacks must not wait on node creation.
	for _, p := range closing {
		p.Close()
	}
}

// awaitConnected gives the masters of a new map that rproxy had no pools
// for (index >= known: a promoted replica, a new node) up to a dial
// timeout to connect before slots move to them: commands sent meanwhile
// would fail at once with "upstream unavailable". The old map serves in
// the meantime. Known nodes that are down are not waited for.
func (c *Cluster) awaitConnected(owner []int32, firsts []int, known int32) {
	nodes := *c.nodes.Load()
	deadline := time.Now().Add(min(c.base.DialTimeout, time.Second))
	for _, s := range firsts {
		if owner[s] < known {
			continue
		}
		p := nodes[owner[s]].pools[c.cfg.Protocols[0]]
		for !p.Ready() && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// shard is one master and the slot ranges it serves.
type shard struct {
	master   string // host:port
	replicas []string
	ranges   [][2]int
	// hostnames: each node's announced hostname (CLUSTER SHARDS'
	// hostname, cluster-announce-hostname), by address; "" for none.
	hostnames map[string]string
}

// parseClusterShards reads a RESP2 CLUSTER SHARDS reply. A node's address
// is its endpoint (or ip), with its TLS port when tls; an unknown endpoint
// ("?" or empty) means the host we asked.
func parseClusterShards(reply []byte, askedHost string, tls bool) ([]shard, error) {
	v, err := resp.Parse(reply)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SHARDS reply: %w", err)
	}
	if v.Kind != '*' && v.Kind != '%' {
		return nil, fmt.Errorf("CLUSTER SHARDS reply: unexpected %q", v.Kind)
	}
	var out []shard
	for _, sv := range v.Elems {
		var sh shard
		var nodes []resp.Value
		for i := 0; i+1 < len(sv.Elems); i += 2 {
			switch string(sv.Elems[i].Str) {
			case "slots":
				s := sv.Elems[i+1].Elems
				for j := 0; j+1 < len(s); j += 2 {
					lo, hi := int(s[j].Int), int(s[j+1].Int)
					if lo < 0 || hi >= Slots || lo > hi {
						return nil, fmt.Errorf("CLUSTER SHARDS reply: bad slot range %d-%d", lo, hi)
					}
					sh.ranges = append(sh.ranges, [2]int{lo, hi})
				}
			case "nodes":
				nodes = sv.Elems[i+1].Elems
			}
		}
		for _, nv := range nodes {
			fields := make(map[string]resp.Value, len(nv.Elems)/2)
			for i := 0; i+1 < len(nv.Elems); i += 2 {
				fields[string(nv.Elems[i].Str)] = nv.Elems[i+1]
			}
			host := string(fields["endpoint"].Str)
			if host == "" || host == "?" {
				host = string(fields["ip"].Str)
			}
			if host == "" || host == "?" {
				host = askedHost
			}
			port := fields["port"].Int
			if tls {
				if tp, ok := fields["tls-port"]; ok {
					port = tp.Int
				}
			}
			if port <= 0 {
				return nil, fmt.Errorf("CLUSTER SHARDS reply: a node of %v has no port", sh.ranges)
			}
			addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
			if sh.hostnames == nil {
				sh.hostnames = map[string]string{}
			}
			sh.hostnames[addr] = string(fields["hostname"].Str)
			switch string(fields["role"].Str) {
			case "master":
				sh.master = addr
			case "replica":
				if string(fields["health"].Str) == "online" {
					sh.replicas = append(sh.replicas, addr)
				}
			}
		}
		out = append(out, sh)
	}
	return out, nil
}

// parseClusterSlots reads a CLUSTER SLOTS reply: for each range, start,
// end, then the master as [host, port, id, ...] and its replicas.
func parseClusterSlots(reply []byte, askedHost string) ([]shard, error) {
	v, err := resp.Parse(reply)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS reply: %w", err)
	}
	if v.Kind != '*' {
		return nil, fmt.Errorf("CLUSTER SLOTS reply: unexpected %q", v.Kind)
	}
	byMaster := make(map[string]int)
	var out []shard
	for _, r := range v.Elems {
		if len(r.Elems) < 3 || len(r.Elems[2].Elems) < 2 {
			return nil, errors.New("CLUSTER SLOTS reply: short range entry")
		}
		lo, hi := int(r.Elems[0].Int), int(r.Elems[1].Int)
		if lo < 0 || hi >= Slots || lo > hi {
			return nil, fmt.Errorf("CLUSTER SLOTS reply: bad slot range %d-%d", lo, hi)
		}
		m := r.Elems[2].Elems
		host := string(m[0].Str)
		if host == "" || host == "?" {
			host = askedHost
		}
		addr := net.JoinHostPort(host, strconv.FormatInt(m[1].Int, 10))
		i, ok := byMaster[addr]
		if !ok {
			i = len(out)
			byMaster[addr] = i
			out = append(out, shard{master: addr})
			for _, rv := range r.Elems[3:] {
				if len(rv.Elems) >= 2 {
					rh := string(rv.Elems[0].Str)
					if rh == "" || rh == "?" {
						rh = askedHost
					}
					out[i].replicas = append(out[i].replicas, net.JoinHostPort(rh, strconv.FormatInt(rv.Elems[1].Int, 10)))
				}
			}
		}
		out[i].ranges = append(out[i].ranges, [2]int{lo, hi})
	}
	return out, nil
}

// masterUpDesc describes the gauge MasterCollector exports.
var masterUpDesc = prometheus.NewDesc("rproxy_upstream_cluster_master_up",
	"1 while rproxy has a connection up to this master of the cluster slot map, else 0.", []string{"node"}, nil)

// MasterCollector exports, when scraped, a gauge per master of the current
// slot map, labelled by its address: 1 while its shared pool has a
// connection up. Register it for one Cluster per registry (the proxy's
// main one, not the hot-key tier's tracking cluster).
func (c *Cluster) MasterCollector() prometheus.Collector { return masterCollector{c} }

type masterCollector struct{ c *Cluster }

func (m masterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- masterUpDesc }

func (m masterCollector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	nodes := *c.nodes.Load()
	seen := map[int32]bool{}
	for _, s := range *c.shards.Load() {
		i := c.slots[s].Load()
		if i < 0 || seen[i] {
			continue // a MOVED may have pointed two shards' slots at one node
		}
		seen[i] = true
		up := 0.0
		if nodes[i].pools[c.cfg.Protocols[0]].Ready() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(masterUpDesc, prometheus.GaugeValue, up, nodes[i].addr)
	}
}
