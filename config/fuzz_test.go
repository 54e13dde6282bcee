package config

import (
	"os"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts
// passes Validate and survives a Marshal/Parse round trip unchanged.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(exampleFile); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"---\n",
		"listen: \":7000\"\nadmin: \"127.0.0.1:9121\"\n",
		"upstream:\n  address: redis:6379\n  connections: 8\n  timeout: 250ms\n",
		"upstream: {dial_timeout: 3, reconnect_backoff_max: 1ms}\n",
		"limits:\n  max_bulk_len: 1 GB\n  max_query_buffer: 4096\n  idle_timeout: 1h30m\n",
		"limits: {max_clients: 1.5, max_bulk_len: -1}\n",
		"log:\n  level: debug\n  format: json\n",
		"upstrem: 1\n",
		"a: &x {b: 1}\nc: *x\n",
		"listen: a\n---\nlisten: b\n",
		"upstream: &u\n  connections: 3\nlimits: *u\n",
		"<<: {listen: \":1\"}\n",
		"!!map {listen: !!str 1}",
		"listen: !!binary aGVsbG8=\n",
		"[1, 2, 3]",
		"? [a]\n: b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that fails Validate: %v\ninput: %q", err, data)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse(out, "marshalled.yaml")
		if err != nil {
			t.Fatalf("re-Parse of Marshal output: %v\ninput: %q\nmarshalled:\n%s", err, data, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, back)
		}
	})
}
