package main

import "testing"

func TestAutoProcs(t *testing.T) {
	for _, tc := range []struct {
		cpus     int
		upstream string
		env      bool
		want     int
	}{
		{2, "127.0.0.1:6379", false, 1},
		{2, "localhost:6379", false, 1},
		{2, "[::1]:6379", false, 1},
		{16, "127.0.0.1:6379", false, 15},
		{2, "10.0.0.5:6379", false, 2},
		{16, "redis.internal:6379", false, 16},
		{1, "127.0.0.1:6379", false, 1},
		{4, "127.0.0.1:6379", true, 4}, // GOMAXPROCS set: as given
	} {
		if got := autoProcs(tc.cpus, tc.upstream, tc.env); got != tc.want {
			t.Errorf("autoProcs(%d, %q, %v) = %d, want %d", tc.cpus, tc.upstream, tc.env, got, tc.want)
		}
	}
}
