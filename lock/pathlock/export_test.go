package pathlock

import "strings"

// UseFourModes replaces SIX by pick in the lattice (the four-mode scheme) until
// the returned restore is called.
func UseFourModes(pick Mode) (restore func()) {
	saved := lubFn
	lubFn = func(a, b Mode) Mode {
		if m := lub(a, b); m != SIX {
			return m
		}
		return pick
	}
	return func() { lubFn = saved }
}

// Waiting is how many requests queue on path.
func (l *Locker) Waiting(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.root
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if n == nil || c == "" {
			break
		}
		n = n.child(c)
	}
	if n != nil {
		return len(n.queue)
	}
	return 0
}
