package intake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/ledger"
)

// dispatcher is the only owner of handler slots and of launches: it claims
// work with its own Claim calls while slots are free, lends every free slot
// to the recorder for a batch's RecordAndClaim (lend), takes back the claims
// the recorder got (handOver), and launches each claim's handler on the
// runner, or releases the claim once the pipeline drains. Nothing else
// takes a slot or starts a handler.
//
// Both the recorder and the dispatcher claim, so they agree who claims
// when: while the recorder records (recorderBusy to recorderIdle) its
// batches claim with every free slot, the earliest due work first, and the
// dispatcher yields to them after a Claim that filled its slots; the
// recorder wakes it when it idles with work left or the dispatcher
// yielded. The protocol lives in this file alone (yield, recorderIdle).
type dispatcher struct {
	l            *ledger.Ledger
	o            *Options
	log          *slog.Logger
	m            *metrics
	runner       *runner
	everyVersion bool // RecordAndClaim claims nothing: the recorder gets no slots, and the dispatcher never yields

	// Slots: running counts those taken (lent, reserved or running);
	// slotFreed says one was given back.
	running   atomic.Int64
	slotFreed chan struct{}

	// The recorder's side. wake: recorded work waits for a claim (or
	// Quiesce asks for a Claim round). recording: the recorder has batches
	// in hand and claims with every free slot. yielded: the dispatcher left
	// the claiming to the recorder after a Claim that filled its slots, and
	// is owed a wake when the recorder idles.
	wake      chan struct{}
	recording atomic.Bool
	yielded   atomic.Bool
	maxYield  time.Duration // maxYield; changed by tests

	// Quiesce's view (quiesce.go): claims launched and not yet settled, the
	// dispatcher's Claim calls started, and the last of them that found no
	// work.
	inflight   atomic.Int64
	launches   atomic.Uint64 // claims launched, ever: a run that began and ended between two of Quiesce's looks
	claimRound atomic.Uint64
	emptyRound atomic.Uint64

	handlers sync.WaitGroup
	mu       sync.Mutex
	draining bool // no more launches: claims handed over are released
}

func newDispatcher(l *ledger.Ledger, o *Options, log *slog.Logger, m *metrics, rn *runner, everyVersion bool) *dispatcher {
	return &dispatcher{
		l: l, o: o, log: log, m: m, runner: rn, everyVersion: everyVersion,
		slotFreed: make(chan struct{}, 1),
		wake:      make(chan struct{}, 1),
		maxYield:  maxYield,
	}
}

// lend reserves every free slot for the claims of the recorder's next
// RecordAndClaim (the earliest due work first: older work the last batches
// left, then the batch's own) and returns how many: none while draining
// (they would be released at once) or with EveryVersion (RecordAndClaim
// claims nothing then). The recorder gives them back through handOver.
func (d *dispatcher) lend() int {
	if d.everyVersion {
		return 0
	}
	d.mu.Lock()
	draining := d.draining
	d.mu.Unlock()
	if draining || d.pastDeadline() {
		return 0
	}
	return d.reserve(d.o.Concurrency)
}

// pastDeadline tells whether Options.Deadline has passed: no attempt may
// start any more, so nothing is claimed, and a claim in hand is given back
// (a handler started then would be stopped at once, released, claimed
// again: a loop until shutdown).
func (d *dispatcher) pastDeadline() bool {
	return !d.o.Deadline.IsZero() && !time.Now().Before(d.o.Deadline)
}

// handOver takes back the lent slots of a RecordAndClaim that started at
// claimedAt, with the claims it got: it launches them in as many of the
// slots, under hctx, and frees the rest.
func (d *dispatcher) handOver(hctx context.Context, cs []ledger.Claim, claimedAt time.Time, lent int) {
	d.unreserve(lent - len(cs))
	d.launchAll(hctx, cs, claimedAt)
}

// recorderBusy: the recorder has a batch in hand, and claims with every
// free slot.
func (d *dispatcher) recorderBusy() { d.recording.Store(true) }

// recorderIdle: the recorder has nothing to record (or, with EveryVersion,
// its batches claim nothing). What its batches left unclaimed (leftover) is
// the dispatcher's, and so is the claiming it left to them: it is woken if
// either (yielded is read after recording is cleared, as yield sets them
// the other way round: one of the two sees the other's).
func (d *dispatcher) recorderIdle(leftover bool) {
	d.recording.Store(false)
	if d.yielded.Swap(false) || leftover {
		d.wakeUp()
	}
}

// wakeUp tells the dispatcher that recorded work is waiting for a claim.
func (d *dispatcher) wakeUp() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// quiet reports whether no claim is running or settling and the recorder
// holds no batch.
func (d *dispatcher) quiet() bool {
	return d.inflight.Load() == 0 && !d.recording.Load()
}

// reserve takes up to n free handler slots and returns how many it took.
func (d *dispatcher) reserve(n int) int {
	for {
		cur := d.running.Load()
		k := min(int64(n), int64(d.o.Concurrency)-cur)
		if k <= 0 {
			return 0
		}
		if d.running.CompareAndSwap(cur, cur+k) {
			return int(k)
		}
	}
}

// unreserve gives back n reserved slots that were not used.
func (d *dispatcher) unreserve(n int) {
	if n <= 0 {
		return
	}
	d.running.Add(int64(-n))
	select {
	case d.slotFreed <- struct{}{}:
	default:
	}
}

// freeSlot gives back the slot of a handler that returned.
func (d *dispatcher) freeSlot() {
	d.m.running.Dec()
	d.unreserve(1)
}

// launchAll counts and launches claims, each in a reserved slot.
func (d *dispatcher) launchAll(hctx context.Context, cs []ledger.Claim, claimedAt time.Time) {
	if len(cs) == 0 {
		return
	}
	d.m.claims.Add(float64(len(cs)))
	for _, c := range cs {
		d.launch(hctx, c, claimedAt)
	}
}

// launch runs a claim's handler in a reserved slot, under hctx; while
// draining, the work is released instead. claimedAt is when the claiming call
// started: the claim's lease runs until claimedAt + Lease at the earliest.
func (d *dispatcher) launch(hctx context.Context, c ledger.Claim, claimedAt time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining || d.pastDeadline() {
		deadline := claimedAt.Add(d.o.Lease - leaseMargin(d.o.Lease))
		if limit := time.Now().Add(drainReleaseTimeout); limit.Before(deadline) {
			deadline = limit // d.mu is held
		}
		err := d.runner.settle(c, deadline, "release", func(ctx context.Context) error { return d.l.Release(ctx, c) })
		if err != nil {
			d.log.Warn("releasing a claim at shutdown failed; its lease will expire", "bucket", c.Bucket, "key", c.Key, "err", err)
		}
		d.unreserve(1)
		return
	}
	d.m.running.Inc()
	d.inflight.Add(1)
	d.launches.Add(1)
	d.handlers.Go(func() {
		defer d.inflight.Add(-1)
		d.runner.run(hctx, c, claimedAt, d.freeSlot)
	})
}

// loop claims work while slots are free and runs handlers under hctx;
// once ctx is done, it waits for them, cancelling hctx after the grace period.
func (d *dispatcher) loop(ctx, hctx context.Context, cancelHandlers context.CancelFunc) {
	failures := 0 // failed claims in a row
	// eager: claim as soon as a slot is free. Not after waiting for a slot
	// while the recorder claims (it takes the free slots itself, and
	// wakes the dispatcher when it idles with work left), until a wake or
	// the poll timer. owed: a wake or poll has not been answered by a Claim
	// yet; a slot freed then is claimed with even while the recorder records
	// (its batches may claim only their own work: the object-store ledger
	// claims in the shards a batch writes, so work the wake was for would
	// wait for the next poll).
	//
	// After a Claim that filled every slot it took (more may be due), it
	// claims again at once only if the recorder is idle; while it records,
	// the dispatcher yields, and the recorder wakes it when it idles (or,
	// under a stream that never lets it idle, after maxYield: on the
	// object-store ledger a batch claims only in the shards it writes, and
	// older work in the others must not wait for the poll). Claiming again
	// at once held the free slots through a Claim (on the object-store
	// ledger, a write of every shard with work due) while the next batch
	// found none to claim its own work with, and left it to the dispatcher
	// again: with 64 handlers on MinIO, a seventh of the work was claimed
	// so, at twice the p50 delivery time.
	eager, owed := true, true
	asked := false // ShortLived: a wake asked for claims, and they have not run dry yet
	for ctx.Err() == nil {
		if d.pastDeadline() {
			<-ctx.Done() // no attempt may start any more: claim nothing
			continue
		}
		if d.o.ShortLived && !asked {
			select {
			case <-d.wake:
				asked = true
			case <-ctx.Done():
			}
			continue
		}
		if !eager && d.yield() {
			d.idle(ctx, min(d.o.Poll, d.maxYield))
			eager, owed = true, true
			continue
		}
		free := d.reserve(d.o.Concurrency)
		if free <= 0 {
			select {
			case <-d.slotFreed:
			case <-ctx.Done():
			}
			eager = owed
			continue
		}
		owed = false
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		claimedAt := time.Now()
		round := d.claimRound.Add(1)
		cs, err := d.l.Claim(cctx, free, d.o.Lease)
		cancel()
		if err == nil && len(cs) == 0 {
			d.noteEmpty(round)
		}
		d.unreserve(free - len(cs))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := claimRetry.Delay(failures)
			failures++
			d.log.Warn("claiming work failed", "err", err, "retry_in", wait)
			_ = backoff.Sleep(ctx, wait)
			continue
		}
		failures = 0
		d.launchAll(hctx, cs, claimedAt)
		if len(cs) < free && d.o.ShortLived {
			asked = false // nothing more due now: wait to be asked again
			continue
		}
		if len(cs) < free {
			d.idle(ctx, d.o.Poll)
			owed = true
		}
		eager = len(cs) < free
	}
	// Shutdown: no more launches; running handlers finish within the grace period.
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.handlers.Wait(); close(done) }()
	t := time.NewTimer(d.o.Grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		d.log.Warn("shutdown grace period over; cancelling running handlers", "running", d.running.Load())
		cancelHandlers()
		<-done
	}
}

// claimRetry spaces attempts to claim work after the ledger failed a Claim:
// full jitter from 50ms, doubling up to 5s.
var claimRetry = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}

// maxYield bounds how long the dispatcher leaves the claiming to a recorder
// that does not idle.
const maxYield = 100 * time.Millisecond

// yield reports whether the recorder is recording and claims (not with
// EveryVersion), and if so has it wake the dispatcher when it idles.
func (d *dispatcher) yield() bool {
	if d.everyVersion {
		return false
	}
	d.yielded.Store(true)
	if d.recording.Load() {
		return true
	}
	d.yielded.Store(false)
	return false
}

// idle waits until the recorder (or Quiesce) wakes the dispatcher, wait has
// passed (the poll, or a yield's bound) or ctx is done.
func (d *dispatcher) idle(ctx context.Context, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}
