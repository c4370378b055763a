// Package backoff is cairn's one retry wait: exponential backoff with full
// jitter that honours its context.
//
// Every retry loop in cairn (a CAS loop in docstore and fence, a journal
// write in folder, a source's receive or delete, the intake pipeline's claim
// and settle loops) asks Policy.Delay or Policy.Wait for the wait before
// attempt n, and stops waiting the moment its context is done.
//
// # Why not a library
//
// github.com/cenkalti/backoff/v5 was considered. Its ExponentialBackOff is a
// stateful iterator (NextBackOff, not safe for concurrent use) whose jitter
// is interval×[1−f, 1+f], not full jitter (uniform in [0, ceiling]), and its
// Retry(ctx, operation) owns the loop. cairn's loops cannot hand their loop
// over: they reason about every request sent so far (a lost response, a
// pending write that may still land), log and count each retry, and decide
// per error whether to go on. What they need is "the wait before attempt n,
// cancelled with ctx", which is the few lines below, with no new dependency.
//
// # Guarantees
//
// Delay(attempt) is uniform in [0, min(Base<<attempt, Max)]; it never
// overflows for any attempt. Wait and Sleep return ctx.Err() as soon as ctx
// is done, and release their timer either way.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff with full jitter. The zero value waits
// between 0 and DefaultBase before the first retry, doubling up to
// DefaultMax.
type Policy struct {
	// Base is the ceiling of the first retry's wait (attempt 0); each later
	// attempt doubles it. Default DefaultBase.
	Base time.Duration
	// Max caps the ceiling. Default DefaultMax.
	Max time.Duration
}

// Defaults of a zero Policy.
const (
	DefaultBase = 10 * time.Millisecond
	DefaultMax  = 5 * time.Second
)

// Ceiling returns the longest wait before attempt (0 for the first retry):
// min(Base<<attempt, Max).
func (p Policy) Ceiling(attempt int) time.Duration {
	base, ceil := p.Base, p.Max
	if base <= 0 {
		base = DefaultBase
	}
	if ceil <= 0 {
		ceil = DefaultMax
	}
	if base >= ceil {
		return ceil
	}
	attempt = max(attempt, 0)
	d := base
	for range attempt {
		if d > ceil/2 { // doubling would reach ceil (and could overflow)
			return ceil
		}
		d <<= 1
	}
	return d
}

// Delay returns a wait before attempt drawn uniformly from [0, Ceiling(attempt)]
// ("full jitter": racing writers spread out instead of retrying in step).
func (p Policy) Delay(attempt int) time.Duration {
	n := int64(p.Ceiling(attempt))
	if n < math.MaxInt64 {
		n++ // inclusive of the ceiling
	}
	return time.Duration(rand.Int64N(n))
}

// Wait sleeps Delay(attempt), or until ctx is done, when it returns ctx.Err().
func (p Policy) Wait(ctx context.Context, attempt int) error {
	return Sleep(ctx, p.Delay(attempt))
}

// Sleep waits for d, or until ctx is done, when it returns ctx.Err(). A d of
// zero or less returns ctx.Err() at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
