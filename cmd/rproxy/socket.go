package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// listenFDsStart is the first file descriptor systemd passes (sd_listen_fds(3)).
const listenFDsStart = 3

// activatedListener returns the listening socket systemd passed to this
// process (socket activation: LISTEN_PID is this process and LISTEN_FDS
// at least 1; the first is the client socket), or nil when none was. With
// it, a restart (an upgrade) refuses no client: connections made while no
// rproxy runs wait in the socket's backlog, which systemd keeps open, and
// the next rproxy accepts them. The variables are cleared, so that they
// do not pass to anything rproxy would start.
func activatedListener(getenv func(string) string, unsetenv func(string) error, pid int) (net.Listener, error) {
	if getenv("LISTEN_PID") == "" {
		return nil, nil
	}
	defer func() {
		for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
			unsetenv(v)
		}
	}()
	if p, err := strconv.Atoi(getenv("LISTEN_PID")); err != nil || p != pid {
		return nil, nil // meant for another process
	}
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("socket activation: LISTEN_FDS=%q: want at least one socket", getenv("LISTEN_FDS"))
	}
	f := os.NewFile(uintptr(listenFDsStart), "systemd socket")
	defer f.Close() // FileListener holds its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("socket activation: file descriptor %d: %w", listenFDsStart, err)
	}
	if _, ok := ln.(*net.TCPListener); !ok {
		ln.Close()
		return nil, fmt.Errorf("socket activation: file descriptor %d is not a TCP socket", listenFDsStart)
	}
	return ln, nil
}
