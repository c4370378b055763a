package dynamoledger

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// Group commit per key: Record calls of one handle that reach the same
// record while its write is in flight (concurrent batches with events of
// one key, common when a key is written often) do not each write it. The
// first is the key's leader and writes; the others queue; when the write
// returns, the first of them leads the next write, which decides every
// queued call's events (in the order they queued, each with its own source
// and time, as if they had run one after another) on the row just written,
// and writes once. A queued call thus costs neither a read nor a write that
// the record's condition refuses (two writers of one key on the revision
// they both read: one is refused, reads the record again and writes
// again), and several calls share one write.
//
// The leader writes under its own context: if its caller gives up, the
// calls it was deciding for get its error, and those whose own contexts
// are still live decide again themselves (the write may have landed: their
// events are then duplicates of themselves, recorded either way).

// directClaims lets RecordAndClaim's writes claim the records they leave
// due (pending, next attempt now): up to budget of them, with lease. Only
// a call's own write does (a leader's), for its caller; records of calls
// decided in another's write are left for claims to find.
type directClaims struct {
	budget atomic.Int64
	lease  time.Duration
}

// keyCall is one Record call's events of one record.
type keyCall struct {
	evs    []event.Event
	source string
	now    time.Time
	direct *directClaims // nil: claim nothing
	claim  *ledger.Claim // the claim its write took

	done     chan struct{} // closed when decided, or when this call is to lead
	lead     bool          // this call leads the next write
	cur      *row          // the row the next write starts from (lead)
	loaded   bool          // cur was read (or written) and may be used
	outcomes []ledger.Outcome
	err      error
}

// keyQueue is a key's calls waiting for the write in flight.
type keyQueue struct{ calls []*keyCall }

// decideKey decides evs (in order) against record k, whose row the caller
// read as cur, and writes it once: in a write of its own, or in one a
// concurrent call of this handle leads (see above).
func (b *Backend) decideKey(ctx context.Context, k id, cur *row, evs []event.Event, source string, now time.Time, direct *directClaims) ([]ledger.Outcome, *ledger.Claim, error) {
	loaded := true
	for {
		call := &keyCall{evs: evs, source: source, now: now, direct: direct, done: make(chan struct{}), cur: cur, loaded: loaded}
		b.gmu.Lock()
		q, busy := b.queues[k]
		if busy {
			q.calls = append(q.calls, call)
		} else {
			b.queues[k] = &keyQueue{}
			call.lead = true
		}
		b.gmu.Unlock()
		if busy {
			select {
			case <-call.done:
			case <-ctx.Done():
				// Leave the queue if still in it; if already decided, or
				// made the leader, take that.
				b.gmu.Lock()
				for i, c := range q.calls {
					if c == call {
						q.calls = append(q.calls[:i], q.calls[i+1:]...)
						b.gmu.Unlock()
						return nil, nil, ctx.Err()
					}
				}
				b.gmu.Unlock()
				select {
				case <-call.done: // decided, or made the leader: see below
				default:
					// Taken into a write in flight: its caller is not held
					// past its deadline by another caller's write (found
					// in review: 6s for a 600ms deadline). Whether that
					// write lands is unknown, as for a write of its own
					// cut short.
					return nil, nil, fmt.Errorf("dynamodb ledger: gave up while another call's write of the record was in flight; it may still land: %w", ctx.Err())
				}
			}
			if !call.lead {
				if call.err != nil && isContext(call.err) && ctx.Err() == nil {
					cur, loaded = nil, false // the leader gave up: decide again, on a fresh read
					continue
				}
				return call.outcomes, nil, call.err
			}
		}
		if ctx.Err() != nil {
			// Made the leader after its caller gave up: pass the lead on.
			b.gmu.Lock()
			b.handOff(k, b.queues[k], nil, false)
			b.gmu.Unlock()
			return nil, nil, ctx.Err()
		}
		b.lead(ctx, k, call)
		return call.outcomes, call.claim, call.err
	}
}

func isContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// lead writes the record for first and the calls queued for k meanwhile,
// then hands the lead to the first call queued since, or ends the queue.
func (b *Backend) lead(ctx context.Context, k id, first *keyCall) {
	b.gmu.Lock()
	q := b.queues[k]
	calls := append([]*keyCall{first}, q.calls...)
	q.calls = nil
	b.gmu.Unlock()
	cur := first.cur
	if first.loaded {
		cur = b.recent.fresher(k, cur)
	}
	took := false // a slot of first.direct's budget, for this record
	w, res, err := b.change(ctx, k, cur, first.loaded, func(cur *row) (*ledger.Record, any, error) {
		var r *ledger.Record
		if cur != nil {
			c := cur.rec
			r = &c
		}
		out := make([][]ledger.Outcome, len(calls))
		for j, call := range calls {
			out[j] = make([]ledger.Outcome, len(call.evs))
			for x, ev := range call.evs {
				o, nr := driver.Decide(r, ev, call.source, call.now, b.opts.EveryVersion)
				out[j][x] = o
				if nr != nil {
					r = nr
				}
			}
		}
		d := first.direct
		claimable := d != nil && r != nil && r.Status == ledger.Pending && driver.UnixMilli(r.NextAttempt) <= driver.UnixMilli(first.now)
		switch {
		case claimable && !took:
			if took = d.budget.Add(-1) >= 0; !took {
				d.budget.Add(1)
			}
		case !claimable && took:
			d.budget.Add(1)
			took = false
		}
		if took {
			now := first.now
			r.Status, r.Token, r.LeaseUntil, r.Attempts, r.RunGen, r.Updated = ledger.Claimed, driver.ClaimToken(r.Token, driver.UnixMilli(now)), now.Add(d.lease), r.Attempts+1, r.Gen, now
		}
		return r, out, nil
	})
	switch {
	case took && err == nil:
		c := w.claim()
		first.claim = &c
		b.held.put(w)
	case took:
		// Not known to have landed: if it did, the lease expires unused.
		first.direct.budget.Add(1)
	}
	for j, call := range calls {
		call.err = err
		if err == nil {
			call.outcomes = res.([][]ledger.Outcome)[j]
		}
		if call != first {
			close(call.done)
		}
	}
	b.gmu.Lock()
	defer b.gmu.Unlock()
	b.handOff(k, q, w, err == nil)
}

// handOff makes the first call queued for k the leader of the next write,
// starting from w (if ok: the row just written, or found current), or ends
// k's queue if none is queued. b.gmu is held.
func (b *Backend) handOff(k id, q *keyQueue, w *row, ok bool) {
	if len(q.calls) == 0 {
		delete(b.queues, k)
		return
	}
	next := q.calls[0]
	q.calls = q.calls[1:]
	next.lead, next.cur, next.loaded = true, nil, false
	if ok {
		next.cur, next.loaded = w, true
	}
	close(next.done)
}
