package intake

import (
	"context"
	"time"
)

// quiescePoll is how often Quiesce looks at the pipeline's state.
const quiescePoll = time.Millisecond

// Quiesce returns once the pipeline has nothing it can do now: no submission
// is waiting or being recorded, no handler runs or is settling its outcome,
// and a Claim the dispatcher started after that found no due work. Work due
// later (a retry's backoff) and work claimed elsewhere (a key another
// process runs) do not hold it up. It returns ctx's error if ctx ends first,
// and ErrClosed if Run has returned.
//
// A short-lived host calls it before it stops (the Lambda adapter, after it
// recorded an invocation's events): the work it recorded has then been run,
// or handed on in the ledger, and newer work of the keys it ran (events
// recorded while it ran them) has been claimed and run too.
func (p *Pipeline) Quiesce(ctx context.Context) error {
	t := time.NewTicker(quiescePoll)
	defer t.Stop()
	var target uint64 // the first Claim round that counts; 0: not idle yet
	var launched uint64
	for {
		busy := !p.disp.quiet() || p.rec.pending.Load() > 0
		switch {
		case busy, target != 0 && p.disp.launches.Load() != launched:
			target = 0
		case target == 0:
			launched = p.disp.launches.Load()
			target = p.disp.claimRound.Load() + 1
			p.disp.wakeUp()
		case p.disp.emptyRound.Load() >= target:
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closed:
			return ErrClosed
		}
	}
}

// noteEmpty records that the dispatcher's Claim round found no work.
func (d *dispatcher) noteEmpty(round uint64) {
	for {
		old := d.emptyRound.Load()
		if old >= round || d.emptyRound.CompareAndSwap(old, round) {
			return
		}
	}
}
