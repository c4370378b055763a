package treelock

// Crash stops renewing the session without releasing or deleting anything,
// as a process killed with kill -9 would.
func (m *Manager) Crash() {
	m.mu.Lock()
	s := m.cur
	m.cur = nil
	m.mu.Unlock()
	if s != nil {
		close(s.stop)
		<-s.stopped
	}
}
