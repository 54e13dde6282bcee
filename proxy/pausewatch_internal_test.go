package proxy

import (
	"testing"
	"time"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// TestPauseWatchFollowsOnlyPausesThatRun: a CLIENT PAUSE sent outside a
// transaction holds writes and may-replicate commands (not reads) until
// it ends or an UNPAUSE; one queued inside MULTI runs at EXEC, or never
// after DISCARD, so it is followed from the EXEC.
func TestPauseWatchFollowsOnlyPausesThatRun(t *testing.T) {
	now := time.Unix(1000, 0)
	p := &pauseWatch{clock: func() time.Time { return now }}
	client := &command.Info{Name: "client", Handling: command.Client}
	set := &command.Info{Name: "set", Flags: command.Write}
	get := &command.Info{Name: "get", Flags: command.ReadOnly}
	publish := &command.Info{Name: "publish"}
	held := func(ss *session, info *command.Info) bool {
		c := &call{info: info, cmd: resp.Command{Args: [][]byte{[]byte(info.Name)}}}
		p.command(ss, c)
		return c.heldByPause
	}
	send := func(ss *session, args ...string) {
		c := &call{info: client, cmd: resp.Command{}}
		for _, a := range args {
			c.cmd.Args = append(c.cmd.Args, []byte(a))
		}
		p.command(ss, c)
		// The parser's args point into the read buffer, which the
		// client's next read writes over before a queued pause's EXEC.
		for _, a := range c.cmd.Args {
			for i := range a {
				a[i] = 'x'
			}
		}
	}
	tx, plain := &session{multiSent: true}, &session{}
	send(tx, "CLIENT", "PAUSE", "20000", "WRITE")
	if held(plain, set) {
		t.Error("a CLIENT PAUSE queued in MULTI held a write")
	}
	send(plain, "CLIENT", "PAUSE", "20000", "WRITE")
	if !held(plain, set) || !held(plain, publish) || held(plain, get) {
		t.Errorf("during CLIENT PAUSE WRITE: SET held %v, PUBLISH %v, GET %v; want true, true, false", held(plain, set), held(plain, publish), held(plain, get))
	}
	send(tx, "CLIENT", "UNPAUSE")
	if !held(plain, set) {
		t.Error("a CLIENT UNPAUSE queued in MULTI ended the pause")
	}
	// Queued, then run at EXEC: followed from there.
	exec := func(ss *session) {
		ss.multiSent = false
		p.command(ss, &call{info: &command.Info{Name: "exec", Handling: command.Transaction}, cmd: resp.Command{Args: [][]byte{[]byte("EXEC")}}})
	}
	exec(tx)
	if held(plain, set) {
		t.Error("the CLIENT UNPAUSE run by EXEC left writes held")
	}
	now = now.Add(21 * time.Second)
	if held(plain, set) {
		t.Error("a write held after the pause's end")
	}
	tx.multiSent = true
	send(tx, "CLIENT", "PAUSE", "20000", "WRITE")
	exec(tx)
	if !held(plain, set) {
		t.Error("a CLIENT PAUSE run by EXEC did not hold a write")
	}
	send(plain, "CLIENT", "UNPAUSE")
	send(plain, "CLIENT", "PAUSE", "20000")
	if !held(plain, get) {
		t.Error("CLIENT PAUSE (mode ALL) did not hold a read")
	}
	send(plain, "CLIENT", "UNPAUSE")
	if held(plain, set) {
		t.Error("a write held after CLIENT UNPAUSE")
	}
}
