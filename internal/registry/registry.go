// Package registry is the scheme → opener table that objstore and ledger
// backends register themselves in at init, as database/sql drivers do.
package registry

import (
	"slices"
	"sync"
)

// Registry maps URL schemes to openers of type T. The zero value is ready.
type Registry[T any] struct {
	mu sync.RWMutex
	m  map[string]T
}

// Register adds an opener; registering a scheme twice is a programming error
// and panics at start-up.
func (r *Registry[T]) Register(owner, scheme string, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[scheme]; dup {
		panic(owner + ": Register called twice for scheme " + scheme)
	}
	if r.m == nil {
		r.m = map[string]T{}
	}
	r.m[scheme] = v
}

// Get returns the opener of scheme.
func (r *Registry[T]) Get(scheme string) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.m[scheme]
	return v, ok
}

// Schemes lists the registered schemes, sorted.
func (r *Registry[T]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := make([]string, 0, len(r.m))
	for k := range r.m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}
