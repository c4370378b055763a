package intake

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/ledger"
)

// runner runs claims' handlers, one goroutine per claim that the dispatcher
// launches: it renews the claim's lease while the handler runs, stops the
// handler when the lease can have run out, and settles the outcome in the
// ledger (a completion through the completer's group commit; a failure or
// a release directly). It holds no slots: the dispatcher hands it a claim
// and a function that frees the claim's slot, which run calls as soon as
// the handler returns.
type runner struct {
	l    *ledger.Ledger
	h    Handler
	o    *Options
	log  *slog.Logger
	m    *metrics
	act  *activity
	comp *completer
	// runStart: when Run started (Options.Deadline's fair share); set
	// before any claim is launched.
	runStart time.Time
}

// run runs one claim's handler, renewing its lease, and settles the outcome.
// It calls freeSlot (the dispatcher's) once, as soon as the handler returns:
// settling the outcome (a batched ledger write) needs no slot, and the
// record stays claimed until it is settled, so the key cannot run twice
// meanwhile.
func (rn *runner) run(hctx context.Context, c ledger.Claim, claimedAt time.Time, freeSlot func()) {
	freeSlot = sync.OnceFunc(freeSlot)
	defer freeSlot()
	w := workFromClaim(c)
	ctx, cancel := context.WithCancelCause(hctx)
	defer cancel(nil)
	if rn.o.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, rn.o.Timeout, errTimeout)
		defer cancelT()
	}
	if !rn.o.Deadline.IsZero() {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadlineCause(ctx, rn.o.Deadline, errDeadline)
		defer cancelD()
	}
	v := newValidity(claimedAt, rn.o.Lease, cancel)
	ctx = leaseContext{Context: ctx, v: v}
	ren := rn.startRenewal(c, v, cancel)
	start := time.Now()
	result, err := rn.call(ctx, w)
	lost := ren.stop()
	deadline, expired := v.end()
	elapsed := time.Since(start)
	freeSlot()
	if lost == nil && (expired || errors.Is(err, errLeaseExpired)) {
		lost = errLeaseExpired
		rn.log.Warn("a claim's lease ran out on this process's clock before a renewal was confirmed (the ledger unreachable or slow, or this process stalled): the handler was stopped, and the work runs again once claimed again",
			"bucket", c.Bucket, "key", c.Key, "token", c.Token, "lease", rn.o.Lease)
	}

	// Settle the outcome while the lease holds: a transient ledger error
	// (a conflict, a lost connection) is retried until then, never a reason
	// to throw the handler's work away.
	var outcome string
	var serr error
	switch {
	case lost != nil:
		outcome, serr = OutcomeLeaseLost, lost
	case err == nil:
		serr = rn.settle(c, deadline, "complete", func(ctx context.Context) error { return rn.comp.complete(ctx, c, result, deadline) })
		outcome = OutcomeProcessed
	case hctx.Err() != nil && !IsPermanent(err), errors.Is(err, errUnguarded), rn.cutUnfairly(ctx, claimedAt):
		// Shutdown cut the handler short, it could not start guarded, or
		// the Deadline stopped an attempt that did not get a fair run: give
		// the work back uncounted.
		serr = rn.settle(c, deadline, "release", func(ctx context.Context) error { return rn.l.Release(ctx, c) })
		outcome = OutcomeReleased
	case IsPermanent(err):
		serr = rn.settle(c, deadline, "fail", func(ctx context.Context) error { return rn.l.Fail(ctx, c, err.Error(), false) })
		outcome = OutcomeDead
	default:
		serr = rn.settle(c, deadline, "fail", func(ctx context.Context) error { return rn.l.Fail(ctx, c, err.Error(), true) })
		outcome = OutcomeRetry
	}
	if errors.Is(serr, ledger.ErrLeaseLost) || errors.Is(serr, ledger.ErrSuperseded) {
		outcome = OutcomeLeaseLost
	}
	if outcome == OutcomeLeaseLost {
		rn.m.leaseLosses.Inc()
	}
	if outcome == OutcomeProcessed && serr == nil {
		rn.act.add(time.Now())
	}
	rn.m.handlerSeconds.WithLabelValues(outcome).Observe(elapsed.Seconds())
	rn.m.outcomes.WithLabelValues(outcome).Inc()
	lvl := slog.LevelDebug
	if outcome != OutcomeProcessed || serr != nil {
		lvl = slog.LevelWarn
	}
	if rn.log.Enabled(context.Background(), lvl) { // its arguments cost ten allocations per event
		rn.log.Log(context.Background(), lvl, "handled", "bucket", c.Bucket, "key", c.Key, "sequencer", c.Seq, "token", c.Token,
			"attempt", c.Attempts, "outcome", outcome, "seconds", elapsed.Seconds(), "err", errString(err), "settle_err", errString(serr))
	}
	if rn.o.OnOutcome != nil {
		rn.o.OnOutcome(w, outcome, err)
	}
}

var errTimeout = errors.New("intake: handler timed out")

// errDeadline is the cause of an attempt stopped at Options.Deadline.
var errDeadline = errors.New("intake: stopped at the pipeline's deadline")

// cutUnfairly tells whether the handler's context was ended by
// Options.Deadline for an attempt claimed in the second half of the time
// from Run's start to it (see Options.Deadline).
func (rn *runner) cutUnfairly(ctx context.Context, claimedAt time.Time) bool {
	if rn.o.Deadline.IsZero() || !errors.Is(context.Cause(ctx), errDeadline) {
		return false
	}
	half := rn.o.Deadline.Sub(rn.runStart) / 2
	return rn.o.Deadline.Sub(claimedAt) < half
}

// refusal tells the ledger's answers that settling again cannot change: the
// claim's lease was lost, a newer claim superseded it, the record is gone.
func refusal(err error) bool {
	return errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrSuperseded) || errors.Is(err, ledger.ErrNotFound)
}

// settleRetry spaces attempts to settle an outcome: full jitter from 20ms,
// doubling up to 2s.
var settleRetry = backoff.Policy{Base: 20 * time.Millisecond, Max: 2 * time.Second}

// settleMargin: the last attempt to settle starts this long before the lease
// runs out.
const settleMargin = 10 * time.Millisecond

// settle runs call, which records a claim's outcome in the ledger (op names
// it: complete, fail, release), again after a jittered backoff while it fails
// for any reason but a refusal, until deadline, when the claim's lease would
// expire: the ledger refuses the claim after that anyway, and the work runs
// again once it is claimed again. Giving up is counted and logged.
//
// settle deliberately ignores the pipeline's context: an outcome a handler
// produced must be recorded at shutdown too (otherwise the work runs again),
// and the lease deadline bounds every wait.
func (rn *runner) settle(c ledger.Claim, deadline time.Time, op string, call func(ctx context.Context) error) error {
	if !rn.o.SettleBy.IsZero() {
		deadline = earliest(deadline, rn.o.SettleBy)
	}
	for attempt := 1; ; attempt++ {
		// Each attempt gets less than a renewal interval (a hung connection
		// is abandoned in time for another attempt), and never past the
		// deadline.
		ctx, cancel := context.WithDeadline(context.Background(), earliest(deadline, time.Now().Add(renewTimeout(rn.o.Lease/3))))
		err := call(ctx)
		cancel()
		if err == nil || refusal(err) {
			return err
		}
		wait := settleRetry.Delay(attempt - 1)
		// The last attempt comes just before the lease runs out.
		if left := time.Until(deadline) - settleMargin; left < wait {
			wait = left
		}
		if wait <= 0 {
			rn.m.settleGivenUp.WithLabelValues(op).Inc()
			rn.log.Warn("recording a handler's outcome failed until the claim's lease ran out; giving up (the work runs again when it is claimed again)",
				"op", op, "bucket", c.Bucket, "key", c.Key, "sequencer", c.Seq, "token", c.Token, "attempts", attempt, "err", err)
			return err
		}
		rn.m.settleRetries.WithLabelValues(op).Inc()
		rn.log.Info("recording a handler's outcome failed; retrying", "op", op, "bucket", c.Bucket, "key", c.Key,
			"token", c.Token, "attempt", attempt, "retry_in", wait, "err", err)
		time.Sleep(wait) // at most until settleMargin before deadline
	}
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// call runs the handler, turning a panic into an error.
func (rn *runner) call(ctx context.Context, w Work) (result string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError(v)
		}
	}()
	result, err = rn.h.Handle(ctx, w)
	if err == nil && ctx.Err() != nil && context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
		// The lease was lost or the attempt timed out while the handler ignored
		// its context: its result cannot be trusted to have been the only one.
		err = context.Cause(ctx)
	}
	return result, err
}

// renewal keeps one claim's lease alive: every third of the lease it sends
// a renewal, each with a deadline shorter than that interval (a hung
// connection is abandoned, never waited on), and feeds the validity the send
// time of each that succeeded. A refusal (the lease was lost, the work
// superseded) stops the handler at once; the validity stops it at its
// deadline whatever the renewals do.
type renewal struct {
	cancel context.CancelFunc // stops the loop and cancels a renewal in flight
	done   chan struct{}      // closed when the loop has returned
	lost   error              // a refusal; written by the loop before done closes
}

// renewTimeout bounds one renewal request: less than the renewal interval,
// so that the next renewal is sent on time however the last one hangs.
func renewTimeout(every time.Duration) time.Duration { return every * 3 / 4 }

func (rn *runner) startRenewal(c ledger.Claim, v *validity, cancel context.CancelCauseFunc) *renewal {
	ctx, stop := context.WithCancel(context.Background())
	r := &renewal{cancel: stop, done: make(chan struct{})}
	every := rn.o.Lease / 3
	go func() {
		defer close(r.done)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if ctx.Err() != nil {
				return // stopped as the timer fired (select chose the timer)
			}
			at := time.Now()
			rctx, done := context.WithTimeout(ctx, renewTimeout(every))
			_, err := rn.l.Renew(rctx, c, rn.o.Lease)
			done()
			next := every - time.Since(at)
			switch {
			case err == nil:
				v.renewed(at)
			case refusal(err):
				r.lost = err
				cancel(err)
				return
			case ctx.Err() != nil:
				return // stopped while the request was in flight, which stop cancelled
			default:
				rn.log.Warn("renewing a lease failed; retrying (the handler is stopped if no renewal succeeds before the lease runs out)",
					"bucket", c.Bucket, "key", c.Key, "token", c.Token, "err", err)
				next = every/2 - time.Since(at)
			}
			t.Reset(max(next, every/10))
		}
	}()
	return r
}

// stop ends renewal and reports whether the ledger refused a renewal (the
// lease was lost). It cancels a renewal in flight and waits for the loop to
// return, so that no renewal is sent once stop returned: the outcome's
// Complete, Fail or Release that follows is the claim's last request.
func (r *renewal) stop() (lost error) {
	r.cancel()
	<-r.done
	return r.lost
}
