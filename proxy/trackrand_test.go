package proxy_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestClusterTrackingAsStandaloneRandomSequences: seeded random sessions
// of a RESP3 client tracking keys (default and OPTIN mode), with another
// client writing between its pipelines, some pipelines split in two
// writes, WATCH transactions and replies turned off, through rproxy in front of three
// masters and on one standalone Redis: the client's replies are the same
// bytes, and so are the keys it is told to invalidate. Pushes are compared
// as a sorted list at each sequence's end, after a read of every master's
// key (on a cluster a master's invalidations come in order with that
// master's replies only).
func TestClusterTrackingAsStandaloneRandomSequences(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl)
	direct := redistest.Start(t)
	// Keys on ten slots, with names that are the same on both sides; sync
	// keys, one per master, read at each sequence's end.
	var keys []string
	for i := range 10 {
		keys = append(keys, "{rt"+strconv.Itoa(i)+"}k")
	}
	syncKeys, _ := keyPerMaster(t, cl, "rtsync")
	rng := sequenceSource(t, 21, 22)
	type side struct{ c, w *rawClient }
	for seq := range 150 {
		optin := rng.IntN(2) == 0
		sides := [2]side{{dialClient(t, p.Addr), dialClient(t, p.Addr)}, {dialClient(t, direct.Addr), dialClient(t, direct.Addr)}}
		var replies [2]strings.Builder
		var pushed [2][]string
		// read reads one reply per command, the pushes before them noted.
		read := func(i, n int) {
			for n > 0 {
				raw := sides[i].c.read()
				if raw[0] == '>' {
					v, err := resp.Parse(raw)
					if err != nil || len(v.Elems) != 2 {
						t.Fatalf("seq %d: push %q", seq, raw)
					}
					if v.Elems[1].Kind == '_' {
						pushed[i] = append(pushed[i], "(null)")
					}
					for _, e := range v.Elems[1].Elems {
						pushed[i] = append(pushed[i], string(e.Str))
					}
					continue
				}
				replies[i].Write(raw)
				n--
			}
		}
		// runN sends cmds in one write and reads n replies.
		runN := func(n int, cmds ...[]string) {
			var b []byte
			for _, c := range cmds {
				b = resp.AppendCommandString(b, c...)
			}
			for i := range sides {
				sides[i].c.send(b)
				read(i, n)
			}
		}
		run := func(cmds ...[]string) { runN(len(cmds), cmds...) }
		for i := range sides {
			sides[i].c.do("HELLO", "3")
			if optin {
				sides[i].c.do("CLIENT", "TRACKING", "ON", "OPTIN")
			} else {
				sides[i].c.do("CLIENT", "TRACKING", "ON")
			}
		}
		key := func() string { return keys[rng.IntN(len(keys))] }
		for range 4 + rng.IntN(12) {
			if rng.IntN(10) == 0 {
				// Replies off: the writes still run, unanswered.
				k := key()
				runN(1, []string{"CLIENT", "REPLY", "OFF"}, []string{"SET", k, "off"}, []string{"INCR", strings.Replace(k, "}k", "}n", 1)},
					[]string{"GET", k}, []string{"CLIENT", "REPLY", "ON"})
				continue
			}
			if rng.IntN(8) == 0 {
				// A transaction typed command by command (redis-cli), keyless
				// commands first: it runs where its first key is.
				k := key()
				run([]string{"MULTI"})
				for range 1 + rng.IntN(2) {
					run([]string{"ECHO", "e"})
				}
				run([]string{"SET", k, "i"})
				run([]string{"GET", k})
				run([]string{[]string{"EXEC", "DISCARD"}[rng.IntN(2)]})
				continue
			}
			if rng.IntN(6) == 0 {
				// Optimistic locking: WATCH, GET; maybe another client's
				// write of the key; MULTI, SET, EXEC (a null when it wrote).
				k := key()
				run([]string{"WATCH", k}, []string{"GET", k})
				if rng.IntN(2) == 0 {
					for i := range sides {
						sides[i].w.do("SET", k, "w")
					}
				}
				run([]string{"MULTI"}, []string{"SET", k, "tx"}, []string{"EXEC"})
				continue
			}
			var cmds [][]string
			for range 1 + rng.IntN(4) {
				k := key()
				switch rng.IntN(8) {
				case 0, 1:
					cmds = append(cmds, []string{"GET", k})
				case 2:
					cmds = append(cmds, []string{"CLIENT", "CACHING", "YES"}, []string{"GET", k})
				case 3:
					cmds = append(cmds, []string{"CLIENT", "CACHING", "YES"}, []string{"MULTI"}, []string{"PTTL", k}, []string{"GET", k}, []string{"EXEC"})
				case 4:
					cmds = append(cmds, []string{"SET", k, strconv.Itoa(rng.IntN(100))})
				case 5:
					cmds = append(cmds, []string{"MGET", k, strings.Replace(k, "}k", "}j", 1)})
				case 6:
					cmds = append(cmds, []string{"INCR", strings.Replace(k, "}k", "}n", 1)}, []string{"GET", strings.Replace(k, "}k", "}n", 1)})
				default:
					cmds = append(cmds, []string{"EXISTS", k})
				}
			}
			if optin || cmds[0][0] != "CLIENT" {
				if cut := 1 + rng.IntN(len(cmds)); rng.IntN(4) == 0 && cut < len(cmds) {
					// In two writes, the first answered before the second
					// is sent: a transaction, or a CLIENT CACHING flag,
					// goes on in rproxy's next read.
					run(cmds[:cut]...)
					run(cmds[cut:]...)
				} else {
					run(cmds...)
				}
			}
			// The other client writes, on both sides.
			if rng.IntN(2) == 0 {
				k := key()
				w := []string{"SET", k, "w" + strconv.Itoa(rng.IntN(100))}
				if rng.IntN(3) == 0 {
					w = []string{"DEL", k}
				}
				for i := range sides {
					if r := sides[i].w.do(w...); strings.HasPrefix(r, "-") {
						t.Fatalf("seq %d: writer %v: %q", seq, w, r)
					}
				}
			}
		}
		for _, k := range syncKeys {
			run([]string{"EXISTS", k})
		}
		if replies[0].String() != replies[1].String() {
			t.Fatalf("seq %d (optin %v): replies through rproxy\n%q\ndirect\n%q", seq, optin, replies[0].String(), replies[1].String())
		}
		for i := range pushed {
			slices.Sort(pushed[i])
		}
		if !slices.Equal(pushed[0], pushed[1]) {
			t.Fatalf("seq %d (optin %v): invalidations through rproxy %v, direct %v", seq, optin, pushed[0], pushed[1])
		}
		for i := range sides {
			sides[i].c.nc.Close()
			sides[i].w.nc.Close()
		}
	}
}
