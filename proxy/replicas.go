package proxy

import (
	"bytes"
	"sync/atomic"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/upstream"
)

// sentinelReplicaReads reports whether reads under ReplicaReadPrefixes go
// to the replicas a Sentinel reports (upstream.ReplicaRouter).
func (s *Server) sentinelReplicaReads() bool {
	return s.cfg.Cluster == nil && s.cfg.Upstream.Sentinel != nil && len(s.cfg.ReplicaReadPrefixes) > 0
}

// replicaReads is the stage that, with a Sentinel, marks a read-only
// command whose keys are all under prefixes (ReplicaReadPrefixes) for a
// replica (ss.slot, taken by forwardTracked), outside pinned sessions and
// transactions; any other command is the master's. A batch goes to a
// replica only when all its commands are so marked. It is in the chain
// only when Sentinel replica reads are configured (sentinelReplicaReads);
// on a cluster, cluster routing marks replica reads itself.
type replicaReads struct {
	prefixes []string
	table    *atomic.Pointer[command.Table] // the table in force (container commands' keys)
}

func (st replicaReads) command(ss *session, c *call) bool {
	info, args := c.info, c.cmd.Args
	ss.slot = upstream.SlotAny
	if info == nil || ss.pin != nil || ss.inTransaction() || !replicaReadable(info) || info.Handling != command.Forward {
		return false
	}
	keys, _ := command.Keys(keyInfo(st.table.Load(), info, args), args, ss.route.keys[:0])
	if len(keys) > 0 && underPrefixes(keys, st.prefixes) {
		ss.slot = upstream.ReplicaRead
	}
	clear(keys)
	ss.route.keys = keys[:0]
	return false
}

func (replicaReads) replies(*session) {}

// replicaReadable reports whether a command may be read from a replica:
// read-only, and not EVAL_RO or EVALSHA_RO. Redis does not replicate its
// script cache (SCRIPT LOAD, EVAL's caching), so on a replica an
// EVALSHA_RO after a SCRIPT LOAD gets NOSCRIPT, and an EVAL_RO caches its
// script there alone, where one Redis would have it for a later EVALSHA.
// FCALL_RO may: functions are replicated.
func replicaReadable(info *command.Info) bool {
	return info.Has(command.ReadOnly) && info.Name != "eval_ro" && info.Name != "evalsha_ro"
}

// underPrefixes reports whether every key starts with one of prefixes.
func underPrefixes(keys [][]byte, prefixes []string) bool {
	for _, k := range keys {
		ok := false
		for _, p := range prefixes {
			if bytes.HasPrefix(k, []byte(p)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
