package commanddiff_test

import (
	"os"
	"testing"

	"github.com/rproxy/rproxy/internal/redistest"
)

// TestMain stops the cluster nodes redistest started ahead once the tests
// are done, and removes their directories.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
