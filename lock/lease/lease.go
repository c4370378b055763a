// Package lease implements named, expiring leases stored as objects on any
// objstore.Store that enforces conditional writes: one holder at a time, renewed
// in the background, with a fencing token that grows by one on every acquisition
// for the life of the lease name.
//
// # How expiry is judged (no clocks compared)
//
// The lease is a compare-and-swap document (package docstore) whose revision grows
// with every write. The holder renews it every TTL/3. A waiter takes an expired
// lease over only after it has watched the document keep one revision for a
// whole TTL on its OWN monotonic clock, and then only by a compare-and-swap on
// that revision. The holder, for its part, considers the lease lost once TTL has
// passed on its own monotonic clock since the start of its last successful
// renewal. Since the waiter can only have first seen that revision after the
// renewal started, the waiter's takeover comes after the holder's deadline —
// using durations measured on one machine each, never one machine's wall clock
// against another's. A holder with a wildly wrong wall clock behaves correctly;
// only clock RATES matter (they differ by parts per million).
//
// Durations (TTLs, renewals, polls) are measured on Options.Clock: the real
// clock by default; tests can pass a clockwork.FakeClock and move time
// themselves (see the example of Options).
//
// # Guarantees and limits
//
//   - At most one holder at a time, as far as the holders' own deadlines go; a
//     holder that is paused (GC, SIGSTOP, a VM migration) past its deadline may
//     act after its lease is gone: Done() is closed as soon as it notices, but
//     only the fencing token protects the resource. Work the holder runs in
//     another process can be stopped on time all the same, by a process that
//     holds Deadline for it (cairn lock run does: its command dies at the
//     deadline even while cairn is stopped). Each renewal request gets a
//     quarter of the TTL, so a hung connection never holds renewals up. Pass Token() to whatever you
//     write and have it refuse tokens lower than the highest it has seen.
//   - A crashed holder's lease is taken over after one TTL of silence.
//   - Release writes a "released" state by compare-and-swap; it never deletes
//     (MinIO ignores conditional DELETE, so a delete could remove a successor's
//     lease). The lease's object is its fencing counter: one small object per
//     lease name, kept for good so that tokens never go backwards; using a
//     lease again and again leaves nothing more behind.
//   - These are cooperative locks: writers that bypass them are not stopped.
//     Combine them with fencing, and with the write policy (objstore/policy).
//
// # Late-landing writes
//
// A write the client gave up on (a reset, a timeout, a 502/504) may be applied
// by the store later. Every write of a lease is a compare-and-swap of its
// document (package docstore): conditional on the ETag read (if-absent for the
// first acquisition of a name), and leases are never deleted, so a late write
// lands only on the exact state it was computed from — never once another
// acquisition, renewal, takeover or release has moved the document on:
//
//   - A late renewal or acquisition cannot resurrect a lease after its
//     release or a takeover, and cannot hand out a token twice: two writes
//     computing token N+1 are both conditional on the state holding N, so at
//     most one lands.
//   - An Acquire or TryAcquire that returned an error may still land: the
//     lease is then held by this Manager's holder name, but no Lease value
//     exists and nobody renews it. It is held by nobody: this Manager cannot
//     take it again while it looks held, and others take it over after one
//     TTL of silence, with the next token. So the cost is one TTL of delay,
//     never two holders.
//   - A late renewal that lands after its holder gave up on it (its deadline
//     counts only confirmed renewals) makes a waiter watch one more TTL: it
//     delays takeovers, never hastens them.
//   - A late release lands only on the holder's own state: it frees the
//     lease a little later, or not at all (then it expires after one TTL).
//
// # Errors
//
// Check these with errors.Is (ErrNotAcquired is also cairn.ErrNotAcquired,
// ErrLeaseLost also cairn.ErrLost, as in every layer):
//
//   - ErrNotAcquired: TryAcquire found the lease held by another holder; or
//     Acquire gave up because its context ended while waiting (the error then
//     also wraps the context's error). Nothing is held.
//   - ErrLeaseLost: the lease was lost — not renewed before the holder's own
//     deadline, or taken over by another holder. Lease.Err returns it after
//     Done is closed, and Release returns it for a lease that was lost. Stop
//     acting on the lease; only the fencing token protects what it guarded.
//   - objstore.ErrNotSupported: the store does not enforce conditional
//     writes, on which leases depend.
//
// Other errors are the store's (a failed request): the acquisition may or may
// not have landed (see Late-landing writes above).
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/lock/internal/session"
	"github.com/cairn-s3/cairn/objstore"
)

// Errors.
var (
	ErrNotAcquired = cairn.Sentinel(cairn.ErrNotAcquired, "lease: held by another holder")
	ErrLeaseLost   = cairn.Sentinel(cairn.ErrLost, "lease: lost (renewal failed or the lease was taken over)")
)

// State is the stored lease document.
type State struct {
	Holder   string `json:"holder"` // "" when released
	Token    int64  `json:"token"`  // fencing token of the latest acquisition
	TTLms    int64  `json:"ttl_ms"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Acquired string `json:"acquired,omitempty"` // holder's wall clock, for people only
	Renewals int64  `json:"renewals"`
}

// Options configure a Lease. A nil *Options means defaults.
type Options struct {
	// TTL is how long a lease lives without renewal. Default: 30s.
	TTL time.Duration
	// Poll is how often a waiter re-reads the lease. Default: TTL/10.
	Poll time.Duration
	// Holder names this holder. Default: host/pid/random.
	Holder string
	// Clock is the monotonic clock on which TTLs, renewals and polls are
	// measured (tests pass a clockwork.FakeClock). Default: the real clock.
	Clock clockwork.Clock
}

// Manager hands out leases stored in one Store.
type Manager struct {
	d    docstore.Doc[State]
	s    *objstore.Store
	opts Options
}

// New returns a Manager on s.
func New(s *objstore.Store, opts *Options) *Manager {
	m := &Manager{s: s, d: docstore.Typed[State](docstore.New(s, &docstore.Options{NoGroupCommit: true}))}
	if opts != nil {
		m.opts = *opts
	}
	if m.opts.TTL <= 0 {
		m.opts.TTL = 30 * time.Second
	}
	if m.opts.Poll <= 0 {
		m.opts.Poll = m.opts.TTL / 10
	}
	if m.opts.Clock == nil {
		m.opts.Clock = clockwork.NewRealClock()
	}
	if m.opts.Holder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		m.opts.Holder = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return m
}

// Lease is a held lease.
type Lease struct {
	m     *Manager
	key   string
	token int64
	s     *session.Session
	// releasing: Release has begun (a second Release does nothing).
	releasing atomic.Bool
}

// Token is the fencing token: larger than every earlier holder's.
func (l *Lease) Token() int64 { return l.token }

// Done is closed when the lease is lost (or released).
func (l *Lease) Done() <-chan struct{} { return l.s.Done() }

// Err is nil while held or after Release; after a loss, an error wrapping
// ErrLeaseLost that says how it was lost.
func (l *Lease) Err() error { return l.s.Err() }

// Deadline is the holder's deadline, on Options.Clock: TTL after the start of
// the last renewal confirmed in time. The lease cannot have been taken over
// before it; from it on, Done is closed. It moves later with each renewal.
// A holder that guards work (a process, a request) stops it by then, however
// its renewals hang: see cairn lock run.
func (l *Lease) Deadline() time.Time { return l.s.Deadline() }

// Valid reports whether the lease is still held by the holder's own deadline.
func (l *Lease) Valid() bool { return l.s.Valid() }

const anyRev = -1

func (m *Manager) mine(st State) bool { return st.Holder == m.opts.Holder }

// take writes a new acquisition if the document is still at rev (anyRev: do not
// check), and with requireFree only if nobody holds it. It returns the token.
func (m *Manager) take(ctx context.Context, key string, rev int64, requireFree bool) (int64, error) {
	host, _ := os.Hostname()
	// The token is read from the state that committed, not from the last run
	// of fn: fn may run more than once, and an earlier run's write can be the
	// one that lands.
	st, _, err := m.d.Update(ctx, key, func(st *State, meta docstore.Meta) error {
		if rev != anyRev && meta.Rev != rev {
			return ErrNotAcquired // changed since we judged it: someone is alive
		}
		if requireFree && st.Holder != "" {
			return ErrNotAcquired
		}
		*st = State{Holder: m.opts.Holder, Token: st.Token + 1, TTLms: m.opts.TTL.Milliseconds(), Host: host, PID: os.Getpid(),
			Acquired: time.Now().UTC().Format(time.RFC3339Nano)}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return st.Token, nil
}

// TryAcquire takes the lease if it is free or released; else ErrNotAcquired.
func (m *Manager) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	// Probe (if it takes one) before the clock starts: the lease's deadline
	// counts from start, and a probe inside the take (seconds on Ceph RGW,
	// SeaweedFS) would eat the TTL.
	if _, err := m.s.Capabilities(ctx); err != nil {
		return nil, err
	}
	start := m.opts.Clock.Now()
	// Requiring it free is the whole check: the update reads the current state.
	token, err := m.take(ctx, key, anyRev, true)
	if err != nil {
		return nil, err
	}
	return m.hold(key, token, start), nil
}

// Acquire waits until the lease is free, released, or expired (silent for a
// whole TTL as watched from here), then takes it; or until ctx is done.
func (m *Manager) Acquire(ctx context.Context, key string) (*Lease, error) {
	if _, err := m.s.Capabilities(ctx); err != nil { // as in TryAcquire
		return nil, err
	}
	watch := session.NewWatch(m.opts.Clock)
	for {
		st, meta, err := m.d.Load(ctx, key)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			if ctx.Err() != nil { // the caller's deadline ran out mid-request
				return nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
			}
			return nil, err
		}
		now := m.opts.Clock.Now()
		free := !meta.Exists || st.Holder == ""
		ttl := time.Duration(st.TTLms) * time.Millisecond
		if ttl <= 0 {
			ttl = m.opts.TTL
		}
		if expired := watch.Dead(key, meta.Rev, ttl); free || expired {
			token, err := m.take(ctx, key, meta.Rev, false)
			if err == nil {
				return m.hold(key, token, now), nil
			}
			if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, objstore.ErrPreconditionFailed) {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
				}
				return nil, err
			}
		}
		t := m.opts.Clock.NewTimer(m.opts.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
		case <-t.Chan():
		}
	}
}

// hold starts renewing a lease whose acquisition started at start.
func (m *Manager) hold(key string, token int64, start time.Time) *Lease {
	l := &Lease{m: m, key: key, token: token}
	l.s = session.Start(start, session.Config{TTL: m.opts.TTL, Clock: m.opts.Clock, Lost: ErrLeaseLost,
		Renew: func(ctx context.Context) error {
			_, _, err := m.d.Update(ctx, key, func(st *State, _ docstore.Meta) error {
				if !m.mine(*st) || st.Token != token {
					return fmt.Errorf("%w: taken over by another holder", ErrLeaseLost)
				}
				st.Renewals++
				return nil
			})
			return err
		}})
	return l
}

// Release gives the lease up by writing a released state (keeping the token
// counter). Releasing a lost lease does nothing and returns its loss.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.s.Stop(); err != nil {
		return err
	}
	if !l.releasing.CompareAndSwap(false, true) {
		return nil // released before
	}
	_, _, err := l.m.d.Update(ctx, l.key, func(st *State, _ docstore.Meta) error {
		if !l.m.mine(*st) || st.Token != l.token {
			return ErrLeaseLost // someone took it over: nothing of ours to release
		}
		st.Holder, st.Host, st.PID, st.Acquired = "", "", 0, ""
		return nil
	})
	l.s.End(nil)
	if errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("releasing %s: %w", l.key, err)
	}
	return err
}

// ErrNotHeld is ForceRelease's answer for a lease nobody holds (or no longer
// the holder named): nothing was released.
var ErrNotHeld = errors.New("lease: not held (by the holder named)")

// ForceRelease releases a lease that someone else holds, on purpose: for a
// holder known to be dead whose lease should not wait out its TTL (Terraform's
// force-unlock). If holder is not "", only that holder's lease is released,
// so that a lease taken over meanwhile by a live holder is left alone
// (ErrNotHeld). It returns the state it released.
//
// The released state carries the next fencing token (the released holder's
// plus one), so the next acquisition gets a token two higher, and the
// released holder's renewals fail: if it was alive after all, it loses the
// lease within one renewal. Its writes carry the old token; a sink refuses
// them once it has seen a higher one (fence.Put of the new token: cairn lock
// force-unlock --fence-object raises the named objects' marks for that).
func (m *Manager) ForceRelease(ctx context.Context, key, holder string) (State, error) {
	var released State
	_, _, err := m.d.Update(ctx, key, func(st *State, meta docstore.Meta) error {
		if !meta.Exists || st.Holder == "" || (holder != "" && st.Holder != holder) {
			return ErrNotHeld
		}
		released = *st
		*st = State{Token: st.Token + 1, TTLms: st.TTLms}
		return nil
	})
	if err != nil {
		return State{}, err
	}
	return released, nil
}

// Status reads a lease without taking it.
func (m *Manager) Status(ctx context.Context, key string) (State, docstore.Meta, error) {
	return m.d.Load(ctx, key)
}
