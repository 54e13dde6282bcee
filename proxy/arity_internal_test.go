package proxy

import (
	"testing"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
)

// BenchmarkArityCheck is what the first stage costs every command that
// passes it: a GET, and a CLIENT subcommand (looked up in the container).
func BenchmarkArityCheck(b *testing.B) {
	table := command.Builtin()
	for _, args := range [][][]byte{
		{[]byte("GET"), []byte("k")},
		{[]byte("CLIENT"), []byte("GETNAME")},
	} {
		c := &call{cmd: resp.Command{Args: args}, info: table.Lookup(args[0]), table: table}
		b.Run(string(args[0]), func(b *testing.B) {
			for b.Loop() {
				if (arityCheck{}).command(nil, c) {
					b.Fatal("refused")
				}
			}
		})
	}
}
