// Package procs starts, watches and stops the servers that the benchmark
// programs in bench/cmd measure (redis-server, nutcracker and rproxy), and
// reads what they need about processes and the machine from /proc.
//
// Children are started by a [Set], which puts each in its own process
// group and gives it Pdeathsig SIGKILL, so that a benchmark killed with
// SIGKILL leaks no servers. Pdeathsig fires when the OS *thread* that
// started the child exits, not the process; a program using this package
// must therefore lock its main goroutine to the main thread, in its own
// init:
//
//	func init() { runtime.LockOSThread() }
//
// and start children from the main goroutine only.
//
// The package has no package-level state: a program holds one Set and
// calls [Set.StopAll] on exit and on a signal.
package procs
