package resp

import (
	"math"
	"strings"
	"testing"
)

func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{string(AppendCommand(nil, []byte("SET"), []byte("k"), []byte("v\r\n"))), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n"},
		{string(AppendCommand(nil)), "*0\r\n"},
		{string(AppendCommand([]byte("x"), nil)), "x*1\r\n$0\r\n\r\n"},
		{string(AppendCommandString(nil, "GET", "key")), "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"},
		{string(AppendError(nil, "ERR bad\r\nthing\n")), "-ERR bad  thing \r\n"},
		{string(AppendError(nil, "")), "-\r\n"},
		{string(AppendBulk(nil, []byte("hello"))), "$5\r\nhello\r\n"},
		{string(AppendBulk(nil, nil)), "$0\r\n\r\n"},
		{string(AppendNullBulk(nil, 2)), "$-1\r\n"},
		{string(AppendNullBulk(nil, 3)), "_\r\n"},
		{string(AppendNullBulk(nil, 0)), "$-1\r\n"},
		{string(AppendInt(nil, 0)), ":0\r\n"},
		{string(AppendInt(nil, -12)), ":-12\r\n"},
		{string(AppendInt(nil, math.MinInt64)), ":-9223372036854775808\r\n"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
		// Everything encoded must frame as exactly one reply.
		if _, err := Parse([]byte(strings.TrimPrefix(tc.got, "x"))); err != nil {
			t.Errorf("%q does not parse: %v", tc.want, err)
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	key, val := []byte("key"), []byte("value")
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendCommand(buf[:0], []byte("SET"), key, val)
		b = AppendCommandString(b, "GET", "key")
		b = AppendError(b, "ERR x")
		b = AppendNullBulk(b, 3)
		b = AppendInt(b, 42)
		buf = b
	})
	if allocs != 0 {
		t.Fatalf("Append functions allocate %v times", allocs)
	}
}
