package ledger

import (
	"context"
	"time"

	"github.com/cairn-s3/cairn/event"
)

// Backend is what a ledger backend implements (package ledger/sqlite,
// ledger/postgres, ledger/objledger, or a third party's, with the helpers of
// package ledger/driver) and the conformance suite ledger/ledgertest checks.
// Users hold a *Ledger, never a Backend: the Ledger checks arguments and
// shapes results once for every backend, so a backend may count on these:
//
//   - Claim gets n ≥ 1 and lease > 0; RecordAndClaim gets either n ≥ 1 and
//     lease > 0, or n = 0 and lease = 0 (record only: what Ledger.Record is).
//   - Renew gets lease > 0; Renew, Complete, CompleteBatch, Release and Fail
//     get claims with a Bucket and an Ident.
//   - CompleteBatch gets at least one claim and exactly one result per claim.
//   - Results and causes are at most MaxText bytes of valid UTF-8.
//   - List gets Filter.Limit ≥ 1; Replay gets at least one status, each
//     processed, failed or dead.
//
// Methods are documented on Ledger; a Backend must be safe for concurrent use.
// A Complete or CompleteBatch by the token that completed a record already
// (processed, not claimed since) succeeds and changes nothing (ledgertest's
// CompleteAgain): callers retry a Complete whose answer was lost.
//
// A backend also has a method EveryVersion() bool, outside the interface so
// that a backend written before it still compiles: it reports whether the
// backend was opened with Options.EveryVersion (Ledger.EveryVersion asks it;
// ledgertest's EveryVersion checks it).
type Backend interface {
	// RecordAndClaim stores evs durably, decides each (same order as evs), and
	// claims, in the same transaction, up to n records as Claim would right
	// after the record: the earliest due first, so work due before this batch
	// comes before the batch's own (it may claim fewer, e.g. a backend with
	// shards looks only at those the batch touched; none with
	// Options.EveryVersion).
	RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]Decision, []Claim, error)
	Claim(ctx context.Context, n int, lease time.Duration) ([]Claim, error)
	Renew(ctx context.Context, c Claim, lease time.Duration) (Claim, error)
	Complete(ctx context.Context, c Claim, result string) error
	CompleteBatch(ctx context.Context, cs []Claim, results []string) (errs []error, err error)
	Release(ctx context.Context, c Claim) error
	Fail(ctx context.Context, c Claim, cause string, retryable bool) error
	Lookup(ctx context.Context, bucket string, keys []string) (map[string]Record, error)
	Get(ctx context.Context, bucket, key string) ([]Record, error)
	List(ctx context.Context, f Filter) ([]Claim, error)
	Counts(ctx context.Context) (Counts, error)
	Replay(ctx context.Context, s Selection) (int, error)
	Purge(ctx context.Context, olderThan time.Time, includeDead bool) (int, error)
	OldestPending(ctx context.Context) (time.Time, error)
	Ping(ctx context.Context) error
	Close() error
}
