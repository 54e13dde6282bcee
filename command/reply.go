package command

import (
	"fmt"
	"strings"

	"github.com/rproxy/rproxy/resp"
)

// FromReply builds a table from the raw bytes of a COMMAND reply (RESP2 or
// RESP3). Entries are [name, arity, flags, first key, last key, step, ...];
// from Redis 7 the tenth element lists subcommands in the same shape.
func FromReply(raw []byte) (*Table, error) {
	v, err := resp.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("command table: %w", err)
	}
	if v.Kind != '*' && v.Kind != '~' {
		return nil, fmt.Errorf("command table: COMMAND replied with type %q, want an array", v.Kind)
	}
	t := &Table{cmds: make(map[string]*Info, len(v.Elems)), source: "upstream"}
	for i, e := range v.Elems {
		info, err := entry(e)
		if err != nil {
			return nil, fmt.Errorf("command table: entry %d: %w", i, err)
		}
		if err := t.add(info); err != nil {
			return nil, err
		}
		if len(e.Elems) > 9 {
			for j, se := range e.Elems[9].Elems {
				sub, err := entry(se)
				if err != nil {
					return nil, fmt.Errorf("command table: %s subcommand %d: %w", info.Name, j, err)
				}
				if err := t.add(sub); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(t.cmds) == 0 {
		return nil, fmt.Errorf("command table: COMMAND returned no commands")
	}
	t.classify()
	return t, nil
}

func entry(e resp.Value) (*Info, error) {
	if len(e.Elems) < 6 {
		return nil, fmt.Errorf("want at least 6 elements, got %d", len(e.Elems))
	}
	name := strings.ToLower(string(e.Elems[0].Str))
	if name == "" {
		return nil, fmt.Errorf("empty command name")
	}
	flags := make([]string, 0, len(e.Elems[2].Elems))
	for _, f := range e.Elems[2].Elems {
		flags = append(flags, string(f.Str))
	}
	return &Info{
		Name:     name,
		Arity:    int(e.Elems[1].Int),
		Flags:    ParseFlags(flags),
		FirstKey: int(e.Elems[3].Int),
		LastKey:  int(e.Elems[4].Int),
		Step:     int(e.Elems[5].Int),
	}, nil
}
