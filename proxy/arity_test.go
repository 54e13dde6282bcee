package proxy_test

import (
	"testing"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
)

// Commands rproxy answers or acts on itself get Redis's answer when Redis
// would refuse their arguments (and accept what Redis accepts): a wrong argument count (checked first, as
// Redis does, so RESET x did reset the session and CLIENT KILL got the
// policy's refusal) and integers Redis reads strictly ("+5" and "05" are
// not integers to Redis: HELLO 03 switched protocols, CLIENT KILL ID 05
// answered 0). Bytes compared with Redis's own, outside and inside MULTI
// and in stream mode.
func TestArgumentsRefusedAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	refused := [][]string{
		{"RESET", "x"}, {"HELLO", "03"}, {"HELLO", "+3"}, {"CLIENT", "KILL", "ID", "+5"},
		{"CLIENT", "KILL", "ID", "05"}, {"CLIENT", "UNBLOCK", "+1"}, {"CLIENT", "LIST", "ID", "+1"},
		{"CLIENT", "TRACKING", "ON", "REDIRECT", "+99"}, {"CLIENT", "KILL"}, {"CLIENT", "SETNAME"},
		{"SELECT", "+1"}, {"PING", "a", "b"}, {"EXEC", "x"}, {"GET"}, {"MULTI", "x"}, {"KEYS"},
		{"CLIENT", "LIST", "ID", "0"}, {"CLIENT", "LIST", "ID", "-1"}, // integers to Redis: no one listed
	}
	directAndThrough(t, rs, p, nil, nil, append(refused, []string{"CLIENT", "GETNAME"}, []string{"SET", "k", "v"}))
	directAndThrough(t, rs, p, func() { rs.Do(t, "DEL", "k") }, nil, [][]string{
		{"MULTI"}, {"SET", "k", "1"}, {"RESET", "x"}, {"CLIENT", "KILL"}, {"EXEC"}, {"GET", "k"},
	})
	directAndThrough(t, rs, p, nil, [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}},
		[][]string{{"RESET", "x"}, {"CLIENT", "KILL", "ID", "+5"}, {"HELLO", "03"}, {"CLIENT", "KILL"}, {"PING"}})
	directAndThrough(t, rs, p, func() { rs.Do(t, "DEL", "k") }, [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}}, [][]string{
		{"MULTI"}, {"SET", "k", "1"}, {"RESET", "x"}, {"CLIENT", "KILL"}, {"EXEC"}, {"GET", "k"},
	})
	directAndThrough(t, rs, p, nil, [][]string{{"SUBSCRIBE", "ch"}},
		[][]string{{"RESET", "x"}, {"CLIENT", "KILL"}, {"PING"}})
}

// A CLIENT TRACKING that Redis refuses changes nothing rproxy follows of
// the session's tracking: CLIENT GETREDIR (answered by rproxy in stream
// mode) says what Redis would, and tracking Redis kept on is still on
// (rproxy took a refused OFF for an OFF). Bytes compared with Redis's own.
func TestTrackingRefusedChangesNothing(t *testing.T) {
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr)
	getredir := []string{"CLIENT", "GETREDIR"}
	directAndThrough(t, rs, p, nil, nil, [][]string{
		{"CLIENT", "TRACKING", "on", "BCAST", "OPTIN"}, getredir,
		{"CLIENT", "TRACKING", "on", "REDIRECT"}, getredir,
		{"CLIENT", "TRACKING", "on", "PREFIX", "a"}, getredir,
		{"CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"}, getredir,
		{"CLIENT", "TRACKING", "maybe"}, getredir,
	})
	directAndThrough(t, rs, p, nil, [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "on", "OPTIN"}}, [][]string{
		{"CLIENT", "TRACKING", "off", "x"}, getredir,
		{"CLIENT", "TRACKING", "on", "BCAST"}, getredir,
		{"CLIENT", "TRACKING", "on", "OPTOUT"}, getredir,
		{"CLIENT", "TRACKING", "on", "REDIRECT", "99998", "REDIRECT", "99999"}, getredir,
		{"CLIENT", "TRACKING", "on", "NOLOOP"}, getredir,
		{"CLIENT", "TRACKING", "off"}, getredir,
	})
}
