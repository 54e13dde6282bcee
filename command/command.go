package command

import (
	"fmt"
	"strings"
)

// Flags are the command flags from COMMAND, as bits.
type Flags uint32

// The flags the proxy acts on. Names follow COMMAND's flag strings.
const (
	Write Flags = 1 << iota
	ReadOnly
	Blocking
	PubSub
	Admin
	NoScript
	Fast
	MovableKeys
	Loading
	Stale
	NoAuth
)

var flagNames = map[string]Flags{
	"write":       Write,
	"readonly":    ReadOnly,
	"blocking":    Blocking,
	"pubsub":      PubSub,
	"admin":       Admin,
	"noscript":    NoScript,
	"fast":        Fast,
	"movablekeys": MovableKeys,
	"loading":     Loading,
	"stale":       Stale,
	"no_auth":     NoAuth,
}

// ParseFlags turns COMMAND's flag strings into Flags; unknown flags are ignored
// because newer servers add flags the proxy does not act on.
func ParseFlags(names []string) Flags {
	var f Flags
	for _, n := range names {
		f |= flagNames[strings.ToLower(n)]
	}
	return f
}

// Handling says what the proxy does with a command.
type Handling uint8

const (
	// Forward sends the command on a shared upstream connection as it came.
	Forward Handling = iota
	// Hello switches the session's protocol (answered with the upstream's HELLO reply).
	Hello
	// Client is CLIENT: some subcommands are answered per session, some forwarded, some refused.
	Client
	// Select is SELECT: db 0 is forwarded (shared connections sit in db 0), others refused for now.
	Select
	// Quit answers +OK and closes the client connection.
	Quit
	// Reset returns the session to its initial state.
	Reset
	// Unsupported commands need state rproxy does not keep yet (pub/sub,
	// AUTH, MONITOR, replication).
	Unsupported
	// BlockingCmd commands block their connection: they run on a connection
	// pinned to the session for the call.
	BlockingCmd
	// Transaction is MULTI, EXEC, DISCARD, WATCH and UNWATCH: MULTI and WATCH
	// pin a connection to the session until the transaction or watch ends.
	Transaction
	// Subscribe is SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their unsubscribes and
	// MONITOR: the session streams from a pinned connection from then on.
	Subscribe
)

// Invalidation says which keys a command may change, for caches of replies.
type Invalidation uint8

const (
	// InvalidatesNone: the command does not write keys.
	InvalidatesNone Invalidation = iota
	// InvalidatesKeys: a write to the command's key arguments (see Keys).
	InvalidatesKeys
	// InvalidatesUnknown: may write keys it does not declare (scripts,
	// functions, EXEC of a transaction).
	InvalidatesUnknown
	// InvalidatesAll: empties a whole database (FLUSHALL, FLUSHDB, SWAPDB).
	InvalidatesAll
)

// Info describes one command (or one subcommand, named "parent|sub").
type Info struct {
	Name     string // lower case, as COMMAND names it
	Arity    int    // COMMAND's arity: N exact, -N at least N (counting the name)
	Flags    Flags
	FirstKey int // COMMAND's key positions (0 when the command has no keys)
	LastKey  int
	Step     int
	Handling Handling
	// Invalidates says which cached keys a call may change.
	Invalidates Invalidation
	// ID numbers the table's top-level commands densely from 0 (Names), so
	// per-command state can live in a slice; subcommands share their
	// parent's ID.
	ID int
	// Subcommands by lower-case subcommand name, nil when there are none.
	Subcommands map[string]*Info
}

// Has reports whether all of f's bits are set.
func (i *Info) Has(f Flags) bool { return i.Flags&f == f }

// row is one entry of the built-in table.
type row struct {
	name                  string
	arity                 int
	flags                 string
	firstKey, lastKey, st int
}

// Table maps command names to Info. A Table is immutable once built, so it is
// shared by all sessions without locks and swapped whole when reloaded.
type Table struct {
	cmds   map[string]*Info
	names  []string // by Info.ID
	source string
}

// Names returns the top-level command names, indexed by Info.ID.
func (t *Table) Names() []string { return t.names }

// Source says where the table came from ("builtin" or "upstream").
func (t *Table) Source() string { return t.source }

// Len is the number of top-level commands.
func (t *Table) Len() int { return len(t.cmds) }

// maxName bounds the stack buffer used to lower-case names; longer names are
// not Redis commands and take the slow path.
const maxName = 32

// Lookup finds a command by name, case-insensitively, without allocating.
// It returns nil for unknown commands.
func (t *Table) Lookup(name []byte) *Info { return lookupIn(t.cmds, name) }

// LookupArgs finds the Info for a command line: the subcommand's when the
// command has subcommands and args names a known one, else the command's.
func (t *Table) LookupArgs(args [][]byte) *Info {
	if len(args) == 0 {
		return nil
	}
	info := t.Lookup(args[0])
	if info == nil || info.Subcommands == nil || len(args) < 2 {
		return info
	}
	if sub := info.Subcommand(args[1]); sub != nil {
		return sub
	}
	return info
}

// Subcommand finds i's subcommand of that name, case-insensitively and
// without allocating; nil when i has none of that name (or no
// subcommands).
func (i *Info) Subcommand(name []byte) *Info {
	if i.Subcommands == nil {
		return nil
	}
	return lookupIn(i.Subcommands, name)
}

// lookupIn lower-cases name into a stack buffer; the map lookup with
// string(buf) does not allocate.
func lookupIn(m map[string]*Info, name []byte) *Info {
	if len(name) > maxName {
		return m[strings.ToLower(string(name))]
	}
	var buf [maxName]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return m[string(buf[:len(name)])]
}

// Builtin returns the table generated from Redis 7.0's COMMAND reply.
func Builtin() *Table {
	t, err := fromRows(builtinRows, "builtin")
	if err != nil {
		// The rows are generated and tested; this cannot happen at run time.
		return &Table{cmds: map[string]*Info{}, source: "builtin"}
	}
	return t
}

func fromRows(rows []row, source string) (*Table, error) {
	t := &Table{cmds: make(map[string]*Info, len(rows)), source: source}
	for _, r := range rows {
		info := &Info{
			Name:     r.name,
			Arity:    r.arity,
			Flags:    ParseFlags(strings.Fields(r.flags)),
			FirstKey: r.firstKey,
			LastKey:  r.lastKey,
			Step:     r.st,
		}
		if err := t.add(info); err != nil {
			return nil, err
		}
	}
	t.classify()
	return t, nil
}

// add inserts a command, or a subcommand named "parent|sub" under its parent.
func (t *Table) add(info *Info) error {
	parent, sub, isSub := strings.Cut(info.Name, "|")
	if !isSub {
		if old, ok := t.cmds[info.Name]; ok {
			info.Subcommands, info.ID = old.Subcommands, old.ID
		} else {
			info.ID = len(t.names)
			t.names = append(t.names, info.Name)
		}
		t.cmds[info.Name] = info
		return nil
	}
	p, ok := t.cmds[parent]
	if !ok {
		return fmt.Errorf("command table: subcommand %q before its parent", info.Name)
	}
	if p.Subcommands == nil {
		p.Subcommands = make(map[string]*Info)
	}
	info.ID = p.ID
	p.Subcommands[sub] = info
	return nil
}

// classify sets each command's Handling from its name and flags. Keeping this
// in one place means a new server version's blocking or pub/sub command is
// refused by its flags even before the proxy knows its name.
func (t *Table) classify() {
	special := map[string]Handling{
		"hello":  Hello,
		"client": Client,
		"select": Select,
		"quit":   Quit,
		"reset":  Reset,
		// State the shared connections cannot hold (the sessions issue pins a
		// dedicated connection for these).
		"multi": Transaction, "exec": Transaction, "discard": Transaction,
		"watch": Transaction, "unwatch": Transaction,
		"auth": Unsupported, "monitor": Subscribe,
		"subscribe": Subscribe, "unsubscribe": Subscribe,
		"psubscribe": Subscribe, "punsubscribe": Subscribe,
		"ssubscribe": Subscribe, "sunsubscribe": Subscribe,
		// A replica's stream: the connection is the client's own from then
		// on, and what Redis sends (the RDB, then the command stream) is
		// copied to it byte for byte, as for pub/sub.
		"sync": Subscribe, "psync": Subscribe, "replconf": Subscribe,
		// WAIT and WAITAOF block their connection but are not flagged blocking.
		"wait": BlockingCmd, "waitaof": BlockingCmd,
	}
	for name, info := range t.cmds {
		info.Invalidates = invalidation(info)
		if h, ok := special[name]; ok {
			info.Handling = h
			continue
		}
		if info.Has(Blocking) {
			info.Handling = BlockingCmd
		}
	}
}

// invalidation classifies what a command may change. Scripts and functions
// are not flagged write by COMMAND (EVAL_RO and FCALL_RO are read-only).
func invalidation(info *Info) Invalidation {
	switch info.Name {
	case "flushall", "flushdb", "swapdb":
		return InvalidatesAll
	case "eval", "evalsha", "fcall", "exec":
		return InvalidatesUnknown
	}
	if info.Has(Write) {
		return InvalidatesKeys
	}
	return InvalidatesNone
}
