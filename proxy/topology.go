package proxy

import (
	"fmt"
	"strings"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// upstreamMode names the upstream's topology, as INFO's # Proxy shows it.
func (s *Server) upstreamMode() string {
	switch {
	case s.cfg.Cluster != nil:
		return "cluster"
	case s.cfg.Upstream.Sentinel != nil:
		return "sentinel"
	}
	return "standalone"
}

// topologyInfo adds the upstream's topology to INFO's # Proxy section:
// the mode, and on a cluster the masters of the slot map with their
// state (a shared connection up or not) and the slot map's age.
func (s *Server) topologyInfo(field func(k string, v any)) {
	field("upstream_mode", s.upstreamMode())
	if sen := s.cfg.Upstream.Sentinel; sen != nil {
		master := sen.Master()
		if master == "" {
			master = "unknown"
		}
		field("sentinel_master_name", sen.Name())
		field("sentinel_master", master)
		field("sentinel_failovers", sen.Failovers())
		if since, ok := sen.SinceChange(); ok {
			field("sentinel_last_failover_ms_ago", since.Milliseconds())
		} else {
			field("sentinel_last_failover_ms_ago", -1)
		}
		if e := sen.LastError(); e != "" {
			field("sentinel_error", oneLine(e))
		}
	}
	if s.cluster == nil {
		return
	}
	masters := s.cluster.MasterStates()
	up := 0
	for _, m := range masters {
		if m.Up {
			up++
		}
	}
	field("cluster_masters", len(masters))
	field("cluster_masters_up", up)
	field("cluster_slots_assigned", s.cluster.SlotsAssigned())
	if age, ok := s.cluster.MapAge(); ok {
		field("cluster_slot_map_age_ms", age.Milliseconds())
	} else {
		field("cluster_slot_map_age_ms", -1)
	}
	for i, m := range masters {
		state := "up"
		if !m.Up {
			state = "down"
		}
		field(fmt.Sprintf("cluster_master%d", i), "addr="+m.Addr+",state="+state)
	}
}

// proxyInfoNodes answers PROXY INFO NODES [section ...]: Redis's INFO from
// every master (the one server, standalone), as an array of [address,
// INFO text] pairs in slot map order. Plain INFO answers from one master.
func (s *Server) proxyInfoNodes(ss *session, sections [][]byte) {
	s.flush(ss) // replies stay in order
	backend := ss.pools[ss.proto]
	cmd := resp.AppendCommand(nil, append([][]byte{[]byte("INFO")}, sections...)...)
	shards := backend.Shards()
	b := upstream.NewBatch()
	for _, slot := range shards {
		b.AddSlot(cmd, slot)
	}
	backend.Do(b)
	r := fmt.Appendf(nil, "*%d\r\n", len(shards))
	for i, slot := range shards {
		addr := s.cfg.Upstream.Address
		if sen := s.cfg.Upstream.Sentinel; sen != nil {
			addr = sen.Master()
		}
		if s.cluster != nil {
			addr = s.cluster.MasterAddr(slot)
		}
		r = append(r, "*2\r\n"...)
		r = resp.AppendBulk(r, []byte(addr))
		r = append(r, b.Reply(i)...)
	}
	ss.reply(r)
}

// isInfoNodes reports whether PROXY's arguments are INFO NODES [...].
func isInfoNodes(args [][]byte) bool {
	return len(args) >= 3 && strings.EqualFold(string(args[1]), "info") && strings.EqualFold(string(args[2]), "nodes")
}
