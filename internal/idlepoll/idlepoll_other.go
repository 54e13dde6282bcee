//go:build !linux

package idlepoll

// Poller is not available on this platform.
type Poller struct{}

// New returns ErrUnsupported.
func New() (*Poller, error) { return nil, ErrUnsupported }

// Wait is never called on a nil Poller.
func (p *Poller) Wait(fd int, w Waiter) (Token, error) { return 0, ErrUnsupported }

// Cancel reports false.
func (p *Poller) Cancel(fd int, t Token) bool { return false }

// Len returns 0.
func (p *Poller) Len() int { return 0 }

// Close does nothing.
func (p *Poller) Close() {}
