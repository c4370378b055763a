package awslambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
)

// Poison says what becomes of an SQS message that is no event at all (not
// JSON, no shape cairn knows, every record refused).
type Poison string

// The poison policies.
const (
	// PoisonDLQ (the default) reports the message in batchItemFailures, alone:
	// the queue delivers it again and its redrive policy moves it to the
	// dead-letter queue after maxReceiveCount receives. Give the queue a
	// redrive policy: without one it comes back until its retention ends.
	PoisonDLQ Poison = "dlq"
	// PoisonLedger keeps it in the ledger as a dead letter with its reason
	// (bucket intake.RefusedBucket: listed, replayable once cairn accepts it)
	// and acknowledges it.
	PoisonLedger Poison = "ledger"
)

// Options configure a Function; nil means the defaults.
type Options struct {
	// Pipeline configures each invocation's pipeline (Concurrency,
	// ProcessOwnObjects, OwnPrefixes, Timeout, …). Its Registerer is not
	// used (nothing scrapes a Lambda function's metrics), nor its Grace,
	// Deadline and SettleBy: StopBefore sets them (see there). Its Lease
	// defaults to the invocation's time (at least intake.MinLease, at most
	// intake.DefaultLease).
	Pipeline intake.Options
	// StopBefore is how long before the invocation's deadline handlers are
	// stopped (an attempt that had at least half the invocation is counted
	// and retried, a later one released uncounted), so that their outcomes
	// are settled in the ledger (by a quarter of StopBefore before the
	// deadline; one the ledger cannot take by then is left to its lease) and
	// the answer leaves before Lambda kills the process. Default: a tenth
	// of the invocation's time, at least 500ms and at most 5s.
	StopBefore time.Duration
	// Poison: see Poison. Default PoisonDLQ. Direct and SNS invocations
	// have no per-message answer: what is no event is kept in the ledger
	// as a dead letter, whatever Poison says.
	Poison Poison
	// Timeout is an invocation's time when its context has no deadline
	// (outside Lambda). Default 60s.
	Timeout time.Duration
	// Retention: a jobs invocation (JobsPayload) purges processed records
	// older than this (at least ledger.MinPurgeAge). Default 0: never.
	Retention time.Duration
	// Jobs run once, in order, on each jobs invocation (JobsPayload), before
	// it runs what is due (their Every is not used; the schedule that sends
	// the payload is): an audit (intake/auditjob) resubmits what no event
	// announced, and the invocation then runs it. A drain (DrainPayload, an
	// EventBridge "Scheduled Event") runs no jobs: it is meant to come every
	// minute, and an audit LISTs the whole bucket.
	Jobs []intake.Job
	// Logger; nil: the pipeline's Logger, else discarded.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultTimeout = 60 * time.Second
	minStopBefore  = 500 * time.Millisecond
	maxStopBefore  = 5 * time.Second
)

// Function handles Lambda invocations: each records its events in the
// ledger, runs the work it can within its time and answers what the event
// source must deliver again. It is safe for concurrent invocations (the
// runtime runs several in one process when AWS_LAMBDA_MAX_CONCURRENCY is
// set). It implements the aws-lambda-go lambda.Handler interface.
type Function struct {
	l   *ledger.Ledger
	h   intake.Handler
	o   Options
	log *slog.Logger

	longLease sync.Once // the warning about a lease longer than an invocation
}

// New returns a Function recording in l and running h on each claimed piece
// of work, with the same contract as a serve daemon's handler: the newest
// accepted event of the key, a fencing token, retry or permanent failure.
// opts may be nil.
func New(l *ledger.Ledger, h intake.Handler, opts *Options) (*Function, error) {
	if l == nil || h == nil {
		return nil, errors.New("awslambda: New needs a ledger and a handler")
	}
	if l.Local() {
		return nil, errors.New("awslambda: the ledger is a file on this machine (SQLite), but every Lambda sandbox has a disk of its own: each would keep its own ledger, and a duplicate delivered to two sandboxes would run twice; use a shared ledger: the object-store ledger (s3://BUCKET/PREFIX, the bucket itself), PostgreSQL (postgres://…) or DynamoDB (dynamodb://TABLE)")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch o.Poison {
	case "":
		o.Poison = PoisonDLQ
	case PoisonDLQ, PoisonLedger:
	default:
		return nil, fmt.Errorf("awslambda: unknown poison policy %q: want %q or %q", o.Poison, PoisonDLQ, PoisonLedger)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.StopBefore < 0 || o.Retention < 0 {
		return nil, errors.New("awslambda: StopBefore and Retention must not be negative")
	}
	if o.Retention > 0 && o.Retention < ledger.MinPurgeAge {
		return nil, fmt.Errorf("awslambda: a Retention of %v is under ledger.MinPurgeAge (%v), which the fencing tokens of purged keys rest on: give at least %v (e.g. 30 days), or 0 to never purge", o.Retention, ledger.MinPurgeAge, ledger.MinPurgeAge)
	}
	if o.Pipeline.Lease != 0 && o.Pipeline.Lease < intake.MinLease {
		return nil, fmt.Errorf("awslambda: a lease of %v is shorter than intake.MinLease (%v)", o.Pipeline.Lease, intake.MinLease)
	}
	log := o.Logger
	if log == nil {
		log = o.Pipeline.Logger
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o.Pipeline.Logger = log
	return &Function{l: l, h: h, o: o, log: log}, nil
}

// Start runs f as the function's handler through the Lambda runtime API
// (aws-lambda-go's lambda.Start); it does not return. Outside Lambda (no
// AWS_LAMBDA_RUNTIME_API in the environment) it returns an error instead.
func (f *Function) Start() error {
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		return errors.New("awslambda: AWS_LAMBDA_RUNTIME_API is not set: this is not running inside AWS Lambda (or its Runtime Interface Emulator)")
	}
	// Lambda sends SIGTERM before it shuts a sandbox down (when the function
	// has an extension): write what the ledger keeps in the background.
	lambda.StartWithOptions(f, lambda.WithEnableSIGTERM(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_ = f.l.Flush(ctx)
	}))
	return nil
}

// Summary is the answer to a direct, SNS or drain invocation.
type Summary struct {
	Kind     string         `json:"kind"`
	Messages int            `json:"messages"`
	Events   int            `json:"events"`
	Refused  int            `json:"refused,omitempty"`  // messages kept as dead letters
	Outcomes map[string]int `json:"outcomes,omitempty"` // ledger decisions by outcome
	Handled  map[string]int `json:"handled,omitempty"`  // handler attempts by outcome
	// Unfinished: the invocation stopped at its deadline with work it could
	// have run; the next invocation or drain runs it.
	Unfinished bool   `json:"unfinished,omitempty"`
	Errors     string `json:"errors,omitempty"` // a drain's failed jobs
}

// BatchResponse is the answer to an SQS batch: the messages the queue must
// deliver again (ReportBatchItemFailures must be on in the event source
// mapping).
type BatchResponse struct {
	BatchItemFailures []BatchItemFailure `json:"batchItemFailures"`
}

// BatchItemFailure names one message.
type BatchItemFailure struct {
	ItemIdentifier string `json:"itemIdentifier"`
}

// Invoke handles one invocation (lambda.Handler). Its error makes Lambda
// deliver the whole payload again; it is returned only when none of the
// payload's events could be recorded.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	start := time.Now()
	inv, err := classify(payload)
	if err != nil {
		inv = direct(payload) // the event parser names what is wrong; kept as a dead letter
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(f.o.Timeout)
	}
	total := deadline.Sub(start)
	stopBefore := f.o.StopBefore
	if stopBefore == 0 {
		stopBefore = min(max(total/10, minStopBefore), maxStopBefore)
	}
	stopAt := deadline.Add(-stopBefore)
	if time.Until(stopAt) <= 0 {
		return nil, fmt.Errorf("awslambda: the invocation has %v left, less than the %v kept to settle outcomes before Lambda's deadline: raise the function's timeout", time.Until(deadline).Round(time.Millisecond), stopBefore)
	}

	handled := map[string]int{}
	var mu sync.Mutex
	po := f.o.Pipeline
	if po.Lease == 0 {
		po.Lease = min(max(time.Until(stopAt), intake.MinLease), intake.DefaultLease)
	} else if po.Lease > time.Until(stopAt) {
		f.longLease.Do(func() {
			f.log.Warn("the lease is longer than the invocation's time: a key whose invocation Lambda kills stays claimed that much longer before another takes it over; leave the lease unset (it then follows the invocation's deadline)",
				"lease", po.Lease, "invocation", total)
		})
	}
	po.Deadline = stopAt
	po.ShortLived = true
	// Each invocation's pipeline is new: its metrics could be registered
	// once only, and nothing scrapes a Lambda function.
	po.Registerer = nil
	// Handlers stop at stopAt (Deadline); the shutdown then waits Grace for
	// one that ignores its context, outcomes settle by settleBy, and the
	// answer leaves by answerBy, all before Lambda's deadline.
	settleBy := deadline.Add(-stopBefore / 4)
	answerBy := deadline.Add(-stopBefore / 8)
	po.Grace = stopBefore / 4
	po.SettleBy = settleBy
	onOutcome := po.OnOutcome
	po.OnOutcome = func(w intake.Work, outcome string, err error) {
		mu.Lock()
		handled[outcome]++
		mu.Unlock()
		if onOutcome != nil {
			onOutcome(w, outcome, err)
		}
	}
	p, err := intake.New(f.l, f.h, &po)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithDeadline(context.WithoutCancel(ctx), stopAt)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(runCtx)
	}()

	sum := &Summary{Kind: inv.kind.String(), Messages: len(inv.msgs)}
	var answer any = sum
	switch inv.kind {
	case kindDrain:
	case kindJobs:
		f.jobs(runCtx, sum)
	default:
		var failed []BatchItemFailure
		failed, err = f.deliver(runCtx, p, inv, sum)
		if err != nil {
			stop()
			<-done
			return nil, err
		}
		if inv.kind == kindSQS {
			answer = BatchResponse{BatchItemFailures: failed}
		}
	}
	// What the ledger writes in the background (the object-store ledger's
	// work index) is written before the process can be frozen or killed:
	// once now, while the handlers run (a process killed mid-handler then
	// leaves its claims where other processes look for expired leases), and
	// once more after them.
	flushCtx, cancelFlush := context.WithDeadline(context.WithoutCancel(ctx), answerBy)
	defer cancelFlush()
	flushed := make(chan error, 1)
	go func() { flushed <- f.l.Flush(flushCtx) }()
	if qerr := p.Quiesce(runCtx); qerr != nil {
		sum.Unfinished = true
		f.log.Warn("the invocation stops at its deadline with work it could run; the next invocation or drain runs it",
			"kind", inv.kind.String(), "stop_before", stopBefore)
	}
	stop()
	<-done // handlers stopped, outcomes settled (or their leases run out)
	err = errors.Join(<-flushed, f.l.Flush(flushCtx))
	if err != nil {
		f.log.Warn("writing the ledger's work index failed; other processes see this invocation's remaining work at their next sweep", "err", err)
	}
	mu.Lock()
	if len(handled) > 0 {
		sum.Handled = handled
	}
	mu.Unlock()
	return json.Marshal(answer)
}

// deliver records the invocation's messages and returns the SQS messages to
// deliver again. It fails only when nothing could be recorded.
func (f *Function) deliver(ctx context.Context, p *intake.Pipeline, inv *invocation, sum *Summary) ([]BatchItemFailure, error) {
	source := "lambda"
	if inv.kind != kindDirect {
		source = "lambda-" + inv.kind.String()
	}
	failed := make([]bool, len(inv.msgs))
	batches := make([][]event.Event, len(inv.msgs)) // each message's events to record
	for i, m := range inv.msgs {
		evs := m.evs
		if m.err != nil || len(m.rej) > 0 {
			// A message without an id cannot be named in the answer (an
			// empty itemIdentifier fails the whole batch): it is kept as a
			// dead letter whatever Poison says.
			if m.err != nil && inv.kind == kindSQS && f.o.Poison == PoisonDLQ && m.id != "" {
				failed[i] = true
				p.Refused(source, 1)
				f.log.Warn("an SQS message is no event; reported failed, for the queue's redrive policy to dead-letter",
					"message_id", m.id, "err", m.err)
				continue
			}
			if kept, ok := intake.RefusedEvent(m.body, m.err, m.rej); ok {
				f.log.Warn("a message refused in whole or part; kept in the ledger as a dead letter",
					"message_id", m.id, "key", kept.Key, "reason", kept.RequestID)
				evs = append(evs[:len(evs):len(evs)], kept)
				sum.Refused++
			}
		}
		batches[i] = evs
	}
	if inv.fifo {
		failGroups(inv, failed, batches)
	}
	var all []event.Event
	for i := range inv.msgs {
		if !failed[i] {
			all = append(all, batches[i]...)
		}
	}
	sum.Events = len(all)
	if len(all) == 0 {
		return failures(inv, failed), nil
	}
	ds, err := p.Submit(ctx, source, all)
	if err == nil {
		countOutcomes(sum, ds)
		return failures(inv, failed), nil
	}
	if inv.kind != kindSQS || len(inv.msgs) == 1 {
		return nil, fmt.Errorf("awslambda: recording the invocation's events failed (Lambda delivers them again): %w", err)
	}
	// One message's data may have failed the whole batch: record each on
	// its own, in order, so only those that cannot be recorded are
	// delivered again (and, on a FIFO queue, the rest of their group).
	f.log.Warn("recording the batch failed; recording its messages one by one", "messages", len(inv.msgs), "err", err)
	recorded := 0
	for i := range inv.msgs {
		if failed[i] || len(batches[i]) == 0 {
			continue
		}
		if inv.fifo && groupFailedBefore(inv, failed, i) {
			failed[i] = true
			continue
		}
		ds, err := p.Submit(ctx, source, batches[i])
		if err != nil {
			failed[i] = true
			f.log.Warn("recording a message failed; the queue delivers it again", "message_id", inv.msgs[i].id, "err", err)
			continue
		}
		recorded++
		countOutcomes(sum, ds)
	}
	if recorded == 0 {
		return nil, fmt.Errorf("awslambda: recording the batch failed (the queue delivers it again): %w", err)
	}
	return failures(inv, failed), nil
}

// failGroups marks, on a FIFO queue, every message after a failed one of its
// group as failed too: the queue then delivers the group's rest again in
// order, after the failed one.
func failGroups(inv *invocation, failed []bool, batches [][]event.Event) {
	for i := range inv.msgs {
		if !failed[i] && groupFailedBefore(inv, failed, i) {
			failed[i] = true
			batches[i] = nil
		}
	}
}

// groupFailedBefore tells whether a message of i's group before i failed.
func groupFailedBefore(inv *invocation, failed []bool, i int) bool {
	for j := range i {
		if failed[j] && inv.msgs[j].group == inv.msgs[i].group {
			return true
		}
	}
	return false
}

// failures lists the failed messages' ids, in the batch's order.
func failures(inv *invocation, failed []bool) []BatchItemFailure {
	out := []BatchItemFailure{}
	for i, m := range inv.msgs {
		if failed[i] {
			out = append(out, BatchItemFailure{ItemIdentifier: m.id})
		}
	}
	return out
}

func countOutcomes(sum *Summary, ds []ledger.Decision) {
	if sum.Outcomes == nil {
		sum.Outcomes = map[string]int{}
	}
	for _, d := range ds {
		sum.Outcomes[string(d.Outcome)]++
	}
}

// jobs runs the jobs and the purge; the caller then runs what is due.
func (f *Function) jobs(ctx context.Context, sum *Summary) {
	var errs []error
	for _, j := range f.o.Jobs {
		if err := j.Run(ctx); err != nil {
			f.log.Warn(j.Name+" failed", "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", j.Name, err))
		}
	}
	if f.o.Retention > 0 {
		n, err := f.l.Purge(ctx, time.Now().Add(-f.o.Retention), false)
		if err != nil {
			f.log.Warn("purge failed", "err", err)
			errs = append(errs, fmt.Errorf("purge: %w", err))
		} else if n > 0 {
			f.log.Info("purged processed records", "records", n, "older_than", f.o.Retention)
		}
	}
	if len(errs) > 0 {
		sum.Errors = errors.Join(errs...).Error()
	}
}
