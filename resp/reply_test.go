package resp

import "testing"

func TestReplyHelpers(t *testing.T) {
	if n, rest, ok := Header([]byte("*2\r\n:1\r\n:2\r\n"), '*'); !ok || n != 2 || string(rest) != ":1\r\n:2\r\n" {
		t.Errorf("Header(array) = %d %q %v", n, rest, ok)
	}
	for _, bad := range []string{"*-1\r\n", "*x\r\n", "+OK\r\n", "*2", "", "$2\r\nab\r\n"} {
		if _, _, ok := Header([]byte(bad), '*'); ok {
			t.Errorf("Header(%q, '*') accepted", bad)
		}
	}
	if p, ok := Payload([]byte("$3\r\nabc\r\n"), '$'); !ok || string(p) != "abc" {
		t.Errorf("Payload = %q %v", p, ok)
	}
	for _, bad := range []string{"$3\r\nab\r\n", "$3\r\nabcd\r\n", "$-1\r\n", "=3\r\nabc\r\n"} {
		if _, ok := Payload([]byte(bad), '$'); ok {
			t.Errorf("Payload(%q) accepted", bad)
		}
	}
	if n, ok := Int([]byte(":-42\r\n")); !ok || n != -42 {
		t.Errorf("Int = %d %v", n, ok)
	}
	for _, bad := range []string{":\r\n", ":4x\r\n", "$1\r\n4\r\n", ":4"} {
		if _, ok := Int([]byte(bad)); ok {
			t.Errorf("Int(%q) accepted", bad)
		}
	}
	for _, r := range []string{"$-1\r\n", "_\r\n", "*-1\r\n"} {
		if !IsNull([]byte(r)) {
			t.Errorf("IsNull(%q) = false", r)
		}
	}
	if IsNull([]byte("$0\r\n\r\n")) {
		t.Error("an empty string is not null")
	}
}
