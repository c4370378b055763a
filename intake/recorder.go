package intake

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// recorder group-commits submissions: Submit hands it events (submit), and
// its loop records everything that arrived while the previous batch was
// recording in one ledger transaction per source, then answers each
// submission. When the dispatcher lends it free slots, a batch claims work
// in the same transaction (RecordAndClaim) and hands the claims back to the
// dispatcher, which launches them: new work on an unloaded pipeline starts
// as soon as it is durable, with no separate claim. It keeps the recent
// outcomes of recording for readiness (ready.go).
type recorder struct {
	l            *ledger.Ledger
	o            *Options
	log          *slog.Logger
	m            *metrics
	d            *dispatcher
	everyVersion bool // RecordAndClaim claims nothing

	subs chan *submission
	// pending counts submissions sent to subs and not yet answered: the
	// loop holds one it took off subs before it marks the dispatcher
	// recording, and Quiesce must see it then too.
	pending atomic.Int64
	closed  <-chan struct{} // closed when Run returns
	// afterReceive, if set (by tests), runs when the loop has taken a
	// batch's first submission off the queue, before it marks the
	// dispatcher recording.
	afterReceive func()
	health       recordHealth // recent recordings' outcomes, for readiness
}

func newRecorder(l *ledger.Ledger, o *Options, log *slog.Logger, m *metrics, d *dispatcher, everyVersion bool, closed <-chan struct{}) *recorder {
	return &recorder{l: l, o: o, log: log, m: m, d: d, everyVersion: everyVersion,
		subs: make(chan *submission, queueLen), closed: closed}
}

type submission struct {
	source string
	evs    []event.Event
	done   chan struct{}
	ds     []ledger.Decision
	err    error
}

// submit hands evs (checked by Submit) to the loop and waits for the
// ledger's decisions.
func (r *recorder) submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	select {
	case <-r.closed:
		return nil, ErrClosed
	default:
	}
	s := &submission{source: source, evs: evs, done: make(chan struct{})}
	r.pending.Add(1)
	select {
	case r.subs <- s:
	case <-r.closed:
		r.pending.Add(-1)
		return nil, ErrClosed
	case <-ctx.Done():
		r.pending.Add(-1)
		return nil, ctx.Err()
	}
	select {
	case <-s.done:
		return s.ds, s.err
	case <-r.closed:
		// Run has returned: the recorder is gone, so s was never recorded.
		select {
		case <-s.done:
			return s.ds, s.err
		default:
			return nil, ErrClosed
		}
	case <-ctx.Done():
		// The batch may still commit; the caller's retry is then a duplicate.
		return nil, ctx.Err()
	}
}

// loop group-commits submissions: one ledger transaction for everything
// that arrived while the previous one was committing. The claims its
// batches get are launched by the dispatcher under hctx.
func (r *recorder) loop(ctx, hctx context.Context) {
	// Work a batch made but could not claim (its slots were taken) is
	// claimed by the next batches' RecordAndClaim, with every free slot, the
	// earliest due first; the dispatcher is woken for it when no batch
	// follows, and otherwise claims when its poll timer fires (on the
	// object-store ledger, a RecordAndClaim claims only in the shards it
	// writes). Woken at once, the dispatcher took every free slot for a
	// Claim of its own, so the next batch could not claim either and woke
	// it again: on the object-store ledger, half the claims were the
	// dispatcher's, and waking it 20ms after work was left still made it a
	// quarter, 10% slower.
	leftover := false // a batch left work unclaimed since the dispatcher was last woken
	for {
		var first *submission
		select {
		case first = <-r.subs:
		case <-ctx.Done():
			r.failPending()
			return
		}
		if r.afterReceive != nil {
			r.afterReceive()
		}
		batch := []*submission{first}
		n := len(first.evs)
	fill:
		for n < r.o.MaxBatch {
			select {
			case s := <-r.subs:
				batch = append(batch, s)
				n += len(s.evs)
			default:
				break fill
			}
		}
		r.d.recorderBusy()
		leftover = r.record(ctx, hctx, batch) || leftover
		r.pending.Add(-int64(len(batch)))
		if r.everyVersion || len(r.subs) == 0 {
			// Idle (or, with EveryVersion, RecordAndClaim claims nothing):
			// what the batches left unclaimed is the dispatcher's.
			r.d.recorderIdle(leftover)
			leftover = false
		}
	}
}

func (r *recorder) failPending() {
	for {
		select {
		case s := <-r.subs:
			s.err = ErrClosed
			close(s.done)
			r.pending.Add(-1)
		default:
			return
		}
	}
}

// record commits one batch, grouped by source, and answers each submission.
// With the slots the dispatcher lends, it claims work in the same
// transaction (RecordAndClaim: the earliest due first, so never ahead of
// older work) and hands the claims back to the dispatcher, which starts
// their handlers at once under hctx. It reports whether it left work of the
// batch unclaimed.
func (r *recorder) record(ctx, hctx context.Context, batch []*submission) (left bool) {
	bySource := map[string][]*submission{}
	var order []string
	for _, s := range batch {
		if _, ok := bySource[s.source]; !ok {
			order = append(order, s.source)
		}
		bySource[s.source] = append(bySource[s.source], s)
	}
	for _, src := range order {
		subs := bySource[src]
		var evs []event.Event
		for _, s := range subs {
			evs = append(evs, s.evs...)
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		var ds []ledger.Decision
		var cs []ledger.Claim
		var err error
		lent := r.d.lend()
		if lent > 0 {
			// The claims' leases run from (no earlier than) the call's start.
			ds, cs, err = r.l.RecordAndClaim(rctx, src, evs, lent, r.o.Lease)
		} else {
			ds, err = r.l.Record(rctx, src, evs)
		}
		cancel()
		r.m.recordSeconds.Observe(time.Since(start).Seconds())
		if err == nil && len(ds) != len(evs) {
			err = fmt.Errorf("intake: ledger returned %d decisions for %d events", len(ds), len(evs))
		}
		r.health.note(err, time.Now())
		if err != nil {
			r.log.Warn("recording events failed", "source", src, "events", len(evs), "submissions", len(subs), "err", err)
		}
		r.d.handOver(hctx, cs, start, lent)
		if err != nil && len(subs) > 1 {
			// One submission's data may have failed the whole batch: each is
			// recorded again on its own, so the others never see its error.
			// (What the failed batch did record is decided again as a
			// duplicate, and its work is claimed by the next poll.)
			for _, s := range subs {
				rctx, cancel := context.WithTimeout(ctx, callTimeout)
				s.ds, s.err = r.l.Record(rctx, src, s.evs)
				cancel()
				if s.err == nil && len(s.ds) != len(s.evs) {
					s.ds, s.err = nil, fmt.Errorf("intake: ledger returned %d decisions for %d events", len(s.ds), len(s.evs))
				}
				r.health.note(s.err, time.Now())
				if r.decided(s.ds) > 0 {
					left = true
				}
				close(s.done)
			}
			continue
		}
		off := 0
		for _, s := range subs {
			if err != nil {
				s.err = err
			} else {
				s.ds = ds[off : off+len(s.evs)]
				r.decided(s.ds)
			}
			off += len(s.evs)
			close(s.done)
		}
		if err == nil && !claimedOwn(ds, cs) {
			left = true
		}
	}
	return left
}

// claimedOwn tells whether cs holds all the work ds made (its new and
// coalesced records). The claims may also be older work (RecordAndClaim
// takes the earliest due first), so counting them is not enough.
func claimedOwn(ds []ledger.Decision, cs []ledger.Claim) bool {
	claimed := make(map[[2]string]bool, len(cs))
	for _, c := range cs {
		claimed[[2]string{c.Bucket, c.Key}] = true
	}
	for _, d := range ds {
		if (d.Outcome == ledger.Accepted || d.Outcome == ledger.Coalesced) && !claimed[[2]string{d.Bucket, d.Key}] {
			return false
		}
	}
	return true
}

// decided counts decisions in the metrics and returns how many made new work.
func (r *recorder) decided(ds []ledger.Decision) (work int) {
	for _, d := range ds {
		r.m.decisions.WithLabelValues(string(d.Outcome)).Inc()
		if d.Outcome == ledger.Accepted || d.Outcome == ledger.Coalesced {
			work++
		}
	}
	return work
}
