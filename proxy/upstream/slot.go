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

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), table driven.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
