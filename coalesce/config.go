package coalesce

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rproxy/rproxy/command"
)

// DefaultRecent is Config.Recent's default: reads further apart than a few
// round trips do not overlap, and a short span keeps a spread keyspace
// from paying for flights nobody joins.
const DefaultRecent = 5 * time.Millisecond

// Config is the proxy's coalescing stage's configuration.
type Config struct {
	// Commands lists the read commands whose concurrent identical calls
	// share one upstream call (any case). Each must be read-only,
	// non-blocking and single-key. Empty: coalescing off.
	Commands []string
	// Window says which flights a read may join (Unsent or InFlight).
	Window Window
	// Recent is how long the filter remembers a read: only a key read
	// again within it starts a flight. Zero means DefaultRecent.
	Recent time.Duration
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	builtin := command.Builtin()
	for _, name := range c.Commands {
		info := builtin.Lookup([]byte(name))
		if info == nil || !info.Has(command.ReadOnly) || info.Handling != command.Forward || info.FirstKey != 1 || info.LastKey != 1 || info.Has(command.MovableKeys) {
			errs = append(errs, fmt.Errorf("coalesce: %q cannot be coalesced: only read-only, non-blocking, single-key commands can", strings.ToLower(name)))
		}
	}
	if c.Window != Unsent && c.Window != InFlight {
		errs = append(errs, fmt.Errorf("coalesce: unknown window %d", c.Window))
	}
	if c.Recent < 0 {
		errs = append(errs, fmt.Errorf("coalesce: recent must not be negative, got %v", c.Recent))
	}
	return errors.Join(errs...)
}

// RecentOrDefault is Recent, or DefaultRecent when it is zero.
func (c Config) RecentOrDefault() time.Duration {
	if c.Recent <= 0 {
		return DefaultRecent
	}
	return c.Recent
}
