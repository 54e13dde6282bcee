//go:build !race

package proxy_test

const raceEnabled = false
