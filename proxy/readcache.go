package proxy

import (
	"github.com/cespare/xxhash/v2"
)

// tierReadCmd counts a tier.Cacheable command on its key, queues the tier's copy
// of its reply when it holds one, and else asks for a fill when the key is
// hot or under a cached prefix. The copy's variant is the protocol and the
// command's exact bytes. served: the reply is queued; hot: the key is hot
// or cached, so the read is worth coalescing.
//
// ss.flights.key is used as scratch: readMaybeJoined rebuilds it.
func (s *Server) tierReadCmd(ss *session, key, raw []byte) (served, hot bool) {
	hot, fill := s.hot.Observe(key, xxhash.Sum64(key))
	ss.flights.key = append(append(ss.flights.key[:0], byte(ss.proto)), raw...)
	if r, ok := s.hot.LookupVariant(key, ss.flights.key); ok {
		s.replyShared(ss, r)
		return true, true
	}
	if fill {
		s.hot.RequestFillVariant(key, ss.flights.key)
	}
	return false, hot || fill
}
