package proxy

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"strconv"

	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
)

// The cluster facade: with a cluster upstream, rproxy answers the CLUSTER
// commands a cluster-mode client uses to learn the topology (SLOTS, SHARDS,
// NODES, INFO, MYID, KEYSLOT) as one Redis 7.0 node owning all 16384 slots
// would, at rproxy's own address: the client then sends everything to
// rproxy, which routes it to the real masters. COUNTKEYSINSLOT and
// GETKEYSINSLOT go to the slot's master; other subcommands (HELP, LINKS,
// topology changes the policy lets through) are forwarded as before.
type facade struct {
	cluster      *upstream.Cluster
	announceAddr string // Config.ClusterAnnounce ("": the client's connection's local address)
	tls          bool   // clients connect with TLS (CLUSTER SHARDS's tls-port)
	refuseMsg    func(ss *session, msg string)
}

// clusterFacade answers a CLUSTER command for a cluster upstream, or queues
// it for the right master; it reports false for the subcommands it leaves
// to the normal path.
func (f *facade) clusterFacade(ss *session, cmd resp.Command) bool {
	if r, ok := f.facadeAnswer(ss, cmd.Args); ok {
		ss.reply(r)
		return true
	}
	args := cmd.Args
	if len(args) < 3 || !bytes.EqualFold(args[1], []byte("countkeysinslot")) && !bytes.EqualFold(args[1], []byte("getkeysinslot")) {
		return false
	}
	if n, ok := resp.ParseInt(args[2]); ok && n >= 0 && n < upstream.Slots {
		ss.slot = int(n) // the slot's master answers; a bad slot gets any master's error
	}
	ss.forward(cmd.Raw)
	return true
}

// facadeAnswer is the facade's own answer to CLUSTER SLOTS, SHARDS, NODES,
// INFO, MYID or KEYSLOT (args, with Redis's arity); false for any other
// command.
func (f *facade) facadeAnswer(ss *session, args [][]byte) ([]byte, bool) {
	if !isFacadeCommand(args) {
		return nil, false
	}
	sub := string(bytes.ToLower(args[1]))
	if sub == "keyslot" {
		return resp.AppendInt(nil, int64(upstream.Slot(args[2]))), true
	}
	host, port := f.announce(ss)
	id := facadeID(host, port)
	assigned := f.cluster.SlotsAssigned()
	switch sub {
	case "slots":
		return appendFacadeSlots(nil, ss.proto, host, port, id, assigned), true
	case "shards":
		return appendFacadeShards(nil, ss.proto, host, port, id, assigned, f.tls), true
	case "nodes":
		return appendText(nil, ss.proto, facadeNodes(host, port, id, assigned)), true
	case "info":
		return appendText(nil, ss.proto, facadeInfo(assigned)), true
	}
	return resp.AppendBulk(nil, []byte(id)), true // myid
}

// isFacadeCommand reports whether args is one of the CLUSTER commands the
// facade answers itself, with the arity Redis accepts (else Redis's own
// arity error is wanted).
func isFacadeCommand(args [][]byte) bool {
	if len(args) < 2 || !bytes.EqualFold(args[0], []byte("cluster")) {
		return false
	}
	switch string(bytes.ToLower(args[1])) {
	case "slots", "shards", "nodes", "info", "myid":
		return len(args) == 2
	case "keyslot":
		return len(args) == 3
	}
	return false
}

// streamFacade is the facade for a session in stream mode (client
// tracking, MONITOR, pub/sub in RESP3): its commands go to one master's
// connection, whose answers would give the real cluster's nodes, and a
// cluster-mode client (rueidis, which turns tracking on as it connects)
// would then connect to the masters themselves, past rproxy's policy, auth
// and routing. Inside MULTI they are refused, as outside stream mode; in
// RESP2's subscribed mode Redis refuses them (subscribedContext sends them
// as they came).
type streamFacade struct{ f *facade }

func (st streamFacade) command(ss *session, c *call) bool {
	if c.info == nil || c.info.Name != "cluster" || !isFacadeCommand(c.cmd.Args) {
		return false
	}
	if !st.f.refuseFacadeInMulti(ss, c.cmd.Args) {
		r, _ := st.f.facadeAnswer(ss, c.cmd.Args)
		ss.replyInMode(r) // in order with what Redis sends
	}
	return true
}

// refuseFacadeInMulti refuses, inside a transaction, a CLUSTER command the
// facade answers (args, isFacadeCommand): Redis would run it at EXEC, in
// the array it returns. It reports whether it refused.
func (f *facade) refuseFacadeInMulti(ss *session, args [][]byte) bool {
	if !ss.inTransaction() {
		return false
	}
	f.refuseMsg(ss, "CLUSTER "+string(bytes.ToUpper(args[1]))+" inside MULTI is not supported through rproxy (rproxy answers it, not Redis); send it before MULTI or after EXEC")
	return true
}

func (streamFacade) replies(*session) {}

// announce is the address the facade gives clients: Config.ClusterAnnounce,
// or the local address of the client's own connection (the address it
// reached rproxy at).
func (f *facade) announce(ss *session) (host string, port int) {
	addr := f.announceAddr
	if addr == "" {
		if la := ss.conn.NetConn().LocalAddr(); la != nil {
			addr = la.String()
		}
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	port, _ = strconv.Atoi(p)
	return h, port
}

// facadeID is the node id the facade shows for an address: 40 hex digits,
// stable for the address, so rproxies at different addresses differ.
func facadeID(host string, port int) string {
	sum := sha1.Sum([]byte("rproxy " + net.JoinHostPort(host, strconv.Itoa(port))))
	return hex.EncodeToString(sum[:])
}

// allSlots reports whether the upstream's map assigns every slot: only
// then does the facade claim them all (as a node with unassigned slots
// does not list them).
func allSlots(assigned int) bool { return assigned == upstream.Slots }

// appendFacadeSlots is CLUSTER SLOTS as Redis 7.0 sends it for one node
// owning every slot: [[0, 16383, [host, port, id, {}]]].
func appendFacadeSlots(dst []byte, proto int, host string, port int, id string, assigned int) []byte {
	if !allSlots(assigned) {
		return append(dst, "*0\r\n"...)
	}
	dst = append(dst, "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n"...)
	dst = resp.AppendBulk(dst, []byte(host))
	dst = resp.AppendInt(dst, int64(port))
	dst = resp.AppendBulk(dst, []byte(id))
	if proto == 3 {
		return append(dst, "%0\r\n"...)
	}
	return append(dst, "*0\r\n"...)
}

// appendFacadeShards is CLUSTER SHARDS as Redis 7.0 sends it for one node
// owning every slot: a map per shard (RESP3; a flat array in RESP2) with
// "slots" and "nodes", and a map per node. A TLS listener's port is named
// tls-port, as on a node with tls-cluster.
func appendFacadeShards(dst []byte, proto int, host string, port int, id string, assigned int, tls bool) []byte {
	mapHeader := func(dst []byte, pairs int) []byte {
		if proto == 3 {
			return append(append(append(dst, '%'), strconv.Itoa(pairs)...), "\r\n"...)
		}
		return append(append(append(dst, '*'), strconv.Itoa(2*pairs)...), "\r\n"...)
	}
	str := func(dst []byte, v string) []byte { return resp.AppendBulk(dst, []byte(v)) }
	dst = append(dst, "*1\r\n"...)
	dst = mapHeader(dst, 2)
	dst = str(dst, "slots")
	if allSlots(assigned) {
		dst = append(dst, "*2\r\n:0\r\n:16383\r\n"...)
	} else {
		dst = append(dst, "*0\r\n"...)
	}
	dst = str(dst, "nodes")
	dst = append(dst, "*1\r\n"...)
	dst = mapHeader(dst, 7)
	dst = str(dst, "id")
	dst = str(dst, id)
	if tls {
		dst = str(dst, "tls-port")
	} else {
		dst = str(dst, "port")
	}
	dst = resp.AppendInt(dst, int64(port))
	dst = str(dst, "ip")
	dst = str(dst, host)
	dst = str(dst, "endpoint")
	dst = str(dst, host)
	dst = str(dst, "role")
	dst = str(dst, "master")
	dst = str(dst, "replication-offset")
	dst = resp.AppendInt(dst, 0)
	dst = str(dst, "health")
	return str(dst, "online")
}

// facadeNodes is CLUSTER NODES's one line: the facade has no cluster bus
// (port 0) and no epochs.
func facadeNodes(host string, port int, id string, assigned int) []byte {
	line := id + " " + host + ":" + strconv.Itoa(port) + "@0 myself,master - 0 0 0 connected"
	if allSlots(assigned) {
		line += " 0-16383"
	}
	return []byte(line + "\n")
}

// facadeInfo is CLUSTER INFO for one node: ok while the upstream's slot
// map assigns every slot.
func facadeInfo(assigned int) []byte {
	state, n := "ok", upstream.Slots
	if !allSlots(assigned) {
		state, n = "fail", 0
	}
	var b []byte
	field := func(k, v string) { b = append(append(append(append(b, k...), ':'), v...), "\r\n"...) }
	field("cluster_state", state)
	field("cluster_slots_assigned", strconv.Itoa(n))
	field("cluster_slots_ok", strconv.Itoa(n))
	field("cluster_slots_pfail", "0")
	field("cluster_slots_fail", "0")
	field("cluster_known_nodes", "1")
	field("cluster_size", strconv.Itoa(min(n, 1)))
	field("cluster_current_epoch", "0")
	field("cluster_my_epoch", "0")
	field("cluster_stats_messages_sent", "0")
	field("cluster_stats_messages_received", "0")
	field("total_cluster_links_buffer_limit_exceeded", "0")
	return b
}

// clusterCommand handles a CLUSTER command on a cluster upstream: the
// facade's, or (false) the normal path's. Inside a transaction the
// facade's own answers are refused, as rproxy's other answers are
// (refuseFacadeInMulti); the rest is queued on the transaction's master,
// which gives a wrong arity Redis's own error.
func (f *facade) clusterCommand(ss *session, cmd resp.Command) bool {
	if isFacadeCommand(cmd.Args) && f.refuseFacadeInMulti(ss, cmd.Args) {
		return true
	}
	if ss.inTransaction() {
		return false // queued in the transaction, on its master
	}
	return f.clusterFacade(ss, cmd)
}
