package lease

// Crash stops renewing without releasing, as a crashed holder would.
func (l *Lease) Crash() {
	l.mu.Lock()
	l.released = true
	close(l.stop)
	l.mu.Unlock()
	<-l.stopped
}
