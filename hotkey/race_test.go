//go:build race

package hotkey

// raceEnabled: the race detector makes each atomic add cost about 100x, so
// long single-goroutine loops are shortened under it (they race nothing).
const raceEnabled = true
