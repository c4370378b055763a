package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/ledger"
)

// Options configure a Pipeline; nil means the defaults.
type Options struct {
	// Concurrency is how many handlers run at once. Default
	// DefaultConcurrency (16).
	Concurrency int
	// Lease is each claim's lease, renewed every third of it while the handler
	// runs. Default DefaultLease (30s); at least MinLease (2s): New refuses
	// a shorter one. It also bounds settling: a handler's outcome that the
	// ledger cannot record for a transient reason is retried, with backoff,
	// until the lease would expire (counted in
	// cairn_intake_settle_given_up_total when it does).
	Lease time.Duration
	// Timeout bounds one handler attempt (its context is cancelled and the
	// attempt retried). Default 0: no timeout; the lease is renewed meanwhile.
	Timeout time.Duration
	// Deadline, if set, stops every handler attempt still running at that
	// time: a host that must stop by a set time (a Lambda invocation)
	// settles its handlers' outcomes before it. An attempt it stops is
	// counted (a retry, as for Timeout) if it had at least half the time
	// from Run's start to Deadline, so work that never fits is dead in the
	// end; one claimed later is released uncounted: it did not get a fair
	// run. Default: none.
	Deadline time.Time
	// SettleBy, if set, bounds the settling of outcomes (complete, fail,
	// release): none is tried past it, and one not recorded by then is left
	// to its lease (the work runs again once claimed again), so a host that
	// must answer by a set time is never held past it by a slow ledger.
	// Default: none (each lease bounds its own settling).
	SettleBy time.Time
	// ShortLived says the host records, runs what it can, calls Quiesce and
	// stops (a Lambda invocation): the dispatcher claims only when Quiesce
	// or the recorder asks (never at start, never on its poll timer, so the
	// recorder's RecordAndClaim gets the free slots), and completions do not
	// linger for a next recording that will not come. Default false.
	ShortLived bool
	// Grace is how long running handlers may finish at shutdown before their
	// contexts are cancelled and their work released. Default DefaultGrace
	// (10s).
	Grace time.Duration
	// Poll is the longest a worker idles between claims when no new work is
	// announced (retries and expired leases become due without an announcement).
	// Default DefaultPoll (1s).
	Poll time.Duration
	// MaxBatch caps the events one ledger transaction records. Default
	// DefaultMaxBatch (4096).
	MaxBatch int
	// Registerer receives the pipeline's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
	// OnOutcome, if set, is called after each handler attempt's outcome is
	// settled in the ledger (tests, benchmarks).
	OnOutcome func(w Work, outcome string, err error)
	// ProcessOwnObjects hands events for cairn's own objects (keys under
	// cairn.OwnPrefixes at the bucket's root: probe, lock, journal and
	// object-store ledger objects) to the ledger like any other. Default
	// false: Submit answers them Ignored without recording them, and says
	// so once per prefix in the log.
	ProcessOwnObjects bool
	// OwnPrefixes adds, per bucket name, key prefixes of cairn's own objects
	// beyond cairn.OwnPrefixes, skipped alike: cairn serve adds the prefix an
	// s3:// --ledger keeps the ledger under (its writes would otherwise come
	// back as events, each recorded in the ledger, whose write is another
	// event) and cairn.OwnPrefixes under an s3:// --store's prefix.
	OwnPrefixes map[string][]string
}

// Defaults of Options.
const (
	DefaultConcurrency = 16
	DefaultLease       = 30 * time.Second
	DefaultGrace       = 10 * time.Second
	DefaultPoll        = time.Second
	DefaultMaxBatch    = 4096
)

// Fixed limits of the pipeline.
const (
	// queueLen is the capacity of the submission and completion queues
	// (the group-commit loops drain them).
	queueLen = 1024
	// maxCompleteBatch caps the completions one ledger transaction records.
	maxCompleteBatch = 1024
	// callTimeout bounds one Record, RecordAndClaim or Claim call, and a batch
	// of completions.
	callTimeout = 30 * time.Second
	// drainReleaseTimeout bounds releasing, at shutdown, work claimed while
	// recording (the pipeline's lock is held meanwhile).
	drainReleaseTimeout = 10 * time.Second
	// completeLinger is how long a batch of completions may wait to commit
	// with the next Record (ledger.WithLinger): in its transaction on
	// SQLite, in its writes of the shards on the object-store ledger. On a
	// busy pipeline, serve's throughput rose ~15% on SQLite (1 to 10 ms
	// measured the same) and ~45% on the object store (a Record there takes
	// ~8 ms: 2 ms rarely met one; 10 and 30 ms measured the same).
	completeLinger = 10 * time.Millisecond
	// completeLingerMargin: a batch holding a claim whose lease runs out
	// sooner than this does not linger.
	completeLingerMargin = 100 * time.Millisecond
)

// claimRetry spaces attempts to claim work after the ledger failed a Claim:
// full jitter from 50ms, doubling up to 5s.
var claimRetry = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}

// The outcomes of one handler attempt, as metrics label them.
const (
	OutcomeProcessed = "processed"
	OutcomeRetry     = "retry"
	OutcomeDead      = "dead"
	OutcomeLeaseLost = "lease_lost"
	OutcomeReleased  = "released"
)

// Pipeline runs the intake: Submit records, Run claims and handles.
type Pipeline struct {
	l   *ledger.Ledger
	h   Handler
	o   Options
	log *slog.Logger
	m   *metrics
	// everyVersion: the ledger keys work by version id
	// (ledger.Options.EveryVersion). RecordAndClaim then claims nothing, and
	// Submit warns, once, when events carry no version id: their versions
	// coalesce per key as without it.
	everyVersion bool

	subs      chan *submission
	completes chan *completion
	wake      chan struct{}
	slotFreed chan struct{}
	running   atomic.Int64 // handler slots taken (reserved or running)
	// recording: the record loop has batches in hand, and claims with every
	// free slot (recordLoop).
	recording atomic.Bool
	// yielded: the dispatcher left the claiming to the record loop after a
	// Claim that filled its slots, and is owed a wake when the loop idles.
	yielded  atomic.Bool
	maxYield time.Duration // maxYield; changed by tests

	act activity

	// recorded: recent recordings' outcomes, for readiness (ready.go).
	recorded recordHealth

	warnedUnversioned atomic.Bool
	warnedOwn         sync.Map // own prefix → struct{}: said once in the log
	refusals          *refusalLog

	// Quiesce's view (quiesce.go): claims launched and not yet settled, the
	// dispatcher's Claim calls started, and the last of them that found no
	// work.
	inflight   atomic.Int64
	launches   atomic.Uint64 // claims launched, ever: a run that began and ended between two of Quiesce's looks
	claimRound atomic.Uint64
	emptyRound atomic.Uint64

	handlers sync.WaitGroup

	mu       sync.Mutex
	draining bool // no more handler launches
	started  bool
	runStart time.Time     // when Run started (Options.Deadline's fair share)
	closed   chan struct{} // closed when Run returns
}

// New returns a pipeline recording in l and running h on each claimed piece of
// work; opts may be nil (the defaults). Run starts it.
func New(l *ledger.Ledger, h Handler, opts *Options) (*Pipeline, error) {
	if l == nil || h == nil {
		return nil, errors.New("intake: New needs a ledger and a handler")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < MinLease {
		return nil, fmt.Errorf("intake: a lease of %v is too short: a handler is stopped %v before its lease can have expired, so the lease must be at least %v; set Options.Lease to %v or more", o.Lease, MinLeaseMargin, MinLease, MinLease)
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(o.Registerer, l)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{
		l: l, o: o, log: log, m: m, everyVersion: l.EveryVersion(),
		subs:      make(chan *submission, queueLen),
		completes: make(chan *completion, queueLen),
		wake:      make(chan struct{}, 1),
		slotFreed: make(chan struct{}, 1),
		maxYield:  maxYield,
		closed:    make(chan struct{}),
		refusals:  newRefusalLog(log),
	}
	p.h = refusalGuard{p: p, next: h} // refused messages never reach h (refused.go)
	return p, nil
}

type submission struct {
	source string
	evs    []event.Event
	done   chan struct{}
	ds     []ledger.Decision
	err    error
}

// Submit records evs from source and returns the ledger's decisions once they
// are durable. It blocks until Run has started; after Run returned it fails
// with ErrClosed.
//
// Every source passes here, so two decisions are made here once for all:
//
//   - Events for cairn's own objects (cairn.OwnKey: the probe's, locks',
//     journals' and an object-store ledger's objects at the bucket's root)
//     are answered Ignored and not recorded, unless
//     Options.ProcessOwnObjects: they are not the user's data, and a
//     whole-bucket subscription would run the handler for each. The first of
//     each prefix is logged (info) with what was skipped and why.
//   - A refused message (RefusedEvent: bucket RefusedBucket) is recorded
//     as such, never validated as an S3 event, and its reason is logged at
//     warn (the first of each reason at once, then one line per interval
//     with how many followed) and kept for the status page (Refusals).
//   - NUL in a text field event.Validate does not cover (ETag, version id,
//     name, request and host ids, region) becomes U+FFFD: no ledger backend
//     stores it alike (PostgreSQL refuses it), and a refusal there would be
//     answered as the ledger's failure, which a sender retries for ever.
func (p *Pipeline) Submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	for _, ev := range evs {
		p.m.received.WithLabelValues(source, string(ev.Format)).Inc()
	}
	if len(evs) == 0 {
		return nil, nil
	}
	var own []int // indexes of events for cairn's own objects, skipped
	for i, ev := range evs {
		if ev.Kind == event.Test {
			continue // carries no object: the ledger ignores it
		}
		if ev.Bucket == RefusedBucket {
			p.noteRefused(source, ev)
			continue
		}
		if err := ev.Validate(); err != nil {
			p.Refused(source, 1)
			return nil, fmt.Errorf("intake: event %d of %d: %w: %w", i+1, len(evs), ErrInvalidEvent, err)
		}
		if !p.o.ProcessOwnObjects {
			if prefix, ok := p.ownKey(ev.Bucket, ev.Key); ok {
				own = append(own, i)
				p.skipOwn(source, prefix, ev)
				continue
			}
		}
		if p.everyVersion && ev.VersionID == "" && !event.IsAudit(ev.Name) && p.warnedUnversioned.CompareAndSwap(false, true) {
			p.log.Warn("events carry no version id (an unversioned bucket, or a source that drops it): every-version processing cannot tell their versions apart, so they coalesce per key as without it; enable versioning on the bucket",
				"source", source, "bucket", ev.Bucket, "key", ev.Key)
		}
	}
	evs = withoutNUL(evs)
	if len(own) == 0 {
		return p.submit(ctx, source, evs)
	}
	// Record the rest, and answer the skipped ones Ignored in their places.
	rest := make([]event.Event, 0, len(evs)-len(own))
	skip := make(map[int]bool, len(own))
	for _, i := range own {
		skip[i] = true
	}
	for i, ev := range evs {
		if !skip[i] {
			rest = append(rest, ev)
		}
	}
	var got []ledger.Decision
	if len(rest) > 0 {
		var err error
		if got, err = p.submit(ctx, source, rest); err != nil {
			return nil, err
		}
	}
	ds := make([]ledger.Decision, len(evs))
	for i, ev := range evs {
		if skip[i] {
			ds[i] = ledger.Decision{Outcome: ledger.Ignored, Bucket: ev.Bucket, Key: ev.Key, Seq: ev.Sequencer}
			continue
		}
		ds[i], got = got[0], got[1:]
	}
	return ds, nil
}

// withoutNUL returns evs with NUL replaced by U+FFFD in the text fields no
// limit of event.Validate covers (ETag, version id, name, request and host
// ids, region): PostgreSQL's text cannot hold NUL, and a backend's refusal
// would be answered as the ledger's failure (the webhook's 503), which a
// sender retries for ever. The caller's slice is not changed.
func withoutNUL(evs []event.Event) []event.Event {
	var out []event.Event
	for i, ev := range evs {
		fields := []*string{&ev.ETag, &ev.VersionID, &ev.Name, &ev.RequestID, &ev.HostID, &ev.Region}
		changed := false
		for _, f := range fields {
			if strings.IndexByte(*f, 0) >= 0 {
				*f, changed = strings.ReplaceAll(*f, "\x00", "\uFFFD"), true
			}
		}
		if !changed {
			continue
		}
		if out == nil {
			out = slices.Clone(evs)
		}
		out[i] = ev
	}
	if out == nil {
		return evs
	}
	return out
}

// ownKey reports whether key in bucket is one of cairn's own objects, and
// under which prefix.
func (p *Pipeline) ownKey(bucket, key string) (string, bool) {
	if prefix, ok := cairn.OwnKey(key); ok {
		return prefix, true
	}
	for _, prefix := range p.o.OwnPrefixes[bucket] {
		if prefix != "" && strings.HasPrefix(key, prefix) {
			return prefix, true
		}
	}
	return "", false
}

// skipOwn counts an event for one of cairn's own objects that Submit skips,
// and says so in the log the first time for each prefix.
func (p *Pipeline) skipOwn(source, prefix string, ev event.Event) {
	p.m.ownSkipped.WithLabelValues(prefix).Inc()
	if _, said := p.warnedOwn.LoadOrStore(prefix, struct{}{}); said {
		return
	}
	p.log.Info("skipping events for cairn's own objects: they are cairn's probe verdicts, locks, journals or object-store ledger, not your data, and would run the handler for each; subscribe with a prefix filter to spare the deliveries (README: wiring), or set --process-own-objects (Options.ProcessOwnObjects) to process them",
		"prefix", prefix, "source", source, "bucket", ev.Bucket, "key", ev.Key, "skipped_prefixes", cairn.OwnPrefixes())
}

// submit hands evs (checked by Submit) to the record loop and waits for the
// ledger's decisions.
func (p *Pipeline) submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	select {
	case <-p.closed:
		return nil, ErrClosed
	default:
	}
	s := &submission{source: source, evs: evs, done: make(chan struct{})}
	select {
	case p.subs <- s:
	case <-p.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-s.done:
		return s.ds, s.err
	case <-p.closed:
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

// Ready reports whether the pipeline can take events: the ledger answers,
// and recording has not failed readyFailures times in a row in the last
// readyHold (a ledger on a full disk answers reads but records nothing; see
// ready.go).
func (p *Pipeline) Ready(ctx context.Context) error {
	select {
	case <-p.closed:
		return ErrClosed
	default:
	}
	if err := p.recorded.check(time.Now()); err != nil {
		return err
	}
	return p.l.Ping(ctx)
}

// Run records submissions and runs handlers until ctx is done, then drains:
// pending submissions fail with ErrClosed, running handlers get Options.Grace,
// and the rest are released. It returns nil after a clean shutdown.
func (p *Pipeline) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return errors.New("intake: Run called twice")
	}
	p.started = true
	p.runStart = time.Now()
	p.mu.Unlock()
	defer close(p.closed)
	// hctx is the handlers' parent context, cancelled after Grace at
	// shutdown; both loops launch handlers under it.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	var wg sync.WaitGroup
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { p.recordLoop(recCtx, hctx) })
	compCtx, stopComp := context.WithCancel(context.WithoutCancel(ctx))
	compDone := make(chan struct{})
	go func() { defer close(compDone); p.completeLoop(compCtx) }()

	p.dispatch(ctx, hctx, cancelHandlers) // returns when ctx is done and every handler has settled
	stopComp()
	<-compDone
	stopRec()
	wg.Wait()
	return nil
}

// recordLoop group-commits submissions: one ledger transaction for everything
// that arrived while the previous one was committing. Handlers it launches
// run under hctx.
func (p *Pipeline) recordLoop(ctx, hctx context.Context) {
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
		case first = <-p.subs:
		case <-ctx.Done():
			p.failPending()
			return
		}
		batch := []*submission{first}
		n := len(first.evs)
	fill:
		for n < p.o.MaxBatch {
			select {
			case s := <-p.subs:
				batch = append(batch, s)
				n += len(s.evs)
			default:
				break fill
			}
		}
		p.recording.Store(true)
		leftover = p.record(ctx, hctx, batch) || leftover
		if p.everyVersion || len(p.subs) == 0 {
			// Idle (or, with EveryVersion, RecordAndClaim claims nothing):
			// what the batches left unclaimed is the dispatcher's, and so is
			// the claiming it left to them (yielded is read after recording
			// is cleared, as dispatch sets them the other way round: one of
			// the two sees the other's).
			p.recording.Store(false)
			if p.yielded.Swap(false) || leftover {
				p.wakeDispatcher()
			}
			leftover = false
		}
	}
}

// wakeDispatcher tells the dispatcher that recorded work is waiting for a
// claim.
func (p *Pipeline) wakeDispatcher() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Pipeline) failPending() {
	for {
		select {
		case s := <-p.subs:
			s.err = ErrClosed
			close(s.done)
		default:
			return
		}
	}
}

// record commits one batch, grouped by source, and answers each submission.
// When handler slots are free, it claims work in the same transaction
// (RecordAndClaim: the earliest due first, so never ahead of older work) and
// starts handlers at once: new work on an unloaded pipeline starts as soon as
// it is durable, with no separate claim (under hctx). It reports whether it
// left work of the batch unclaimed.
func (p *Pipeline) record(ctx, hctx context.Context, batch []*submission) (left bool) {
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
		if n := p.reserveForRecord(); n > 0 {
			// The claims' leases run from (no earlier than) the call's start.
			ds, cs, err = p.l.RecordAndClaim(rctx, src, evs, n, p.o.Lease)
			p.unreserve(n - len(cs))
		} else {
			ds, err = p.l.Record(rctx, src, evs)
		}
		cancel()
		p.m.recordSeconds.Observe(time.Since(start).Seconds())
		if err == nil && len(ds) != len(evs) {
			err = fmt.Errorf("intake: ledger returned %d decisions for %d events", len(ds), len(evs))
		}
		p.recorded.note(err, time.Now())
		if err != nil {
			p.log.Warn("recording events failed", "source", src, "events", len(evs), "submissions", len(subs), "err", err)
		}
		p.m.claims.Add(float64(len(cs)))
		for _, c := range cs {
			p.launch(hctx, c, start)
		}
		if err != nil && len(subs) > 1 {
			// One submission's data may have failed the whole batch: each is
			// recorded again on its own, so the others never see its error.
			// (What the failed batch did record is decided again as a
			// duplicate, and its work is claimed by the next poll.)
			for _, s := range subs {
				rctx, cancel := context.WithTimeout(ctx, callTimeout)
				s.ds, s.err = p.l.Record(rctx, src, s.evs)
				cancel()
				if s.err == nil && len(s.ds) != len(s.evs) {
					s.ds, s.err = nil, fmt.Errorf("intake: ledger returned %d decisions for %d events", len(s.ds), len(s.evs))
				}
				p.recorded.note(s.err, time.Now())
				if p.decided(s.ds) > 0 {
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
				p.decided(s.ds)
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
func (p *Pipeline) decided(ds []ledger.Decision) (work int) {
	for _, d := range ds {
		p.m.decisions.WithLabelValues(string(d.Outcome)).Inc()
		if d.Outcome == ledger.Accepted || d.Outcome == ledger.Coalesced {
			work++
		}
	}
	return work
}

// reserve takes up to n free handler slots and returns how many it took.
func (p *Pipeline) reserve(n int) int {
	for {
		cur := p.running.Load()
		k := min(int64(n), int64(p.o.Concurrency)-cur)
		if k <= 0 {
			return 0
		}
		if p.running.CompareAndSwap(cur, cur+k) {
			return int(k)
		}
	}
}

// reserveForRecord reserves every free slot for the claims of a Record (the
// earliest due work first: older work the last batches left, then the
// batch's own): none while draining (they would be released at once) or with
// EveryVersion (RecordAndClaim claims nothing then).
func (p *Pipeline) reserveForRecord() int {
	if p.everyVersion {
		return 0
	}
	p.mu.Lock()
	draining := p.draining
	p.mu.Unlock()
	if draining {
		return 0
	}
	return p.reserve(p.o.Concurrency)
}

// unreserve gives back n reserved slots that were not used.
func (p *Pipeline) unreserve(n int) {
	if n <= 0 {
		return
	}
	p.running.Add(int64(-n))
	select {
	case p.slotFreed <- struct{}{}:
	default:
	}
}

// launch runs a claim's handler in a reserved slot, under hctx; while
// draining, the work is released instead. claimedAt is when the claiming call
// started: the claim's lease runs until claimedAt + Lease at the earliest.
func (p *Pipeline) launch(hctx context.Context, c ledger.Claim, claimedAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.draining {
		deadline := claimedAt.Add(p.o.Lease - leaseMargin(p.o.Lease))
		if limit := time.Now().Add(drainReleaseTimeout); limit.Before(deadline) {
			deadline = limit // p.mu is held
		}
		err := p.settle(c, deadline, "release", func(ctx context.Context) error { return p.l.Release(ctx, c) })
		if err != nil {
			p.log.Warn("releasing a claim at shutdown failed; its lease will expire", "bucket", c.Bucket, "key", c.Key, "err", err)
		}
		p.unreserve(1)
		return
	}
	p.m.running.Inc()
	p.inflight.Add(1)
	p.launches.Add(1)
	p.handlers.Go(func() {
		defer p.inflight.Add(-1)
		p.run(hctx, c, claimedAt)
	})
}

// dispatch claims work while slots are free and runs handlers under hctx;
// once ctx is done, it waits for them, cancelling hctx after the grace period.
func (p *Pipeline) dispatch(ctx, hctx context.Context, cancelHandlers context.CancelFunc) {
	failures := 0 // failed claims in a row
	// eager: claim as soon as a slot is free. Not after waiting for a slot
	// while the record loop claims (it takes the free slots itself, and
	// wakes the dispatcher when it idles with work left), until a wake or
	// the poll timer. owed: a wake or poll has not been answered by a Claim
	// yet; a slot freed then is claimed with even while the loop records
	// (that loop may claim only its own work: the object-store ledger claims
	// in the shards a batch writes, so work the wake was for would wait for
	// the next poll).
	//
	// After a Claim that filled every slot it took (more may be due), it
	// claims again at once only if the record loop is idle; while the loop
	// records, it yields, and the loop wakes it when it idles (or, under a
	// stream that never lets it idle, after maxYield: on the object-store
	// ledger a batch claims only in the shards it writes, and older work in
	// the others must not wait for the poll). Claiming again at once held
	// the free slots through a Claim (on the object-store ledger, a write of
	// every shard with work due) while the next batch found none to claim
	// its own work with, and left it to the dispatcher again: with 64
	// handlers on MinIO, a seventh of the work was claimed so, at twice the
	// p50 delivery time.
	eager, owed := true, true
	asked := false // ShortLived: a wake asked for claims, and they have not run dry yet
	for ctx.Err() == nil {
		if p.o.ShortLived && !asked {
			select {
			case <-p.wake:
				asked = true
			case <-ctx.Done():
			}
			continue
		}
		if !eager && p.yield() {
			p.idle(ctx, min(p.o.Poll, p.maxYield))
			eager, owed = true, true
			continue
		}
		free := p.reserve(p.o.Concurrency)
		if free <= 0 {
			select {
			case <-p.slotFreed:
			case <-ctx.Done():
			}
			eager = owed
			continue
		}
		owed = false
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		claimedAt := time.Now()
		round := p.claimRound.Add(1)
		cs, err := p.l.Claim(cctx, free, p.o.Lease)
		cancel()
		if err == nil && len(cs) == 0 {
			p.noteEmpty(round)
		}
		p.unreserve(free - len(cs))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := claimRetry.Delay(failures)
			failures++
			p.log.Warn("claiming work failed", "err", err, "retry_in", wait)
			_ = backoff.Sleep(ctx, wait)
			continue
		}
		failures = 0
		p.m.claims.Add(float64(len(cs)))
		for _, c := range cs {
			p.launch(hctx, c, claimedAt)
		}
		if len(cs) < free && p.o.ShortLived {
			asked = false // nothing more due now: wait to be asked again
			continue
		}
		if len(cs) < free {
			p.idle(ctx, p.o.Poll)
			owed = true
		}
		eager = len(cs) < free
	}
	// Shutdown: no more launches; running handlers finish within the grace period.
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.handlers.Wait(); close(done) }()
	t := time.NewTimer(p.o.Grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.log.Warn("shutdown grace period over; cancelling running handlers", "running", p.running.Load())
		cancelHandlers()
		<-done
	}
}

// maxYield bounds how long the dispatcher leaves the claiming to a record
// loop that does not idle.
const maxYield = 100 * time.Millisecond

// yield reports whether the record loop is recording and claims (not with
// EveryVersion), and if so has it wake the dispatcher when it idles.
func (p *Pipeline) yield() bool {
	if p.everyVersion {
		return false
	}
	p.yielded.Store(true)
	if p.recording.Load() {
		return true
	}
	p.yielded.Store(false)
	return false
}

// idle waits until the record loop wakes the dispatcher, d has passed (the
// poll, or a yield's bound) or ctx is done.
func (p *Pipeline) idle(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// run runs one claim's handler, renewing its lease, and settles the outcome.
func (p *Pipeline) run(hctx context.Context, c ledger.Claim, claimedAt time.Time) {
	// The handler's slot frees as soon as it returns: settling the outcome
	// (a batched ledger write) needs no slot, and the record stays claimed
	// until it is settled, so the key cannot run twice meanwhile.
	freeSlot := sync.OnceFunc(func() {
		p.running.Add(-1)
		p.m.running.Dec()
		select {
		case p.slotFreed <- struct{}{}:
		default:
		}
	})
	defer freeSlot()
	w := workFromClaim(c)
	ctx, cancel := context.WithCancelCause(hctx)
	defer cancel(nil)
	if p.o.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, p.o.Timeout, errTimeout)
		defer cancelT()
	}
	if !p.o.Deadline.IsZero() {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadlineCause(ctx, p.o.Deadline, errDeadline)
		defer cancelD()
	}
	v := newValidity(claimedAt, p.o.Lease, cancel)
	ctx = leaseContext{Context: ctx, v: v}
	r := p.startRenewal(c, v, cancel)
	start := time.Now()
	result, err := p.call(ctx, w)
	lost := r.stop()
	deadline, expired := v.end()
	elapsed := time.Since(start)
	freeSlot()
	if lost == nil && (expired || errors.Is(err, errLeaseExpired)) {
		lost = errLeaseExpired
		p.log.Warn("a claim's lease ran out on this process's clock before a renewal was confirmed (the ledger unreachable or slow, or this process stalled): the handler was stopped, and the work runs again once claimed again",
			"bucket", c.Bucket, "key", c.Key, "token", c.Token, "lease", p.o.Lease)
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
		serr = p.settle(c, deadline, "complete", func(ctx context.Context) error { return p.complete(ctx, c, result, deadline) })
		outcome = OutcomeProcessed
	case hctx.Err() != nil && !IsPermanent(err), errors.Is(err, errUnguarded), p.cutUnfairly(ctx, claimedAt):
		// Shutdown cut the handler short, it could not start guarded, or
		// the Deadline stopped an attempt that did not get a fair run: give
		// the work back uncounted.
		serr = p.settle(c, deadline, "release", func(ctx context.Context) error { return p.l.Release(ctx, c) })
		outcome = OutcomeReleased
	case IsPermanent(err):
		serr = p.settle(c, deadline, "fail", func(ctx context.Context) error { return p.l.Fail(ctx, c, err.Error(), false) })
		outcome = OutcomeDead
	default:
		serr = p.settle(c, deadline, "fail", func(ctx context.Context) error { return p.l.Fail(ctx, c, err.Error(), true) })
		outcome = OutcomeRetry
	}
	if errors.Is(serr, ledger.ErrLeaseLost) || errors.Is(serr, ledger.ErrSuperseded) {
		outcome = OutcomeLeaseLost
	}
	if outcome == OutcomeLeaseLost {
		p.m.leaseLosses.Inc()
	}
	if outcome == OutcomeProcessed && serr == nil {
		p.act.add(time.Now())
	}
	p.m.handlerSeconds.WithLabelValues(outcome).Observe(elapsed.Seconds())
	p.m.outcomes.WithLabelValues(outcome).Inc()
	lvl := slog.LevelDebug
	if outcome != OutcomeProcessed || serr != nil {
		lvl = slog.LevelWarn
	}
	if p.log.Enabled(context.Background(), lvl) { // its arguments cost ten allocations per event
		p.log.Log(context.Background(), lvl, "handled", "bucket", c.Bucket, "key", c.Key, "sequencer", c.Seq, "token", c.Token,
			"attempt", c.Attempts, "outcome", outcome, "seconds", elapsed.Seconds(), "err", errString(err), "settle_err", errString(serr))
	}
	if p.o.OnOutcome != nil {
		p.o.OnOutcome(w, outcome, err)
	}
}

var errTimeout = errors.New("intake: handler timed out")

// errDeadline is the cause of an attempt stopped at Options.Deadline.
var errDeadline = errors.New("intake: stopped at the pipeline's deadline")

// cutUnfairly tells whether the handler's context was ended by
// Options.Deadline for an attempt claimed in the second half of the time
// from Run's start to it (see Options.Deadline).
func (p *Pipeline) cutUnfairly(ctx context.Context, claimedAt time.Time) bool {
	if p.o.Deadline.IsZero() || !errors.Is(context.Cause(ctx), errDeadline) {
		return false
	}
	half := p.o.Deadline.Sub(p.runStart) / 2
	return p.o.Deadline.Sub(claimedAt) < half
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
func (p *Pipeline) settle(c ledger.Claim, deadline time.Time, op string, call func(ctx context.Context) error) error {
	if !p.o.SettleBy.IsZero() {
		deadline = earliest(deadline, p.o.SettleBy)
	}
	for attempt := 1; ; attempt++ {
		// Each attempt gets less than a renewal interval (a hung connection
		// is abandoned in time for another attempt), and never past the
		// deadline.
		ctx, cancel := context.WithDeadline(context.Background(), earliest(deadline, time.Now().Add(renewTimeout(p.o.Lease/3))))
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
			p.m.settleGivenUp.WithLabelValues(op).Inc()
			p.log.Warn("recording a handler's outcome failed until the claim's lease ran out; giving up (the work runs again when it is claimed again)",
				"op", op, "bucket", c.Bucket, "key", c.Key, "sequencer", c.Seq, "token", c.Token, "attempts", attempt, "err", err)
			return err
		}
		p.m.settleRetries.WithLabelValues(op).Inc()
		p.log.Info("recording a handler's outcome failed; retrying", "op", op, "bucket", c.Bucket, "key", c.Key,
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
func (p *Pipeline) call(ctx context.Context, w Work) (result string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError(v)
		}
	}()
	result, err = p.h.Handle(ctx, w)
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

func (p *Pipeline) startRenewal(c ledger.Claim, v *validity, cancel context.CancelCauseFunc) *renewal {
	ctx, stop := context.WithCancel(context.Background())
	r := &renewal{cancel: stop, done: make(chan struct{})}
	every := p.o.Lease / 3
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
			_, err := p.l.Renew(rctx, c, p.o.Lease)
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
				p.log.Warn("renewing a lease failed; retrying (the handler is stopped if no renewal succeeds before the lease runs out)",
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

type completion struct {
	c        ledger.Claim
	result   string
	deadline time.Time // the claim's lease runs out
	done     chan error
}

// complete hands a completion to the group-commit loop and waits for its
// batch's answer.
func (p *Pipeline) complete(ctx context.Context, c ledger.Claim, result string, deadline time.Time) error {
	cp := &completion{c: c, result: result, deadline: deadline, done: make(chan error, 1)}
	select {
	case p.completes <- cp:
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

// completeLoop commits completions in batches: one transaction for every
// completion that arrived while the previous batch was committing.
func (p *Pipeline) completeLoop(ctx context.Context) {
	for {
		var first *completion
		select {
		case first = <-p.completes:
		case <-ctx.Done():
			return
		}
		batch := []*completion{first}
	fill:
		for len(batch) < maxCompleteBatch {
			select {
			case c := <-p.completes:
				batch = append(batch, c)
			default:
				break fill
			}
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
		deadline = earliest(deadline, time.Now().Add(renewTimeout(p.o.Lease/3)))
		if !p.o.SettleBy.IsZero() {
			deadline = earliest(deadline, p.o.SettleBy)
		}
		// Until the last of the batch's leases runs out (its waiter retries a
		// failed batch until then; the others have given up by then).
		// Not urgent: the handlers' slots are free already; the batch may wait
		// (completeLinger) to commit with the next Record, unless a lease in
		// it is about to run out.
		linger := completeLinger
		if p.o.ShortLived || time.Until(soonest) < completeLingerMargin {
			linger = 0
		}
		bctx, cancel := context.WithDeadline(ledger.WithLinger(context.WithoutCancel(ctx), linger), deadline)
		errs, err := p.l.CompleteBatch(bctx, cs, results)
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
