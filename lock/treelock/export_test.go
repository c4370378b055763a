package treelock

// Crash stops renewing the session without releasing or deleting anything,
// as a process killed with kill -9 would.
func (m *Manager) Crash() {
	m.mu.Lock()
	s := m.cur
	m.cur = nil
	m.mu.Unlock()
	if s != nil {
		_ = s.s.Stop()
	}
}

// Watched is how many other sessions the Manager is watching.
func (m *Manager) Watched() int { return m.watch.Len() }
