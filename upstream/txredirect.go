package upstream

import "bytes"

// TransactionStart, or'ed with InTransaction into the slot of a
// transaction's MULTI, marks where it begins. A transaction Redis
// discarded because its keys' slot had moved (each command redirected at
// queue time, its EXEC refused with EXECABORT) ran nothing, so a Router
// sends it again whole where the redirect says, as a cluster client does,
// instead of answering the client TRYAGAIN.
const TransactionStart = Slots << 2

// inTransaction reports whether command i of b is marked InTransaction.
func inTransaction(b *Batch, i int) bool {
	s := b.slots[i]
	return s >= 0 && s&InTransaction != 0
}

// transactionAt returns the commands start..end of the transaction that
// command i, marked InTransaction, is in: from its MULTI (marked
// TransactionStart) to the last command marked after it.
func transactionAt(b *Batch, i int) (start, end int, ok bool) {
	start = i
	for b.slots[start]&TransactionStart == 0 {
		if start--; start < 0 || !inTransaction(b, start) {
			return 0, 0, false
		}
	}
	end = i
	for end+1 < len(b.slots) && inTransaction(b, end+1) && b.slots[end+1]&TransactionStart == 0 {
		end++
	}
	return start, end, true
}

// txRedirect is a transaction to send again whole: commands start..end
// of the batch, to node (after ASKING for an ASK, after a pause for a
// TRYAGAIN), for slot.
type txRedirect struct {
	start, end int
	kind       string
	slot       int
	node       int32
}

var (
	okReply     = []byte("+OK\r\n")
	queuedReply = []byte("+QUEUED\r\n")
	execAbort   = []byte("-EXECABORT")
)

// transactionRedirect reports whether the transaction start..end was
// discarded by Redis for redirects alone, all of one kind to one node: its
// MULTI answered +OK, each command +QUEUED or redirected, its EXEC
// EXECABORT or redirected, and at least one redirect. A TRYAGAIN (the
// keys of a command, or of the whole transaction at EXEC, are split
// between the two nodes of a slot migration) counts as a redirect to the
// slot's master, where it goes again after a pause, as a command alone
// does; so does a CLUSTERDOWN (the node saw the cluster down, at queue
// time or at EXEC, and ran nothing). Anything else (a queue-time error,
// a DISCARD, an EXEC that ran) is the client's answer.
func (c *Cluster) transactionRedirect(b *Batch, start, end int) (txRedirect, bool) {
	t := txRedirect{start: start, end: end}
	if start == end || !bytes.Equal(b.Reply(start), okReply) {
		return t, false
	}
	redirected := false
	for k := start + 1; k <= end; k++ {
		rep := b.Reply(k)
		if bytes.Equal(rep, queuedReply) && k < end || k == end && bytes.HasPrefix(rep, execAbort) {
			continue
		}
		kind, slot, addr, ok := parseRedirect(rep)
		if !ok {
			return t, false
		}
		var d int32
		if kind == "tryagain" || kind == "clusterdown" {
			slot = int(b.slots[start] & (Slots - 1))
			if d = c.slots[slot].Load(); d < 0 {
				return t, false
			}
		} else {
			if !isRedirect(rep) || slot < 0 || slot >= Slots {
				return t, false
			}
			var err error
			if d, err = c.node(addr); err != nil {
				return t, false
			}
		}
		if redirected && (kind != t.kind || d != t.node) {
			return t, false
		}
		t.kind, t.slot, t.node, redirected = kind, slot, d, true
	}
	return t, redirected
}
