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

// The outcomes of one handler attempt, as metrics label them.
const (
	OutcomeProcessed = "processed"
	OutcomeRetry     = "retry"
	OutcomeDead      = "dead"
	OutcomeLeaseLost = "lease_lost"
	OutcomeReleased  = "released"
)

// Pipeline runs the intake: Submit records, Run claims and handles.
//
// Each role has its own type and file: the recorder (recorder.go)
// group-commits submissions; the dispatcher (dispatcher.go) owns the handler
// slots, claims, and launches every claim (its own and those the recorder's
// batches got); the runner (runner.go) runs one claim's handler, renews its
// lease and settles its outcome; the completer (completer.go) group-commits
// completions. Pipeline wires them and decides, once for every source, what
// is submitted.
type Pipeline struct {
	l   *ledger.Ledger
	o   Options
	log *slog.Logger
	m   *metrics
	// everyVersion: the ledger keys work by version id
	// (ledger.Options.EveryVersion). RecordAndClaim then claims nothing, and
	// Submit warns, once, when events carry no version id: their versions
	// coalesce per key as without it.
	everyVersion bool

	rec    *recorder
	disp   *dispatcher
	runner *runner
	comp   *completer

	act activity

	warnedUnversioned atomic.Bool
	warnedOwn         sync.Map // own prefix → struct{}: said once in the log
	refusals          *refusalLog

	mu      sync.Mutex
	started bool
	closed  chan struct{} // closed when Run returns
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
		closed:   make(chan struct{}),
		refusals: newRefusalLog(log),
	}
	p.comp = newCompleter(l, &p.o)
	p.runner = &runner{l: l, o: &p.o, log: log, m: m, act: &p.act, comp: p.comp,
		h: refusalGuard{p: p, next: h}} // refused messages never reach h (refused.go)
	p.disp = newDispatcher(l, &p.o, log, m, p.runner, p.everyVersion)
	p.comp.running = func() int { return int(p.disp.inflight.Load()) }
	p.rec = newRecorder(l, &p.o, log, m, p.disp, p.everyVersion, p.closed)
	return p, nil
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
			p.reject(source, "invalid_record", 1, refusalNote{answer: "refused: Submit returned ErrInvalidEvent to the source", key: ev.Bucket + "/" + ev.Key, detail: err.Error()})
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
		return p.rec.submit(ctx, source, evs)
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
		if got, err = p.rec.submit(ctx, source, rest); err != nil {
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
	if err := p.rec.health.check(time.Now()); err != nil {
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
	p.runner.runStart = time.Now()
	p.mu.Unlock()
	defer close(p.closed)
	// hctx is the handlers' parent context, cancelled after Grace at
	// shutdown; the dispatcher launches every handler under it.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	var wg sync.WaitGroup
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { p.rec.loop(recCtx, hctx) })
	compCtx, stopComp := context.WithCancel(context.WithoutCancel(ctx))
	compDone := make(chan struct{})
	go func() { defer close(compDone); p.comp.loop(compCtx) }()

	p.disp.loop(ctx, hctx, cancelHandlers) // returns when ctx is done and every handler has settled
	stopComp()
	<-compDone
	stopRec()
	wg.Wait()
	return nil
}
