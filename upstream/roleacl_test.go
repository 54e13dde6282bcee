package upstream

import (
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestRoleDeniedByACLTellsNothing: a pool whose user may not run ROLE (an
// application user in auth.mode passthrough) still connects. In mode
// sentinel every dial confirmed the master with ROLE, and NOPERM failed
// the dial: such a user's clients got "upstream unavailable" for every
// command (the client suite's acl_user scenario found it in every
// library). In mode standalone the first dial asks ROLE for
// upstream.follow_master: a pool of such a user dialled first failed the
// same way. ROLE refused tells nothing; the connection is kept.
func TestRoleDeniedByACLTellsNothing(t *testing.T) {
	restrict := func(t *testing.T, rs *redistest.Server) {
		t.Helper()
		rs.Do(t, "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "+@all", "-role")
	}
	check := func(t *testing.T, p *Pool) {
		t.Helper()
		b := NewBatch()
		b.Add(resp.AppendCommandString(nil, "ACL", "WHOAMI"))
		b.Add(resp.AppendCommandString(nil, "ROLE"))
		p.Do(b)
		if got := string(b.Reply(0)); got != "$3\r\napp\r\n" {
			t.Fatalf("ACL WHOAMI: %q", got)
		}
		if got := string(b.Reply(1)); got[:7] != "-NOPERM" {
			t.Fatalf("ROLE as app: %q, want Redis's NOPERM", got)
		}
		d, err := p.Acquire(t.Context())
		if err != nil {
			t.Fatalf("a dedicated connection: %v", err)
		}
		p.Release(d)
	}
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinelReplicas(t, "acl", 0)
		restrict(t, g.Master)
		sen, err := NewSentinel(SentinelConfig{MasterName: g.Name, Addresses: g.Addrs()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sen.Close)
		p := testPool(t, "sentinel/acl", 2, func(c *Config) {
			c.Sentinel, c.Username, c.Password = sen, "app", "app-pw"
		})
		check(t, p)
	})
	t.Run("standalone", func(t *testing.T) {
		rs := redistest.Start(t)
		restrict(t, rs)
		follow := NewMasterFollow(nil, time.Second)
		p := testPool(t, rs.Addr, 2, func(c *Config) {
			c.Follow, c.Username, c.Password = follow, "app", "app-pw"
		})
		check(t, p)
	})
}
