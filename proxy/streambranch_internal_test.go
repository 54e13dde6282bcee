package proxy

import (
	"bytes"
	"strings"
	"testing"
)

// A new branch of a session tracking in BCAST mode tracks every prefix
// Redis holds for the session, not only the last command's: each CLIENT
// TRACKING on adds its prefixes to the earlier ones.
func TestBranchTrackingArgsKeepsEveryPrefix(t *testing.T) {
	split := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	for _, tc := range []struct {
		bcast    bool
		prefixes []string
		args     string
		want     string
	}{
		{true, []string{"a", "c"}, "CLIENT TRACKING on REDIRECT 5 BCAST PREFIX c NOLOOP", "CLIENT TRACKING on REDIRECT 5 BCAST NOLOOP PREFIX a PREFIX c"},
		{true, []string{""}, "CLIENT TRACKING on BCAST", "CLIENT TRACKING on BCAST"},
		{true, []string{"prefix"}, "CLIENT TRACKING on REDIRECT 7 bcast prefix prefix", "CLIENT TRACKING on REDIRECT 7 bcast PREFIX prefix"},
		{false, nil, "CLIENT TRACKING on OPTIN NOLOOP", "CLIENT TRACKING on OPTIN NOLOOP"},
		{false, nil, "CLIENT TRACKING off", ""},
	} {
		ss := &session{tracking: trackingState{trackBcast: tc.bcast}}
		for _, p := range tc.prefixes {
			ss.tracking.trackPrefixes = append(ss.tracking.trackPrefixes, []byte(p))
		}
		got := bytes.Join(ss.branchTrackingArgs(split(tc.args)), []byte(" "))
		if string(got) != tc.want {
			t.Errorf("branchTrackingArgs(%q) with prefixes %q = %q, want %q", tc.args, tc.prefixes, got, tc.want)
		}
	}
}
