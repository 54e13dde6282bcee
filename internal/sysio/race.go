//go:build race

package sysio

import "syscall"

// Under the race detector, I/O orders what it connects as syscall.Read
// and syscall.Write do (the runtime's ioSync: a write happens before the
// read that gets its bytes): each raw call is paired with an empty one
// through package syscall, which records that edge.

func afterRead(fd uintptr) { syscall.Read(int(fd), nil) }

func beforeWrite(fd uintptr) { syscall.Write(int(fd), nil) }
