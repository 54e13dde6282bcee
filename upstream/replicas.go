package upstream

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// ReplicaRouter sends a protocol's batches to the master a Sentinel names
// (its Pool), except batches whose every command is marked ReplicaRead
// (AddSlot with ReplicaRead): those go to one of the master's healthy
// replicas, in turn, when the Sentinel knows one with a connection up,
// else to the master.
type ReplicaRouter struct {
	master *Pool
	sen    *Sentinel
	base   Config // template of the replicas' pools: no Sentinel, Address set per replica
	m      *Metrics
	log    *zap.Logger
	next   atomic.Uint32

	mu    sync.Mutex
	pools map[string]*Pool
}

// NewReplicaRouter routes over master and the replicas sen reports
// (SentinelConfig.Replicas); base is the template of a replica's pool.
func NewReplicaRouter(master *Pool, sen *Sentinel, base Config, m *Metrics, log *zap.Logger) *ReplicaRouter {
	base.Sentinel, base.OnState = nil, nil
	if log == nil {
		log = zap.NewNop()
	}
	return &ReplicaRouter{master: master, sen: sen, base: base, m: m, log: log, pools: map[string]*Pool{}}
}

// Do sends the batch to a replica when every command may be read there,
// else to the master, and waits for the replies.
func (r *ReplicaRouter) Do(b *Batch) {
	if p := r.replicaFor(b); p != nil {
		p.Do(b)
		return
	}
	r.master.Do(b)
}

// replicaFor picks a replica pool with a connection up for b, or nil.
func (r *ReplicaRouter) replicaFor(b *Batch) *Pool {
	if len(b.slots) == 0 {
		return nil
	}
	for _, s := range b.slots {
		if s < 0 || s&ReplicaRead == 0 {
			return nil
		}
	}
	reps := r.sen.Replicas()
	if len(reps) == 0 {
		return nil
	}
	start := r.next.Add(1)
	for i := range reps {
		addr := reps[(int(start)+i)%len(reps)]
		if addr == r.sen.Master() {
			continue
		}
		if p := r.pool(addr); p != nil && p.Ready() {
			return p
		}
	}
	return nil
}

// pool returns the replica's pool, made (connecting in the background)
// the first time; pools of addresses no longer reported are closed.
func (r *ReplicaRouter) pool(addr string) *Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pools[addr]; ok {
		return p
	}
	live := map[string]bool{}
	for _, a := range r.sen.Replicas() {
		live[a] = true
	}
	for a, p := range r.pools {
		if !live[a] {
			delete(r.pools, a)
			go p.Close() // waits for its goroutines: not under mu
		}
	}
	cfg := r.base
	cfg.Address = addr
	p, err := NewPool(cfg, r.m, r.log)
	if err != nil {
		r.log.Warn("replica pool", zap.String("replica", addr), zap.Error(err))
		return nil
	}
	r.pools[addr] = p
	return p
}

// Ready reports whether the master has a connection up.
func (r *ReplicaRouter) Ready() bool { return r.master.Ready() }

// PinPool is the master's: dedicated connections hold state, on the master.
func (r *ReplicaRouter) PinPool(slot int) *Pool { return r.master }

// Shards is the master's one shard.
func (r *ReplicaRouter) Shards() []int { return r.master.Shards() }

// Close closes the master's pool and every replica's.
func (r *ReplicaRouter) Close() {
	r.master.Close()
	r.mu.Lock()
	pools := r.pools
	r.pools = map[string]*Pool{}
	r.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
}
