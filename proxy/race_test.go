//go:build race

package proxy_test

// raceEnabled: under the race detector sync.Pool drops a share of what
// is put back, which TestShortLivedConnectionAllocs bounds.
const raceEnabled = true
