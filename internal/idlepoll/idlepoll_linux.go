//go:build linux

package idlepoll

import (
	"fmt"
	"sync"
	"syscall"
)

// Poller holds idle sockets until each is readable.
type Poller struct {
	epfd   int
	wakeR  int // the read end of a pipe in the set: Close wakes the loop
	wakeW  int
	mu     sync.Mutex
	next   Token
	closed bool
	// waiting maps a descriptor to its Wait; one Wait per descriptor.
	waiting map[int32]waiting
	done    chan struct{}
}

type waiting struct {
	token Token
	w     Waiter
}

// New starts a Poller and its goroutine.
func New() (*Poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idlepoll: epoll_create1: %w", err)
	}
	var pipe [2]int
	if err := syscall.Pipe2(pipe[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("idlepoll: pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(pipe[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, pipe[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(pipe[0])
		syscall.Close(pipe[1])
		return nil, fmt.Errorf("idlepoll: epoll_ctl: %w", err)
	}
	p := &Poller{epfd: epfd, wakeR: pipe[0], wakeW: pipe[1], waiting: map[int32]waiting{}, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// Wait registers fd, a socket that had nothing to read, and calls w.Ready
// once it is readable or hung up (at once if it already is). The caller
// must not close fd before Ready is called or Cancel returns true.
func (p *Poller) Wait(fd int, w Waiter) (Token, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, fmt.Errorf("idlepoll: closed")
	}
	if _, ok := p.waiting[int32(fd)]; ok {
		return 0, fmt.Errorf("idlepoll: descriptor %d already waits", fd)
	}
	p.next++
	t := p.next
	// One-shot: the socket leaves the set's readiness after one report,
	// and Ready (or Cancel) removes it.
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(fd), Pad: int32(t)}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return 0, fmt.Errorf("idlepoll: epoll_ctl add %d: %w", fd, err)
	}
	p.waiting[int32(fd)] = waiting{token: t, w: w}
	return t, nil
}

// Cancel removes fd's Wait t. It reports true if the Wait was still
// pending: its Ready will not be called, and the caller owns the socket
// again. False means Ready has been or is being called.
func (p *Poller) Cancel(fd int, t Token) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if wt, ok := p.waiting[int32(fd)]; !ok || wt.token != t {
		return false
	}
	delete(p.waiting, int32(fd))
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil) // fd is still open: only a kernel fault fails it
	return true
}

// Len returns how many sockets wait.
func (p *Poller) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting)
}

// Close stops the Poller: the sockets still waiting are never reported
// (their owners close them). It waits for the goroutine to end.
func (p *Poller) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	syscall.Write(p.wakeW, []byte{0})
	<-p.done
	syscall.Close(p.epfd)
	syscall.Close(p.wakeR)
	syscall.Close(p.wakeW)
}

func (p *Poller) loop() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	for {
		// A blocking system call: the thread waits here, and the runtime
		// hands its P to the goroutines that run.
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return // EBADF or EINVAL: the set is gone
		}
		for i := range n {
			ev := &events[i]
			if ev.Fd == int32(p.wakeR) {
				return
			}
			p.mu.Lock()
			wt, ok := p.waiting[ev.Fd]
			if ok && wt.token == Token(ev.Pad) {
				delete(p.waiting, ev.Fd)
				syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
			} else {
				ok = false // cancelled after epoll_wait reported it
			}
			p.mu.Unlock()
			if ok {
				wt.w.Ready()
			}
		}
	}
}
