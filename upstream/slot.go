package upstream

import "bytes"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// SlotAny marks a command with no key: any node may run it.
const SlotAny = -1

// ReplicaRead, or'ed into a command's slot (Batch.AddSlot), lets a cluster
// Router send it to a replica of the slot's master, when the cluster has
// one; the command must be a read.
const ReplicaRead = Slots

// InTransaction, or'ed into a command's slot, marks a command of a
// transaction sent whole on the shared connections: a Router never sends
// it again alone after a MOVED, ASK or TRYAGAIN (it would run outside its
// transaction, which Redis has discarded). The whole transaction goes
// again where a redirect says when nothing else made Redis discard it
// (TransactionStart, txredirect.go); otherwise the client gets TRYAGAIN
// for the redirect, as a pinned session does (HideRedirects).
const InTransaction = Slots << 1

// Slot is the cluster hash slot of key: CRC16 (XMODEM) of the key, or of
// its hash tag (the bytes between the first '{' and the next '}', when not
// empty), modulo 16384, as Redis computes it.
func Slot(key []byte) int {
	if start, end, ok := HashTag(key); ok {
		key = key[start:end]
	}
	return int(crc16(key)) & (Slots - 1)
}

// HashTag finds key's hash tag, key[start:end]: the bytes between the
// first '{' and the next '}', when there are any. Without one (no '{', no
// '}' after it, or "{}") the whole key hashes.
func HashTag(key []byte) (start, end int, ok bool) {
	open := bytes.IndexByte(key, '{')
	if open < 0 {
		return 0, 0, false
	}
	n := bytes.IndexByte(key[open+1:], '}')
	if n <= 0 {
		return 0, 0, false
	}
	return open + 1, open + 1 + n, true
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0). It takes eight
// bytes per step through eight tables ("slicing by 8"): the CRC of the
// step's first two bytes, xored with the running CRC, and of the other six,
// each followed by the zero bytes that remain in the step, are independent
// lookups, where the byte-wise loop waits on the previous byte for each one.
// Cluster mode computes it for every command's key.
func crc16(b []byte) uint16 {
	var crc uint16
	for len(b) >= 8 {
		t := &crc16Tables
		crc = t[7][byte(crc>>8)^b[0]] ^ t[6][byte(crc)^b[1]] ^ t[5][b[2]] ^ t[4][b[3]] ^
			t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
		b = b[8:]
	}
	for _, c := range b {
		crc = crc<<8 ^ crc16Tables[0][byte(crc>>8)^c]
	}
	return crc
}

// crc16Tables[k][x] is the CRC of byte x followed by k zero bytes.
var crc16Tables = func() (t [8][256]uint16) {
	for i := range t[0] {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[0][i] = crc
	}
	for k := 1; k < len(t); k++ {
		for i := range t[k] {
			// One more zero byte: feed 0 through the byte-wise step.
			prev := t[k-1][i]
			t[k][i] = prev<<8 ^ t[0][byte(prev>>8)]
		}
	}
	return t
}()
