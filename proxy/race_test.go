//go:build race

package proxy_test

// raceEnabled: the race detector doubles goroutine stacks, which
// TestIdleConnectionMemory bounds.
const raceEnabled = true
