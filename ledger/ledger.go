// Package ledger is the intake ledger: the system of record between object-change
// notifications and business state. Notifications are at-least-once, sometimes
// lost, unordered across keys, and a key can be overwritten faster than its
// events arrive; the ledger decides what work is valid.
//
// Record stores events durably and decides each one: Accepted (work to do),
// Duplicate (this key and sequencer are known, or a newer sequencer announces
// the very state already accepted: same ETag, kind and version), Stale (older
// than what was accepted for the key), or Ignored (test events, NoOP
// removals, and, unless work is kept per version, the removal of one version
// of a versioned key: event.Event.VersionOnly, which never means the key is
// gone; an audit resubmits the key if its current state changed). Events without a sequencer (an audit's resubmissions) never
// override a sequenced decision: they only ask for the key to be processed
// again when the state they saw differs from the accepted one (or its work
// failed), and the handler sees them without a sequencer. Work is one
// row per key (the default "latest state" policy: a newer event coalesces older
// pending work, since the object only holds its newest bytes) or per key and
// version (Options.EveryVersion). Claim hands out work with a lease and a
// fencing token; at most one active claim per key; a key's work runs in
// sequencer order. Complete and Fail succeed only for the current holder.
// Failures retry with backoff up to MaxAttempts, then the record is dead.
// An expired lease makes the work claimable again, with a higher token.
//
// # What exactly-once means here
//
// The ledger makes DECISIONS exactly-once: each accepted (key, sequencer) is
// claimed by one holder at a time, and only the current holder can complete it.
// A handler's EFFECTS are exactly-once only if the handler commits them
// conditionally on the fencing token (e.g. UPDATE … WHERE token < $token, or a
// compare-and-swap document whose value carries the highest token seen) or is
// idempotent: a holder that stalls past its lease can still be running when the
// next holder starts, and only the token tells the downstream store which one
// is current.
//
// # Guarantees
//
//   - A Record that returned nil is durable (committed; SQLite in WAL mode with
//     synchronous=FULL, PostgreSQL at commit).
//   - For one key, no event older than an accepted one is ever handed out after
//     it; duplicates of a key+sequencer never produce a second claim once
//     recorded.
//   - Claims carry a token that grows by one per claim of the row (by at
//     least one with Options.EveryVersion, below); Complete,
//     Fail and Renew with an older token fail with ErrSuperseded, and after the
//     lease expired with ErrLeaseLost. A Complete repeated by the token that
//     completed the record succeeds and changes nothing (a retry).
//   - A key's tokens never go backwards, also when its record is purged and
//     made again: a row's first claim takes the claiming clock in Unix
//     milliseconds (the database server's on PostgreSQL), later ones count up
//     by one. This rests on the clocks of the machines that claim agreeing
//     within the purge age, which Purge holds at MinPurgeAge (1h) or more,
//     and on a row being claimed less than once per millisecond on average.
//     Rows claimed before this rule keep counting from their small tokens.
//     With Options.EveryVersion, where each version of a key is a row of its
//     own, a claim also takes at least one more than the highest token of the
//     key's rows (read where the claim checks that no other version of the key
//     runs; on DynamoDB just before it takes the key's lock, which refuses a
//     token not above the last it was taken with), so a key's next
//     version starts above its earlier versions' tokens whatever the claiming
//     clocks; only versions purged since rest on the clocks.
//   - Lease expiry on PostgreSQL is judged by the database server's clock, so
//     workers on many machines never compare their own clocks.
//
// # Backends
//
// A *Ledger is the same type on every backend: Open picks the backend by URL
// (sqlite:///path or a plain path, postgres://…, s3://… or file://… with
// package ledger/objledger), each backend package has an Open of its own,
// and New wraps any Backend. The Ledger checks arguments and shapes
// results once, for every backend: a result or failure cause is kept up to
// MaxText bytes (cut at a UTF-8 boundary); a lease must be positive; a claim
// must be one Claim returned. Writing a backend: see package ledger/driver
// and the conformance suite ledger/ledgertest.
//
// # Errors
//
// ErrLeaseLost, ErrSuperseded, ErrNotFound (also a claim without its
// identity), and ErrUnavailable (the database cannot be reached: retry) work
// with errors.Is; Open adds ErrInvalidURL and ErrNoLedger. ErrLeaseLost and
// ErrSuperseded are also cairn.ErrLost (the claim is no longer this
// worker's), and ErrNotFound is also cairn.ErrNotFound, as in every layer.
package ledger

import (
	"errors"
	"time"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/event"
)

// Sentinel errors.
var (
	ErrLeaseLost   = cairn.Sentinel(cairn.ErrLost, "ledger: the claim's lease expired; another worker may now hold this work")
	ErrSuperseded  = cairn.Sentinel(cairn.ErrLost, "ledger: the claim was superseded by a newer claim (higher fencing token)")
	ErrNotFound    = cairn.Sentinel(cairn.ErrNotFound, "ledger: no such record")
	ErrUnavailable = errors.New("ledger: database unavailable")
)

// Status of a record's work.
type Status string

// The statuses.
const (
	Pending   Status = "pending"   // work to do
	Claimed   Status = "claimed"   // a worker holds a lease on it
	Processed Status = "processed" // the newest accepted event was handled
	Failed    Status = "failed"    // the last attempt failed; retried after NextAttempt
	Dead      Status = "dead"      // attempts exhausted: a dead letter
)

// Outcome of recording one event.
type Outcome string

// The outcomes.
const (
	Accepted  Outcome = "new"       // accepted: work to do (stored and printed as "new")
	Coalesced Outcome = "coalesced" // accepted; replaced older pending work for the key
	Duplicate Outcome = "duplicate" // this key and sequencer were already recorded
	Stale     Outcome = "stale"     // older than the accepted event for the key
	Ignored   Outcome = "ignored"   // test events, NoOP removals and other non-work
)

// Decision is what Record decided about one event.
type Decision struct {
	Outcome Outcome `json:"outcome"`
	Bucket  string  `json:"bucket"`
	Key     string  `json:"key"`
	Seq     string  `json:"sequencer,omitempty"`
}

// Record is the ledger's row for one key (or key and version).
//
// Seq is the newest accepted sequencer: what later events of the key are
// ordered against. Work accepted from an event without one (an audit
// resubmission) keeps the previous Seq for that ordering only; the record
// says what was accepted (ETag, Size, Kind, EventTime: the object's
// Last-Modified as the audit saw it) and why (Source "audit", Name
// "cairn:Audit:<reason>"), and Event hands the handler no sequencer for it.
type Record struct {
	Bucket      string     `json:"bucket"`
	Key         string     `json:"key"`
	VersionID   string     `json:"version_id,omitempty"`
	ETag        string     `json:"etag,omitempty"`
	Size        int64      `json:"size"`
	Kind        event.Kind `json:"kind"`
	Name        string     `json:"event_name,omitempty"`
	EventTime   time.Time  `json:"event_time,omitzero"`
	Seq         string     `json:"sequencer,omitempty"` // the key's ordering sequencer, as sent (see Event)
	Status      Status     `json:"status"`
	Attempts    int        `json:"attempts"`
	Token       int64      `json:"token"`
	LeaseUntil  time.Time  `json:"lease_until,omitzero"`
	NextAttempt time.Time  `json:"next_attempt,omitzero"` // pending: since when; failed: retry time
	FirstSeen   time.Time  `json:"first_seen"`
	Updated     time.Time  `json:"updated"`
	Seen        int        `json:"seen"`  // deliveries, duplicates included
	Stale       int        `json:"stale"` // stale deliveries
	LastError   string     `json:"last_error,omitempty"`
	Result      string     `json:"result,omitempty"`
	Source      string     `json:"source,omitempty"`
	// Format, Region, RequestID and HostID are the accepted event's (see
	// event.Event), handed back by Event. Records written before cairn kept
	// them have them empty.
	Format    event.Format `json:"format,omitempty"`
	Region    string       `json:"region,omitempty"`
	RequestID string       `json:"request_id,omitempty"`
	HostID    string       `json:"host_id,omitempty"`

	// Gen counts acceptances of new work for the row; RunGen is the Gen the
	// last claim ran. When they differ at completion, newer work arrived while
	// the claim ran, and the row goes back to pending.
	Gen    int64 `json:"gen"`
	RunGen int64 `json:"run_gen"`
	// Replays counts explicit replays (never confused with duplicates).
	Replays int `json:"replays,omitempty"`
}

// Event returns the normalised event the record's accepted work is about.
// For an audit resubmission (event.IsAudit(r.Name)) it has no sequencer and
// format "audit": the ordering sequencer the record keeps belongs to an
// earlier event, and a handler that deduplicates by (key, sequencer) would
// drop the change.
func (r Record) Event() event.Event {
	ev := event.Event{Bucket: r.Bucket, Key: r.Key, VersionID: r.VersionID, ETag: r.ETag, Size: r.Size,
		Sequencer: r.Seq, Kind: r.Kind, Name: r.Name, Time: r.EventTime, Format: r.Format, Region: r.Region,
		RequestID: r.RequestID, HostID: r.HostID}
	if event.IsAudit(r.Name) {
		ev.Sequencer, ev.Format = "", event.FormatAudit
	}
	return ev
}

// Claim is a leased piece of work.
type Claim struct {
	Record
	Ident string `json:"-"` // the row's identity within the bucket
}

// Filter selects records for List.
type Filter struct {
	Status Status // "" for all
	Bucket string
	Prefix string // key prefix
	// Through, if set, lists only keys <= Through (byte order, as S3 lists).
	Through string
	// After is the cursor: list records after this (bucket, ident).
	AfterBucket, AfterIdent string
	Limit                   int // default 100
	// ErrorClass, if set, lists only records whose last error is of this
	// class (ErrorClass; NoError for none). A backend that implements
	// ErrorGrouper selects them in its query; on others Ledger.List reads
	// the records the rest of the filter selects until it has Limit of them.
	ErrorClass string
}

// Selection chooses records for Replay.
type Selection struct {
	Statuses []Status // default: dead
	Bucket   string
	Prefix   string // key prefix
	Key      string // one key (with Bucket)
	// UpdatedSince: only records last updated at or after this time.
	UpdatedSince time.Time
	// ErrorClass, if set, selects only records whose last error is of this
	// class (ErrorClass; NoError for none): only on a backend that
	// implements ErrorGrouper (Ledger.GroupsErrorsInQuery); others refuse
	// it (read the class's records with List and Filter.ErrorClass, and
	// replay them key by key).
	ErrorClass string
	// DryRun counts without changing anything.
	DryRun bool
}

// Counts summarise the ledger.
type Counts map[Status]int

// Options configure a ledger. A nil *Options means all defaults.
type Options struct {
	// EveryVersion keys work by version id too, so every version is processed
	// (versioned buckets). Default: false (latest state: newer events coalesce).
	EveryVersion bool
	// MaxAttempts before a record is dead. Default: 5.
	MaxAttempts int
	// RetryBase and RetryMax bound the exponential backoff between attempts.
	// Defaults: 1s and 5m.
	RetryBase, RetryMax time.Duration
	// Now is the clock (tests). Default: time.Now; PostgreSQL uses the database
	// server's clock unless Now is set.
	Now func() time.Time
	// MustExist opens only a ledger that already exists, for commands that
	// read one (or change its records) but must never make one: nothing is
	// created (no SQLite file or directory, no PostgreSQL schema table, no
	// object-store descriptor or directory), and a ledger that is missing is
	// ErrNoLedger. An existing ledger of an older schema is still upgraded.
	MustExist bool
}
