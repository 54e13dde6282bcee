//go:build race

package resp

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// tests that count allocations through a pool do not apply.
const raceEnabled = true
