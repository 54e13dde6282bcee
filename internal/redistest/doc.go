// Package redistest starts real redis-server processes for tests.
//
// Each call to Start launches a private redis-server bound to 127.0.0.1 on a
// free port, with persistence disabled and its working directory and log file
// in a per-test temporary directory. The server is stopped automatically when
// the test finishes (tb.Cleanup), and it is also killed by the kernel if the
// test binary dies (Linux PR_SET_PDEATHSIG), so a panicking test does not
// leak servers.
//
// StartCluster builds a Redis Cluster of such servers. Nodes of its default
// arguments are started ahead, while the previous test runs (spares.go): a
// master started on demand keeps the cluster down for its first 2 s. A
// package whose tests call StartCluster runs them through Main from its
// TestMain, which stops the nodes left over and removes their directories.
//
// Typical use:
//
//	srv := redistest.Start(t)
//	reply := srv.Do(t, "SET", "k", "v") // raw RESP bytes: "+OK\r\n"
//	srv.Kill()                         // simulate an upstream crash
//	srv.Restart(t)                     // same port, empty dataset
//
// Start fails the test with an installation hint if redis-server is not on
// PATH; `make test` installs it via scripts/ensure-redis.sh.
//
// The package is test-only infrastructure: it talks to Redis over raw RESP
// with the project's own resp reader, no client library.
package redistest
