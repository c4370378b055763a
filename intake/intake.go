// Package intake is cairn's intake daemon as a library: sources submit object-
// change events, the ledger decides which are work, and workers claim that work
// and run the user's Handler, one claim per key at a time, in sequencer order.
//
//	source ──Submit──▶ recorder ──Record (group commit)──▶ ledger
//	                                                         │
//	handler ◀──run── worker ◀──Claim (lease, fencing token)──┘
//	   └──▶ Complete (group commit) / Fail / Release
//
// A Pipeline owns no source: the webhook (Pipeline.Webhook) and the pull
// sources in intake/natssrc, intake/kafkasrc and intake/sqssrc call Submit, and
// acknowledge a delivery to their broker only after Submit returned, that is
// after the ledger's decision is durable. Retries, lease expiry and dead
// letters are the ledger's job, never the source's: a message is acknowledged
// once recorded, whatever the handler later does with the work.
//
// # Guarantees
//
//   - Submit returns only after the events are committed to the ledger.
//   - At most one handler runs for a key at a time (per key and version with
//     ledger.Options.EveryVersion), and a key's work runs in sequencer order;
//     duplicates and stale events never reach the handler.
//   - A running handler's lease is renewed every third of the lease, each
//     request with a deadline shorter than that. A claim is valid for its
//     holder until its last successful renewal request was sent (the claim's,
//     at first) plus the lease, less a margin (a twentieth of the lease, at
//     least MinLeaseMargin; a lease is at least MinLease), on the holder's
//     monotonic clock: then the handler's context is cancelled (an exec handler's process
//     group is killed), whether or not a renewal answered, the run counts as a
//     lease loss and its result is discarded. The context's Deadline is that
//     moment (LeaseDeadline). A refused renewal stops it at once.
//   - A handler's effects are exactly-once only if it commits them
//     conditionally on Work.Token (the fencing token) or is idempotent: an
//     HTTP endpoint that runs past the deadline it was sent, or a Go handler
//     that ignores its context, may still be running when the next holder
//     starts.
//   - At shutdown, running handlers get Options.Grace to finish; the work of
//     those that do not is released back to the ledger without counting the
//     attempt. A process killed outright leaves claims whose leases expire; the
//     work is then claimed again with a higher token.
//
// # Exec handlers and the daemon's death
//
// An exec handler does not outlive the daemon that started it, nor its own
// claim's lease, so neither a restarted daemon nor another instance ever runs
// a key beside its previous holder's handler: its command runs in a process
// group of its own that is killed when the command exits (what it left
// behind), when the daemon dies however it dies, and, with
// ExecHandler.Watchdog (cairn serve sets it), at the lease's deadline even
// while the daemon is stopped; on Linux, with ExecHandler.StateDir, Reap kills
// the runs of a daemon killed with kill -9 before the first claim. How: see
// exec.go.
//
// Limits: a process that leaves the handler's process group (setsid,
// setpgid) and clears CAIRN_HANDLER_RUN from its environment escapes all of
// this (run such handlers under systemd or in a cgroup, which kill whole
// trees); a process stuck in the kernel (D state) cannot be killed until it
// returns, and Reap fails rather than claim beside it. If the daemon and its
// watchdog and the group's leader are all killed and the daemon does not come
// back, orphans run to their end, and another machine may claim their work
// once the lease expires. On systems other than Linux there is no watchdog and
// no Reap: a stopped daemon's handlers run on until it resumes. What freezes
// the whole machine or cairn's cgroup (a paused VM, a cgroup freezer) stops
// the watchdog too; once thawed it kills every run whose deadline passed.
//
// An HTTP handler (HTTPHandler) cannot be killed: cancellation closes the
// connection, and the endpoint may go on with the request; it is sent the
// lease's deadline (Cairn-Lease-Deadline) so that it can stop itself. A lost lease, a
// timeout, a shutdown past its grace period or a daemon killed outright can
// therefore leave the previous holder's request running while the next
// claim's request (with a higher token) starts. The fencing token
// (Cairn-Fencing-Token, Work.Token; CAIRN_FENCING_TOKEN for exec handlers) is
// the defence: commit effects conditionally on it and refuse a lower token
// than the highest seen for the key.
//
// # Refused messages
//
// A message cairn cannot accept (not JSON, no shape it knows, an event type it
// does not know, a record breaking the limits, a body over the size limit) is
// never answered with a status a queueing sender retries: MinIO with a
// queue_dir, SNS and EventBridge API destinations retry any non-2xx answer,
// and MinIO's queue holds every later event of the bucket behind the one it
// retries. It is answered 2xx and kept as a dead letter in the ledger:
//
//   - bucket RefusedBucket ("cairn:refused", a name no S3 bucket can have: S3
//     and every S3 server refuse ':'), key the hex SHA-256 of the message (of
//     its first bytes when it is over the size limit), and a fixed sequencer,
//     so a redelivery of the same message is a duplicate of its record, never
//     a second one;
//   - event name "cairn:Refused:" and the class (Malformed, UnknownFormat,
//     UnknownEventType, TooLarge), source the source that delivered it;
//   - the reason (every refused record's field and error) where an event keeps
//     its request id, and the message itself, if it is valid UTF-8 without NUL
//     of at most MaxKeptMessage bytes, where an event keeps its host id;
//   - status dead, with the reason and the message's first bytes as its last
//     error: it is listed by `cairn ledger ls --status dead`, on the status
//     page and in its API, and counted in cairn_intake_rejected_total.
//
// The record is made by the ledger's ordinary Record (no backend method of its
// own): it is recorded as new work, and the pipeline's first claim of it fails
// it at once as permanent with the reason, without running the handler. The
// handler never runs for it at all. Replaying it (`cairn replay --bucket
// cairn:refused [--key K]`, or the status page's Replay) parses the kept
// message again: the events it yields now (after an upgrade of cairn that
// accepts them) are recorded from the source that delivered it, with their
// own sequencers, and run the handler as any other event; the record is then
// processed, its result saying how many events were recorded. A message that
// still cannot be accepted, or was not kept (too large, not UTF-8), goes back
// to dead with the reason. (Where a message's records are refused in part,
// the others are recorded at once; a replay records them again as
// duplicates.)
//
// Why not one record per refused object, under its bucket and key: a refused
// record may not name an object at all (not JSON, no bucket), and re-parsing
// the message keeps the sequencer S3 gave the change, so the replayed event
// is ordered against the key's other events like the original; an audit's
// unsequenced resubmission could only ask for the key's current state. And
// why no ledger method of its own: every backend (three, and more to come)
// would need one, while the ledger's Record, Fail and Replay already make a
// durable, listable, replayable dead letter. The costs: the record is pending
// for the moment between its recording and its first claim (usually the same
// transaction: RecordAndClaim); its reason and message show as request_id and
// host_id in `cairn ledger ls --json`; and a worker that claims from the
// ledger without this package's Pipeline (an older cairn sharing the ledger)
// would hand it to its handler, whose bucket name, cairn:refused, says what
// it is.
//
// # cairn's own objects
//
// cairn keeps objects of its own in the buckets it works on (cairn.OwnPrefixes
// at the bucket's root: the probe's, locks', journals' and an object-store
// ledger's). Submit, where every source passes, answers their events Ignored
// without recording them (Options.ProcessOwnObjects turns this off), counts
// them in cairn_intake_own_objects_skipped_total and says once per prefix in
// the log what it skipped and why. cairn serve's audit leaves them out alike
// (audit.Options.Skip).
//
// # Handler results
//
// nil: processed. An error wrapped with Permanent: the record is dead at once
// (a dead letter, replayable). Any other error: retried with backoff until the
// ledger's MaxAttempts, then dead.
//
// # Errors
//
// Check these with errors.Is:
//
//   - ErrInvalidEvent: Submit refused a submission with an event that breaks
//     the limits every event is held to (event.Event.Validate); nothing of it
//     was recorded. It also wraps the *event.ParseError naming the field
//     (errors.As). A source should not retry it: submit RefusedEvent for the
//     message instead, which keeps it as a visible dead letter.
//   - ErrClosed: the pipeline is not running — Submit or Ready after Run
//     returned, or a submission still pending when Run shut down (it was
//     not recorded; deliver it again to the next pipeline).
//   - ErrUnknownSource: OpenSource was given a URL whose scheme no linked
//     source package registered.
//   - context.Canceled, context.DeadlineExceeded: Submit's own context ended;
//     the batch may still have been recorded, so a retry may be a duplicate
//     (the ledger recognises it).
//
// Handler errors are the handler's own: IsPermanent reports whether one was
// marked with Permanent.
package intake

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// Work is one claim handed to a Handler.
type Work struct {
	// Event is the newest accepted event for the key (the object may have
	// changed again since: handlers that read the object read its newest bytes).
	Event event.Event
	// Token is the fencing token: commit effects conditionally on it (keep the
	// highest token seen per key; refuse writes with a lower one).
	Token int64
	// Attempt is 1 on the first attempt.
	Attempt int
	// Source delivered the accepted event (e.g. "webhook").
	Source string

	replays int // the record's explicit replays (refusalGuard)
}

// Payload is Work as JSON: what the exec handler reads on stdin and the HTTP
// handler receives as its body.
type Payload struct {
	event.Event
	Token   int64  `json:"fencing_token"`
	Attempt int    `json:"attempt"`
	Source  string `json:"source,omitempty"`
}

// Payload returns w as its JSON shape.
func (w Work) Payload() Payload {
	return Payload{Event: w.Event, Token: w.Token, Attempt: w.Attempt, Source: w.Source}
}

// A Handler processes one claim. It returns a short result (stored in the
// ledger, cut to ledger.MaxText bytes) or an error; see the package doc for
// how errors are treated. ctx is cancelled when the lease is lost, at the
// handler timeout, and when a shutdown's grace period ends.
type Handler interface {
	Handle(ctx context.Context, w Work) (result string, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, w Work) (string, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, w Work) (string, error) { return f(ctx, w) }

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: the record becomes a dead letter
// at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// A Sink takes events from a source and returns once the ledger's decisions
// are durable. *Pipeline is a Sink.
type Sink interface {
	// Submit records evs from source and returns the ledger's decisions once
	// they are durable (Pipeline.Submit).
	Submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error)
	// Refused counts n messages source refused without submitting them
	// (they break the event package's limits or parse as no event, and are
	// left to the broker's own dead-letter redrive): a *Pipeline counts them
	// in cairn_intake_rejected_total (reason invalid_record). A message
	// submitted as RefusedEvent, which keeps it as a visible, replayable
	// dead letter, is counted by Submit: do not count it here too.
	Refused(source string, n int)
}

// A Source delivers events to a Sink until ctx is done, acknowledging each
// delivery to its broker only after Submit returned without error.
type Source interface {
	// Name labels the source in metrics and in the ledger (e.g. "nats").
	Name() string
	Run(ctx context.Context, sink Sink) error
}

// ErrClosed: the pipeline is not running.
var ErrClosed = errors.New("intake: pipeline closed")

// ErrInvalidEvent: Submit refused events that break the limits every event is
// held to (event.Event.Validate: bucket name, key, sequencer); nothing of the
// submission was recorded. It wraps the *event.ParseError naming the field.
var ErrInvalidEvent = errors.New("invalid event")

// workFromClaim builds the handler's view of a claim.
func workFromClaim(c ledger.Claim) Work {
	return Work{Event: c.Event(), Token: c.Token, Attempt: c.Attempts, Source: c.Source, replays: c.Replays}
}

// panicError turns a handler panic into a retryable error.
func panicError(v any) error { return fmt.Errorf("intake: handler panicked: %v", v) }
