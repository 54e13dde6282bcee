package resp

import "testing"

func TestIsCanonicalCommand(t *testing.T) {
	for raw, want := range map[string]bool{
		"*1\r\n$4\r\nPING\r\n":                            true,
		"*2\r\n$3\r\nGET\r\n$0\r\n\r\n":                   true,
		"*1\r\n$04\r\nPING\r\n":                           false, // Redis: invalid bulk length
		"*01\r\n$4\r\nPING\r\n":                           false, // Redis: invalid multibulk length
		"*1\r\n$+4\r\nPING\r\n":                           false,
		"*1\r\n$-0\r\n\r\n":                               false,
		"*0\r\n":                                          false,
		"*1\r\n$4\r\nPIN\r\n":                             false,
		"*1\r\n$4\r\nPING\r\nextra":                       false,
		"PING\r\n":                                        false,
		"*1\r\n$4\nPING\r\n":                              false,
		"*1\r\n$99999999999999999999\r\nPING\r\n":         false,
		string(AppendCommandString(nil, "SET", "k", "v")): true,
	} {
		if got := IsCanonicalCommand([]byte(raw)); got != want {
			t.Errorf("IsCanonicalCommand(%q) = %v, want %v", raw, got, want)
		}
	}
}

func FuzzIsCanonicalCommand(f *testing.F) {
	f.Add([]byte("*1\r\n$4\r\nPING\r\n"))
	f.Add([]byte("*1\r\n$04\r\nPING\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !IsCanonicalCommand(raw) {
			return
		}
		// Canonical framing re-encodes to itself.
		v, err := Parse(raw)
		if err != nil || v.Kind != '*' {
			t.Fatalf("canonical %q does not parse: %v", raw, err)
		}
		args := make([][]byte, len(v.Elems))
		for i, e := range v.Elems {
			args[i] = e.Str
		}
		if got := AppendCommand(nil, args...); string(got) != string(raw) {
			t.Fatalf("canonical %q re-encodes to %q", raw, got)
		}
	})
}
