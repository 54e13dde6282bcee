package coalesce

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := (Config{Commands: []string{"GET", "hget", "strlen"}, Window: InFlight}).Validate(); err != nil {
		t.Fatalf("read-only single-key commands: %v", err)
	}
	err := Config{Commands: []string{"get", "set", "mget", "blpop", "nosuch"}, Window: 7, Recent: -time.Millisecond}.Validate()
	for _, want := range []string{`"set" cannot`, `"mget" cannot`, `"blpop" cannot`, `"nosuch" cannot`, "unknown window 7", "recent must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q in it", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), `"get"`) {
		t.Errorf("Validate() refused get: %v", err)
	}
	if got := (Config{}).RecentOrDefault(); got != DefaultRecent {
		t.Errorf("RecentOrDefault() of zero = %v, want %v", got, DefaultRecent)
	}
}
