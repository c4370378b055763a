package intake

import (
	"context"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// completer group-commits the outcomes of handlers that succeeded: the
// runners hand it their completions (complete) and its loop commits
// everything that arrived while the previous batch was committing in one
// ledger call (CompleteBatch), lingering briefly to share the next
// recording's transaction when nothing is urgent.
type completer struct {
	l         *ledger.Ledger
	o         *Options
	completes chan *completion
	// running counts the claims launched and not yet settled (the
	// dispatcher's): with ShortLived, a batch waits up to shortLivedGather
	// for the completions of the others.
	running func() int
}

// shortLivedGather bounds how long a ShortLived batch of completions waits
// for the other running claims' completions: a Lambda invocation's handlers
// end at nearly the same time, and the first completion committed alone
// made two CompleteBatch calls of every invocation (cairn bench lambda
// --phases: 2.00 per invocation of 10 events).
const shortLivedGather = 5 * time.Millisecond

func newCompleter(l *ledger.Ledger, o *Options) *completer {
	return &completer{l: l, o: o, completes: make(chan *completion, queueLen)}
}

type completion struct {
	c        ledger.Claim
	result   string
	deadline time.Time // the claim's lease runs out
	done     chan error
}

// complete hands a completion to the group-commit loop and waits for its
// batch's answer.
func (co *completer) complete(ctx context.Context, c ledger.Claim, result string, deadline time.Time) error {
	cp := &completion{c: c, result: result, deadline: deadline, done: make(chan error, 1)}
	select {
	case co.completes <- cp:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-cp.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gather adds to batch the completions of the other running claims as they
// arrive, for up to shortLivedGather: until every running claim has handed
// in its completion (or settles otherwise), or the batch is full.
func (co *completer) gather(ctx context.Context, batch []*completion) []*completion {
	t := time.NewTimer(shortLivedGather)
	defer t.Stop()
	for len(batch) < maxCompleteBatch && len(batch) < co.running() {
		select {
		case c := <-co.completes:
			batch = append(batch, c)
		case <-t.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// loop commits completions in batches: one transaction for every
// completion that arrived while the previous batch was committing.
func (co *completer) loop(ctx context.Context) {
	for {
		var first *completion
		select {
		case first = <-co.completes:
		case <-ctx.Done():
			return
		}
		batch := []*completion{first}
	fill:
		for len(batch) < maxCompleteBatch {
			select {
			case c := <-co.completes:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		if co.o.ShortLived && co.running != nil {
			batch = co.gather(ctx, batch)
		}
		cs := make([]ledger.Claim, len(batch))
		results := make([]string, len(batch))
		var deadline time.Time
		soonest := batch[0].deadline // the earliest lease to run out
		for i, b := range batch {
			cs[i], results[i] = b.c, b.result
			if b.deadline.After(deadline) {
				deadline = b.deadline
			}
			if b.deadline.Before(soonest) {
				soonest = b.deadline
			}
		}
		// A batch gets less than a renewal interval: a hung connection is
		// abandoned in time for the waiters' next attempts.
		deadline = earliest(deadline, time.Now().Add(renewTimeout(co.o.Lease/3)))
		if !co.o.SettleBy.IsZero() {
			deadline = earliest(deadline, co.o.SettleBy)
		}
		// Until the last of the batch's leases runs out (its waiter retries a
		// failed batch until then; the others have given up by then).
		// Not urgent: the handlers' slots are free already; the batch may wait
		// (completeLinger) to commit with the next Record, unless a lease in
		// it is about to run out.
		linger := completeLinger
		if co.o.ShortLived || time.Until(soonest) < completeLingerMargin {
			linger = 0
		}
		bctx, cancel := context.WithDeadline(ledger.WithLinger(context.WithoutCancel(ctx), linger), deadline)
		errs, err := co.l.CompleteBatch(bctx, cs, results)
		cancel()
		for i, b := range batch {
			if err != nil {
				b.done <- err
			} else {
				b.done <- errs[i]
			}
		}
	}
}
