package commanddiff_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
)

// In auth.mode passthrough, a client logged in as one of Redis's own users
// (the default user, with requirepass, or an ACL user) gets Redis's bytes
// for every command: plain in RESP2, inside MULTI, and in stream mode
// (HELLO 3 AUTH, then tracking on).
func TestEveryCommandPassthroughAsRedis(t *testing.T) {
	rs := redistest.Start(t)
	names, fromDocs := allNames(t, rs.Addr), docLists(t, rs.Addr)
	app := []string{"ACL", "SETUSER", "app", "on", ">apppw", "~*", "&*", "+@all"}
	rs.Do(t, "CONFIG", "SET", "requirepass", "adminpw")
	admin := dial(t, rs.Addr)
	if _, err := admin.run([][]string{{"AUTH", "adminpw"}, app}); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, rs.Addr, func(c *proxy.Config) {
		c.AuthPassthrough = true
		c.Upstream.Username, c.Upstream.Password = "app", "apppw"
	})
	reset := func() {
		if _, err := admin.run(slices.Concat(flush, data, users, [][]string{app})); err != nil {
			t.Fatalf("seeding: %v", err)
		}
	}
	var compared []string
	for _, name := range names {
		if _, skip := notComparedPassthrough[name]; !skip {
			compared = append(compared, name)
		}
	}
	variants := func(cmd []string, _ int) []variant {
		return []variant{
			{false, [][]string{{"AUTH", "adminpw"}, cmd, {"PING", "next"}}},
			{false, [][]string{{"AUTH", "app", "apppw"}, {"MULTI"}, cmd, {"EXEC"}, {"PING", "next"}}},
			{false, [][]string{{"HELLO", "3", "AUTH", "app", "apppw"}, {"CLIENT", "TRACKING", "on"}, cmd, {"PING", "next"}}},
		}
	}
	compareEveryCommand(t, rs.Addr, p.Addr, reset, reset, compared, fromDocs, allowedPassthrough, variants)
}

// notComparedPassthrough are the commands left out in passthrough mode,
// and why, besides notCompared.
var notComparedPassthrough = map[string]string{
	"reset":            "logs out: after it a client runs as rproxy's upstream user (docs/security.md), where Redis answers NOAUTH",
	"acl|setuser":      "could change the users the cases log in as",
	"acl|deluser":      "as acl|setuser",
	"config|resetstat": "the shipped policy refuses it, but only where the client has not AUTHed",
}

// allowedPassthrough: what allowed says, and AUTH in stream mode, which
// passthrough refuses (docs/commands.md).
func allowedPassthrough(script [][]string, through string) bool {
	return allowed(script, through) || strings.Contains(through, "-ERR rproxy: AUTH inside a transaction or in pub/sub mode is not supported")
}
