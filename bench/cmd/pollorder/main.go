// Command pollorder measures in which order a Go server serves two client
// connections whose requests arrive a few microseconds apart: the question
// behind the cross-connection order races of Redis's Tcl suite through
// rproxy (docs/suites.md). Redis's single event loop serves sockets in the
// order they became readable; Go's poller hands the goroutines readied by
// one poll to the scheduler as a list it builds by pushing to the front
// (runtime.netpollready), so the later arrival tends to run first.
//
// It runs the server in a child process (-procs sets its GOMAXPROCS), so
// that the client's writes and the server's poll are not on one scheduler,
// then, for each gap, writes "a" on one connection and "b" on the other
// gap µs later, n times, and counts how often b was served first.
//
//	go run ./bench/cmd/pollorder -procs 1 -gaps 0,5,20,50 -n 2000
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	procs := flag.Int("procs", 1, "GOMAXPROCS of the server process")
	gaps := flag.String("gaps", "0,5,10,20,50", "comma-separated µs between the two writes")
	n := flag.Int("n", 2000, "pairs of writes per gap")
	serve := flag.String("serve", "", "internal: run as the server on this address")
	flag.Parse()
	if *serve != "" {
		runtime.GOMAXPROCS(*procs)
		if err := server(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "pollorder server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*procs, *gaps, *n); err != nil {
		fmt.Fprintln(os.Stderr, "pollorder:", err)
		os.Exit(1)
	}
}

func run(procs int, gaps string, n int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-serve", addr, "-procs", strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for _, g := range strings.Split(gaps, ",") {
		gap, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil {
			return fmt.Errorf("gap %q: %w", g, err)
		}
		later, err := measure(addr, time.Duration(gap)*time.Microsecond, n)
		if err != nil {
			return err
		}
		fmt.Printf("server GOMAXPROCS %d, gap %2d µs: the later write served first in %4d of %d (%.0f%%)\n",
			procs, gap, later, n, 100*float64(later)/float64(n))
	}
	return nil
}

// measure dials the server twice and reports how many of n pairs of
// writes, b gap after a, the server served b first.
func measure(addr string, gap time.Duration, n int) (int, error) {
	var a, b net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if a, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	defer a.Close()
	if b, err = net.Dial("tcp", addr); err != nil {
		return 0, err
	}
	defer b.Close()
	later, first := 0, make([]byte, 1)
	for range n {
		time.Sleep(200 * time.Microsecond) // the server waits in its poll
		if _, err := a.Write([]byte("a")); err != nil {
			return 0, err
		}
		for t := time.Now(); time.Since(t) < gap; {
		}
		if _, err := b.Write([]byte("b")); err != nil {
			return 0, err
		}
		if _, err := a.Read(first); err != nil {
			return 0, err
		}
		if first[0] == 'b' {
			later++
		}
	}
	return later, nil
}

// server serves pairs of connections: each request's arrival is numbered,
// and after each pair the first connection is told which of the two
// requests was read first.
func server(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		a, err := ln.Accept()
		if err != nil {
			return err
		}
		b, err := ln.Accept()
		if err != nil {
			return err
		}
		var seq atomic.Int64
		var first atomic.Value
		handle := func(c net.Conn, name byte) {
			buf := make([]byte, 16)
			for {
				if _, err := c.Read(buf); err != nil {
					if !errors.Is(err, net.ErrClosed) {
						a.Close()
					}
					return
				}
				if seq.Add(1)%2 == 1 {
					first.Store(name)
				} else {
					a.Write([]byte{first.Load().(byte)})
				}
			}
		}
		go handle(a, 'a')
		go handle(b, 'b')
	}
}
