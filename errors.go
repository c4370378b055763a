// Package cairn holds the error vocabulary every cairn layer shares, so a
// caller can ask one question of any error without knowing which layer
// returned it:
//
//   - ErrNotFound: the thing asked for does not exist (an object, a ledger
//     record, a folder to rename).
//   - ErrLost: something this process held is no longer its own (a lease, a
//     tree-lock session, a ledger claim, a folder operation's lock). Stop
//     acting on it: another holder may already be at work.
//   - ErrNotAcquired: a lock or lease was not obtained (in time, or at all).
//
// Each layer keeps its own sentinel, with its own message and its own name in
// its # Errors section (objstore.ErrNotFound, lease.ErrLeaseLost,
// treelock.ErrNotAcquired, …), made with [Sentinel] so that errors.Is matches
// both the layer's sentinel and the shared one:
//
//	errors.Is(err, lease.ErrLeaseLost) // this layer's reason
//	errors.Is(err, cairn.ErrLost)      // the same, asked of any layer
//
// The library's packages are documented one by one; see the README for the
// map of layers.
package cairn

import "errors"

// The shared error kinds. Test for them with errors.Is.
var (
	// ErrNotFound: the thing asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrLost: a lease, lock, session or claim this process held is no longer
	// its own; another holder may be at work.
	ErrLost = errors.New("lost")
	// ErrNotAcquired: a lock or lease was not obtained.
	ErrNotAcquired = errors.New("not acquired")
)

// Sentinel returns a new sentinel error with message msg that is also of the
// given kind: errors.Is(s, kind) holds, and so does errors.Is(s, s). Its
// message is msg alone. Layers declare their sentinels with it.
func Sentinel(kind error, msg string) error { return &sentinel{msg: msg, kind: kind} }

type sentinel struct {
	msg  string
	kind error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.kind }
