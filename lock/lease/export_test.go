package lease

// Crash stops renewing without releasing, as a crashed holder would.
func (l *Lease) Crash() { _ = l.s.Stop() }
