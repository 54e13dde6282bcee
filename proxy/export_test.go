package proxy

// CommandNameForTest exposes commandName to the black-box tests.
var CommandNameForTest = commandName

// CoarseClockState exposes whether the server's coarse clock has stopped
// ticking, and how many reads have restarted it.
func (s *Server) CoarseClockState() (asleep bool, wakes int64) {
	return s.coarse.asleep.Load(), s.coarse.wakes.Load()
}
