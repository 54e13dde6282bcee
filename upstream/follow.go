package upstream

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// MasterFollow keeps the pools of one standalone address on its master
// when the address moves to another server under them: a failover
// behind a DNS name (a cloud provider's primary endpoint) or a load
// balancer moves the name to the promoted replica, while connections made
// before stay with the old master, now a replica, which answers every
// write READONLY (as it does a client connected to it directly). Once a
// dial has found a master at the address (ROLE), a READONLY reply starts
// a search: a new connection to the address, once a second, asks ROLE,
// and when it finds a master while the pools' own server is still a
// replica, every connection of the pools is dialled again, which takes
// them to that master. The connections in use serve meanwhile as the
// replica lets them (reads, and Redis's READONLY for writes). A server
// made master again itself (REPLICAOF NO ONE) ends the search with no
// redial. An address that never answered as a master (rproxy in front of
// a replica on purpose) starts none; dials ask ROLE until one has. Copies
// of a Config share one.
type MasterFollow struct {
	log       *zap.Logger
	every     time.Duration
	sawMaster atomic.Bool
	searching atomic.Bool
	changes   atomic.Int64

	mu    sync.Mutex
	pools []*Pool
}

// followEvery is how often a search dials the address.
const followEvery = time.Second

// NewMasterFollow returns a MasterFollow that searches every followEvery
// (every, when > 0: tests).
func NewMasterFollow(log *zap.Logger, every time.Duration) *MasterFollow {
	if log == nil {
		log = zap.NewNop()
	}
	if every <= 0 {
		every = followEvery
	}
	return &MasterFollow{log: log, every: every}
}

// Changes is how many times a search moved the pools to a master.
func (f *MasterFollow) Changes() int64 { return f.changes.Load() }

// Searching reports whether a search for the master runs.
func (f *MasterFollow) Searching() bool { return f.searching.Load() }

func (f *MasterFollow) register(p *Pool) {
	f.mu.Lock()
	f.pools = append(f.pools, p)
	f.mu.Unlock()
}

func (f *MasterFollow) unregister(p *Pool) {
	f.mu.Lock()
	for i, q := range f.pools {
		if q == p {
			f.pools = append(f.pools[:i], f.pools[i+1:]...)
			break
		}
	}
	f.mu.Unlock()
}

// first returns a registered pool (nil: none left).
func (f *MasterFollow) first() *Pool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pools) == 0 {
		return nil
	}
	return f.pools[0]
}

// noteRole records the ROLE reply of a new connection.
func (f *MasterFollow) noteRole(reply []byte) {
	if isMasterRole(reply) {
		f.sawMaster.Store(true)
	}
}

// isMasterRole reports whether reply, to ROLE, is a master's.
func isMasterRole(reply []byte) bool {
	i := bytes.IndexByte(reply, '\n')
	return len(reply) > 0 && reply[0] == '*' && bytes.HasPrefix(reply[i+1:], []byte("$6\r\nmaster\r\n"))
}

// readOnly is told of a READONLY reply: it starts a search, unless one
// runs or the address never answered as a master.
func (f *MasterFollow) readOnly(addr string) {
	if !f.sawMaster.Load() || !f.searching.CompareAndSwap(false, true) {
		return
	}
	f.log.Warn("upstream answered READONLY: the server is a replica now; looking for a master at the address",
		zap.String("upstream", addr))
	go f.search(addr)
}

// search dials the address every f.every until it finds a master there
// (moving the pools to it) or the pools' own server is one again, or no
// pool is left.
func (f *MasterFollow) search(addr string) {
	defer f.searching.Store(false)
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	for {
		p := f.first()
		if p == nil {
			return
		}
		if f.masterAt(p) {
			if isMasterRole(f.ask(p)) {
				f.log.Info("upstream: the server is a master again itself", zap.String("upstream", addr))
				return
			}
			f.changes.Add(1)
			f.log.Warn("upstream: a master answers at the address: every connection is dialled again", zap.String("upstream", addr))
			f.mu.Lock()
			pools := append([]*Pool(nil), f.pools...)
			f.mu.Unlock()
			for _, q := range pools {
				q.masterChanged("the address leads to another master")
			}
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// masterAt reports whether a new connection to p's address reaches a
// master.
func (f *MasterFollow) masterAt(p *Pool) bool {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	nc, err := p.dial(ctx)
	if err != nil {
		f.log.Debug("upstream: a search dial failed", zap.Error(err))
		return false
	}
	defer nc.Close()
	p.cfg.Own.note(nc, roleCmd)
	reply, err := roundTrip(nc, p.cfg.Now().Add(p.cfg.DialTimeout), roleCmd)
	return err == nil && isMasterRole(reply)
}

// ask sends ROLE on p's shared connections: the role of the server they
// are connected to now.
func (f *MasterFollow) ask(p *Pool) []byte {
	b := NewBatch()
	b.Add(roleCmd)
	p.Do(b)
	return b.Reply(0)
}
