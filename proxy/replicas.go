package proxy

import (
	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/upstream"
)

// sentinelReplicaReads reports whether reads under ReplicaReadPrefixes go
// to the replicas a Sentinel reports (upstream.ReplicaRouter).
func (s *Server) sentinelReplicaReads() bool {
	return s.cfg.Cluster == nil && s.cfg.Upstream.Sentinel != nil && len(s.cfg.ReplicaReadPrefixes) > 0
}

// routeReplicaRead marks a read-only command whose keys are all under
// ReplicaReadPrefixes for a replica (ss.slot, taken by forwardTracked),
// outside pinned sessions and transactions; any other command is the
// master's. A batch goes to a replica only when all its commands are so
// marked.
func (s *Server) routeReplicaRead(ss *session, info *command.Info, args [][]byte) {
	ss.slot = upstream.SlotAny
	if info == nil || ss.pin != nil || ss.inTransaction() || !info.Has(command.ReadOnly) || info.Handling != command.Forward {
		return
	}
	keys, _ := command.Keys(s.keyInfo(info, args), args, ss.route.keys[:0])
	if len(keys) > 0 && s.replicaReadable(keys) {
		ss.slot = upstream.ReplicaRead
	}
	clear(keys)
	ss.route.keys = keys[:0]
}
