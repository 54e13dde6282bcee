package commanddiff_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/resp"
)

// docLists returns, for each command and subcommand of the server at addr,
// two argument lists made from its COMMAND DOCS: the required arguments
// only, and every optional one once more (oneof: the last choice, multiple:
// twice). Values are made to be valid where a name says what it is (a key
// of the command's group's type, a stream id, a member); they reach the
// commands' success paths, which the fixed argLists mostly do not.
func docLists(t *testing.T, addr string) map[string][][]string {
	t.Helper()
	r, err := dial(t, addr).run([][]string{{"COMMAND", "DOCS"}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := resp.Parse(r[0])
	if err != nil || len(v.Elems) < 400 {
		t.Fatalf("COMMAND DOCS: %d elements (%v)", len(v.Elems), err)
	}
	out := make(map[string][][]string)
	var add func(name string, doc resp.Value)
	add = func(name string, doc resp.Value) {
		fields := docFields(doc)
		if args, ok := fields["arguments"]; ok {
			key := keyOfGroup[string(fields["group"].Str)]
			if key == "" {
				key = "k"
			}
			out[name] = [][]string{docArgs(args.Elems, key, false), docArgs(args.Elems, key, true)}
		}
		if subs, ok := fields["subcommands"]; ok {
			for i := 0; i+1 < len(subs.Elems); i += 2 {
				add(string(subs.Elems[i].Str), subs.Elems[i+1])
			}
		}
	}
	for i := 0; i+1 < len(v.Elems); i += 2 {
		add(string(v.Elems[i].Str), v.Elems[i+1])
	}
	return out
}

// docFields is a doc map (a flat array in RESP2) by field name.
func docFields(doc resp.Value) map[string]resp.Value {
	m := make(map[string]resp.Value, len(doc.Elems)/2)
	for i := 0; i+1 < len(doc.Elems); i += 2 {
		m[string(doc.Elems[i].Str)] = doc.Elems[i+1]
	}
	return m
}

// keyOfGroup is the seed key (flush, data) of each command group's type.
var keyOfGroup = map[string]string{
	"string": "k", "bitmap": "k", "list": "l", "hash": "h", "sorted-set": "z", "set": "s",
	"stream": "x", "geo": "g", "hyperloglog": "hl",
}

// docArgs is the argument list of args (COMMAND DOCS' "arguments"), key the
// key each key argument names; full includes the optional ones. A
// "numkeys" counts the key arguments after it.
func docArgs(args []resp.Value, key string, full bool) []string {
	g := &docGen{key: key, full: full, numkeysAt: -1}
	g.args(args)
	if g.numkeysAt >= 0 {
		g.out[g.numkeysAt] = strconv.Itoa(g.keysAfter)
	}
	return g.out
}

// docGen builds one argument list (docArgs).
type docGen struct {
	key       string
	full      bool
	out       []string
	numkeysAt int // where "numkeys" is in out (-1: none)
	keysAfter int // key arguments after it
}

func (g *docGen) args(args []resp.Value) {
	for _, a := range args {
		f := docFields(a)
		flags := map[string]bool{}
		for _, fl := range f["flags"].Elems {
			flags[string(fl.Str)] = true
		}
		if flags["optional"] && !g.full {
			continue
		}
		times := 1
		if flags["multiple"] && g.full {
			times = 2
		}
		for range times {
			g.arg(f)
		}
	}
}

// arg adds one argument's words (its token first, where it has one).
func (g *docGen) arg(f map[string]resp.Value) {
	typ := string(f["type"].Str)
	if tok := f["token"]; len(tok.Str) > 0 {
		g.out = append(g.out, string(tok.Str))
		if typ == "pure-token" {
			return
		}
	}
	switch typ {
	case "block":
		g.args(f["arguments"].Elems)
	case "oneof":
		choices := f["arguments"].Elems
		if len(choices) == 0 {
			return
		}
		pick := choices[0]
		if g.full {
			pick = choices[len(choices)-1]
		}
		if tok := docFields(pick)["token"]; string(tok.Str) == "*" && len(choices) > 1 {
			pick = choices[1] // XADD's *: an id from the clock, another on each server
		}
		g.arg(docFields(pick))
	case "key":
		g.out = append(g.out, g.key)
		if g.numkeysAt >= 0 {
			g.keysAfter++
		}
	case "integer":
		if string(f["name"].Str) == "numkeys" {
			g.numkeysAt = len(g.out)
		}
		g.out = append(g.out, "1")
	case "double":
		g.out = append(g.out, "0.01") // also a blocking command's timeout: it returns at once
	case "unix-time":
		g.out = append(g.out, "4102444800")
	case "pattern":
		g.out = append(g.out, "*")
	default:
		g.out = append(g.out, valueNamed(string(f["name"].Str)))
	}
}

// valueNamed is a valid value for a string argument, by its name where it
// says what it is.
func valueNamed(name string) string {
	switch {
	case name == "id" || strings.HasSuffix(name, "-id"):
		return "2-1"
	case name == "start":
		return "-"
	case name == "end":
		return "+"
	case name == "field":
		return "f"
	case name == "member" || name == "element" || name == "pivot":
		return "a"
	case name == "group" || name == "groupname":
		return "gr"
	case name == "consumer" || name == "consumername":
		return "c"
	case name == "script":
		return "return 1"
	case name == "parameter":
		return "maxmemory"
	case name == "channel" || name == "shardchannel":
		return "ch"
	case name == "threshold":
		return "1"
	}
	return "v"
}
