package tier

import "github.com/rproxy/rproxy/command"

// LockAcquire reports whether a command is a lock acquisition: SET with
// NX, or SETNX. Its reply is held for the tracking Barrier (proxy's afterWrite),
// so every write Redis applied before granting the lock, through any
// rproxy or client, has been invalidated here before the new holder can
// read: a lock handed over between rproxies never shows the new holder a
// value older than the one written under the previous lock.
func LockAcquire(info *command.Info, args [][]byte) bool {
	switch info.Name {
	case "setnx":
		return true
	case "set":
		for _, a := range args[min(3, len(args)):] {
			if len(a) == 2 && (a[0]|0x20) == 'n' && (a[1]|0x20) == 'x' {
				return true
			}
		}
	}
	return false
}
