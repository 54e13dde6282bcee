//go:build !race

package hotkey

const raceEnabled = false
