package redistest

import (
	"os"
	"testing"
)

// TestMain stops the cluster nodes started ahead once the tests are done,
// and removes their directories.
func TestMain(m *testing.M) { os.Exit(Main(m)) }
