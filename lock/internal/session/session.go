// Package session is the one session primitive of the distributed locks
// (packages lease and treelock): a record in the store that its owner renews
// in the background, and the rule by which others judge a record dead.
//
// # The owner's side: Session
//
// A Session renews its record every TTL/3 by calling Renew (a compare-and-
// swap of the record in the store), sent on schedule however long the last one
// took, each with a deadline of TTL/4 (a hung connection is abandoned in time
// for the next), and a failed one is tried again after TTL/6. Its deadline is TTL after the start of
// the last renewal confirmed before the deadline (a renewal confirmed later
// may have landed after an observer judged the record dead, so it extends
// nothing). At the deadline the session ends as lost and is never renewed
// again. Done is closed when the session ends — lost, or ended by its owner
// (End) — and Err says why.
//
// # The observer's side: Watch
//
// A record is dead when an observer has watched it keep one revision for a
// whole TTL on the observer's own monotonic clock. Since the observer first
// saw that revision after its owner started the renewal that wrote it, the
// owner's deadline has passed by then: durations measured on one machine
// each, never one machine's clock against another's. Only clock rates matter.
//
// A Watch keeps one observation per record it is asked about, and forgets
// the ones it has not been asked about for two of their TTLs, so a
// long-lived process watching ever new records keeps a bounded map.
// Forgetting is always safe: an observation started again only delays a
// judgement of death, never hastens it.
//
// Time is measured on a clockwork.Clock: the real clock by default, a fake
// one in tests.
package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Config describes a Session.
type Config struct {
	// TTL is how long the session lives without a confirmed renewal.
	TTL time.Duration
	// Clock measures the TTL. Default: the real clock.
	Clock clockwork.Clock
	// Renew writes one renewal of the record; ctx ends after RenewTimeout,
	// or at the session's deadline if sooner. An error wrapping Lost ends the session at once (the record
	// is someone else's now); any other error is transient: the next renewal
	// tries again, until the deadline says otherwise.
	Renew func(ctx context.Context) error
	// Lost is the sentinel a lost session's Err wraps.
	Lost error
	// AfterRenew, if set, runs after every renewal attempt while the session
	// lives, with a context that ends TTL/3 later.
	AfterRenew func(ctx context.Context)
	// OnExpire, if set, runs once the session has ended at its deadline
	// (after Done is closed), with a context that ends TTL later.
	OnExpire func(ctx context.Context)
}

// Session is a renewed record, seen from its owner.
type Session struct {
	cfg Config

	mu       sync.Mutex
	deadline time.Time // on cfg.Clock
	stopping bool      // Stop was called: renew no more
	ended    bool
	err      error
	done     chan struct{}
	subs     map[*Sub]struct{}
	stop     chan struct{}
	stopped  chan struct{}
}

// Start begins renewing a record whose first write started at start (on
// cfg.Clock): its deadline is start+TTL.
func Start(start time.Time, cfg Config) *Session {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	s := &Session{cfg: cfg, deadline: start.Add(cfg.TTL), done: make(chan struct{}),
		subs: map[*Sub]struct{}{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go s.run()
	return s
}

// Done is closed when the session ends: lost, or ended by End.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; after it ended, why: an error wrapping
// Config.Lost if it was lost, else the cause given to End.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Valid reports whether the session is live and before its deadline.
func (s *Session) Valid() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended && !s.stopping && s.cfg.Clock.Now().Before(s.deadline)
}

// Deadline is the session's deadline on Config.Clock.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

func (s *Session) run() {
	defer close(s.stopped)
	every := s.cfg.TTL / 3
	clock := s.cfg.Clock
	var last time.Time // the start of the last renewal attempt
	next := every      // after last
	for {
		s.mu.Lock()
		wait := min(next, s.deadline.Sub(clock.Now()))
		if !last.IsZero() {
			// Renewals are sent on schedule, however long the last one took.
			wait = min(next-clock.Since(last), s.deadline.Sub(clock.Now()))
		}
		s.mu.Unlock()
		t := clock.NewTimer(max(wait, 0))
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.Chan():
		}
		start := clock.Now()
		last = start
		s.mu.Lock()
		remaining := s.deadline.Sub(start)
		s.mu.Unlock()
		if remaining <= 0 {
			if s.end(fmt.Errorf("%w: not renewed before its deadline", s.cfg.Lost)) && s.cfg.OnExpire != nil {
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TTL)
				s.cfg.OnExpire(ctx)
				cancel()
			}
			return
		}
		// A renewal request gets less than the renewal interval (and never
		// past the deadline): a hung connection is abandoned in time for
		// the next renewal, never waited on.
		ctx, cancel := context.WithTimeout(context.Background(), min(remaining, RenewTimeout(s.cfg.TTL)))
		err := s.cfg.Renew(ctx)
		cancel()
		next = every
		switch {
		case err == nil:
			s.mu.Lock()
			if clock.Now().Before(s.deadline) {
				s.deadline = start.Add(s.cfg.TTL)
			}
			s.mu.Unlock()
		case errors.Is(err, s.cfg.Lost):
			s.end(err)
			return
		default:
			next = every / 2 // a failed renewal is tried again sooner
		}
		if s.cfg.AfterRenew != nil {
			ctx, cancel := context.WithTimeout(context.Background(), every)
			s.cfg.AfterRenew(ctx)
			cancel()
		}
	}
}

// RenewTimeout bounds one renewal request of a session with this TTL: three
// quarters of the renewal interval (TTL/3).
func RenewTimeout(ttl time.Duration) time.Duration { return ttl / 4 }

// Stop stops renewing and waits until no renewal is under way. It returns
// Err: nil if the session was still live (it then stays not ended until
// End; Valid is false from now on).
func (s *Session) Stop() error {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
	}
	s.mu.Unlock()
	<-s.stopped
	return s.Err()
}

// End stops renewing and ends the session with cause (nil: a clean end),
// closing Done, unless it has already ended. It reports whether this call
// ended it.
func (s *Session) End(cause error) bool {
	_ = s.Stop()
	return s.end(cause)
}

func (s *Session) end(cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.ended, s.err = true, cause
	close(s.done)
	for u := range s.subs {
		u.endLocked(cause)
	}
	clear(s.subs)
	return true
}

// Sub is one use of a session (a request held under it): its Done is closed
// when the session ends or when the Sub is ended first, whichever comes
// first; Err says which.
type Sub struct {
	s     *Session
	done  chan struct{}
	ended bool
	err   error
}

// Deadline is the deadline of the Sub's session (see Session.Deadline).
func (u *Sub) Deadline() time.Time { return u.s.Deadline() }

// Sub returns a new use of s; if s has ended, the Sub has ended with it.
func (s *Session) Sub() *Sub {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := &Sub{s: s, done: make(chan struct{})}
	if s.ended {
		u.endLocked(s.err)
	} else {
		s.subs[u] = struct{}{}
	}
	return u
}

// Done is closed when the Sub or its session ended.
func (u *Sub) Done() <-chan struct{} { return u.done }

// Err is nil while live; after, the cause its end was given.
func (u *Sub) Err() error {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	return u.err
}

// End ends the Sub with cause, unless it has already ended (with its
// session); it returns the Sub's Err from before this call.
func (u *Sub) End(cause error) error {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	prev := u.err
	if !u.ended {
		delete(u.s.subs, u)
		u.endLocked(cause)
	}
	return prev
}

func (u *Sub) endLocked(cause error) {
	if u.ended {
		return
	}
	u.ended, u.err = true, cause
	close(u.done)
}

// Watch judges others' records by the observer's rule (see the package
// doc). It is safe for concurrent use.
type Watch struct {
	clock clockwork.Clock

	mu        sync.Mutex
	seen      map[string]observation
	lastPrune time.Time
}

type observation struct {
	rev   int64
	since time.Time // first seen at rev
	asked time.Time // last asked about
	ttl   time.Duration
}

// NewWatch returns an empty Watch on clock (nil: the real clock).
func NewWatch(clock clockwork.Clock) *Watch {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Watch{clock: clock, seen: map[string]observation{}, lastPrune: clock.Now()}
}

// Dead records that the record id is at revision rev now, and reports
// whether it has kept that revision for a whole ttl as watched here.
func (w *Watch) Dead(id string, rev int64, ttl time.Duration) bool {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked(now, ttl)
	o, ok := w.seen[id]
	if !ok || o.rev != rev {
		o = observation{rev: rev, since: now}
	}
	o.asked, o.ttl = now, ttl
	w.seen[id] = o
	return now.Sub(o.since) >= ttl
}

// pruneLocked prunes at most once per ttl.
func (w *Watch) pruneLocked(now time.Time, ttl time.Duration) {
	if now.Sub(w.lastPrune) >= ttl {
		w.pruneAllLocked(now)
	}
}

// Prune forgets the observations not asked about for two of their TTLs. Dead
// prunes too, now and then; an owner that renews its own session calls Prune
// on every renewal, so the Watch shrinks also while nobody is asked about.
func (w *Watch) Prune() {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneAllLocked(now)
}

func (w *Watch) pruneAllLocked(now time.Time) {
	w.lastPrune = now
	for id, o := range w.seen {
		if now.Sub(o.asked) >= 2*o.ttl {
			delete(w.seen, id)
		}
	}
}

// Forget drops the observation of id (its record is gone).
func (w *Watch) Forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.seen, id)
}

// Watched reports whether id is being watched.
func (w *Watch) Watched(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.seen[id]
	return ok
}

// Len is how many records are being watched.
func (w *Watch) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}
