package proxy

import (
	"testing"

	"github.com/rproxy/rproxy/resp"
)

// PROXY CONFIG GET pattern matches dotted keys as CONFIG GET matches its
// parameters: globs, any case, several patterns, key and value pairs.
func TestConfigGetPattern(t *testing.T) {
	const effective = "listen: 127.0.0.1:6380\nlimits:\n  max_clients: 10\n  idle_timeout: 0s\ncoalesce:\n  commands:\n    - get\nauth:\n  users: {}\n"
	pairs := func(patterns ...string) []string {
		t.Helper()
		var args [][]byte
		for _, p := range patterns {
			args = append(args, []byte(p))
		}
		v, err := resp.Parse(configGet(effective, args))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range v.Elems {
			out = append(out, string(e.Str))
		}
		return out
	}
	for _, c := range []struct {
		patterns []string
		want     string
	}{
		{[]string{"limits.*"}, "limits.max_clients=10 limits.idle_timeout=0s"},
		{[]string{"LIMITS.MAX_*"}, "limits.max_clients=10"},
		{[]string{"listen", "coalesce.commands"}, "listen=127.0.0.1:6380 coalesce.commands=[get]"},
		{[]string{"auth.*"}, "auth.users={}"},
		{[]string{"nothing"}, ""},
		{[]string{"*"}, "listen=127.0.0.1:6380 limits.max_clients=10 limits.idle_timeout=0s coalesce.commands=[get] auth.users={}"},
	} {
		got := pairs(c.patterns...)
		s := ""
		for i := 0; i+1 < len(got); i += 2 {
			if s != "" {
				s += " "
			}
			s += got[i] + "=" + got[i+1]
		}
		if s != c.want {
			t.Errorf("PROXY CONFIG GET %v = %s, want %s", c.patterns, s, c.want)
		}
	}
	if r := string(configGet(effective, [][]byte{[]byte("[")})); r[0] != '-' {
		t.Errorf("a bad pattern = %q, want an error", r)
	}
}
