package intake

import (
	"context"
	"errors"
	"sync"
	"time"
)

// # When a claim stops being valid for its holder
//
// A claim is valid for its holder until the moment its last successful
// renewal request was SENT (the claim's own request, at first) plus the lease,
// minus leaseMargin, measured on this process's monotonic clock. The ledger
// starts the lease no earlier than it receives the request (PostgreSQL and
// SQLite by their clock at the statement, the object-store ledger by the
// writer's clock while it writes), so no other holder can claim the key before
// that moment. At that moment the holder stops the handler, whether or not a
// request has answered: a renewal that hangs never errors, so waiting for
// one to fail is no rule at all.

// leaseMargin is how much earlier than the lease's end a holder stops its
// handler: a twentieth of the lease, and at least MinLeaseMargin. Clock rates
// differ by parts per million (a twentieth covers them for any lease), but
// stopping a handler takes time that does not shrink with the lease: the
// timer or the watchdog has to be scheduled, the kill to land, on a loaded
// machine the scheduler alone can hold a runnable process for tens to
// hundreds of milliseconds, and the ledger's clock started the lease up to a
// request's transit after the send time we count from (never before it).
func leaseMargin(lease time.Duration) time.Duration { return max(lease/20, MinLeaseMargin) }

// MinLeaseMargin is the least time by which a holder stops its handler
// before its lease can have expired (see leaseMargin).
const MinLeaseMargin = 500 * time.Millisecond

// MinLease is the shortest lease New accepts: four margins, so that a
// handler keeps at least three quarters of its lease, and a renewal (every
// third of the lease) has time to confirm before the deadline.
const MinLease = 4 * MinLeaseMargin

// enforceLeaseDeadline turns the rule on; tests turn it off to show that
// their faults break the guarantee without it.
var enforceLeaseDeadline = true

// errLeaseExpired is the cause with which a handler's context is cancelled
// at its claim's local deadline.
var errLeaseExpired = errors.New("intake: the claim's lease ran out on this process's clock (no renewal confirmed in time); the handler was stopped")

// validity owns one claim's "valid until": it is fed the send times of the
// renewals that succeeded, and stops the handler (expire) when the deadline
// passes. Extensions are announced to the subscribers (the exec handler's
// watchdog), which must stop the handler by the same deadline if this
// process cannot (it is stopped or starved).
type validity struct {
	lease  time.Duration
	expire func(error) // cancels the handler's context

	mu      sync.Mutex
	until   time.Time // on the monotonic clock
	timer   *time.Timer
	expired bool
	ended   bool
	subs    map[int]func(until time.Time)
	nextSub int
}

// newValidity starts the deadline of a claim whose claiming request was sent
// at sentAt.
func newValidity(sentAt time.Time, lease time.Duration, expire func(error)) *validity {
	v := &validity{lease: lease, expire: expire, until: sentAt.Add(lease - leaseMargin(lease)), subs: map[int]func(time.Time){}}
	if enforceLeaseDeadline {
		v.timer = time.AfterFunc(time.Until(v.until), v.fire)
	}
	return v
}

// fire runs when the timer says the deadline has come; the deadline may have
// moved meanwhile.
func (v *validity) fire() {
	v.mu.Lock()
	if v.ended || v.expired {
		v.mu.Unlock()
		return
	}
	if left := time.Until(v.until); left > 0 {
		v.timer.Reset(left)
		v.mu.Unlock()
		return
	}
	v.expired = true
	v.mu.Unlock()
	v.expire(errLeaseExpired)
}

// renewed records a renewal request sent at sentAt that succeeded. A
// renewal confirmed after the deadline extends nothing: the claim was
// already given up (and its handler stopped).
func (v *validity) renewed(sentAt time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ended || v.expired || !time.Now().Before(v.until) {
		return
	}
	until := sentAt.Add(v.lease - leaseMargin(v.lease))
	if !until.After(v.until) {
		return
	}
	v.until = until
	for _, f := range v.subs {
		f(until)
	}
}

// Until is the claim's current deadline on the monotonic clock.
func (v *validity) Until() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.until
}

// Expired reports whether the deadline passed while the claim was held.
func (v *validity) Expired() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.expired
}

// subscribe calls f with every later deadline (under the validity's lock:
// f must not block for long) until the returned function is called.
func (v *validity) subscribe(f func(until time.Time)) (until time.Time, cancel func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	id := v.nextSub
	v.nextSub++
	v.subs[id] = f
	return v.until, func() {
		v.mu.Lock()
		delete(v.subs, id)
		v.mu.Unlock()
	}
}

// end stops watching the deadline (the handler returned) and reports whether
// it had passed, and the deadline. A deadline that passed counts whether or
// not the timer has run yet: a handler the watchdog killed at the deadline
// returns before this process's timer fires as often as not.
func (v *validity) end() (until time.Time, expired bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ended = true
	if v.timer != nil {
		v.timer.Stop()
	}
	clear(v.subs)
	if enforceLeaseDeadline && !time.Now().Before(v.until) {
		v.expired = true
	}
	return v.until, v.expired
}

// leaseContext is a handler's context: its Deadline is the claim's (or the
// attempt's timeout, if sooner), and moves later with each renewal.
type leaseContext struct {
	context.Context
	v *validity
}

func (c leaseContext) Deadline() (time.Time, bool) {
	d := c.v.Until()
	if pd, ok := c.Context.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

func (c leaseContext) Value(key any) any {
	if key == (validityKey{}) {
		return c.v
	}
	return c.Context.Value(key)
}

type validityKey struct{}

// validityOf returns the claim validity ctx carries (a handler's context), or
// nil.
func validityOf(ctx context.Context) *validity {
	v, _ := ctx.Value(validityKey{}).(*validity)
	return v
}

// LeaseDeadline is the moment by which a handler must have stopped: the
// claim's lease as its holder can prove it (see "Guarantees" in the package
// doc). It moves later with each renewal while the handler runs; ok is false
// outside a handler.
func LeaseDeadline(ctx context.Context) (deadline time.Time, ok bool) {
	v := validityOf(ctx)
	if v == nil {
		return time.Time{}, false
	}
	return v.Until(), true
}
