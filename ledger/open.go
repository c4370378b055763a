package ledger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/registry"
)

// Ledger is the interface every backend implements and the conformance suite
// (package ledgertest) checks.
type Ledger interface {
	// Record stores events durably and decides each (same order as evs).
	Record(ctx context.Context, source string, evs []event.Event) ([]Decision, error)
	// RecordAndClaim is Record that also claims, in the same transaction, up
	// to n of the records this batch made pending (the fast path of a daemon
	// with idle workers: no separate claim transaction). It may claim fewer
	// (none with Options.EveryVersion).
	RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]Decision, []Claim, error)
	// Claim leases up to n records of work for lease.
	Claim(ctx context.Context, n int, lease time.Duration) ([]Claim, error)
	Renew(ctx context.Context, c Claim, lease time.Duration) (Claim, error)
	Complete(ctx context.Context, c Claim, result string) error
	// CompleteBatch completes several claims in one transaction: errs[i] is
	// Complete's answer for cs[i]; err is set only if nothing was applied.
	CompleteBatch(ctx context.Context, cs []Claim, results []string) (errs []error, err error)
	// Release gives the work back unfinished (e.g. at shutdown): the record is
	// claimable again at once and the attempt is not counted.
	Release(ctx context.Context, c Claim) error
	Fail(ctx context.Context, c Claim, cause string, retryable bool) error
	// Lookup returns the newest record of each of keys in bucket, in one
	// query (keys with no record are absent from the map).
	Lookup(ctx context.Context, bucket string, keys []string) (map[string]Record, error)
	// Get returns the records of one key.
	Get(ctx context.Context, bucket, key string) ([]Record, error)
	// List pages through records (Filter.After* is the cursor).
	List(ctx context.Context, f Filter) ([]Claim, error)
	Counts(ctx context.Context) (Counts, error)
	// Replay makes the selected records claimable again as an explicit replay:
	// pending, attempts reset, the replay counted (never a duplicate). Only
	// processed, failed and dead records can be replayed; the record's accepted
	// (newest) event is what runs again, never an older one. It returns how
	// many records were (or, with DryRun, would be) replayed.
	Replay(ctx context.Context, s Selection) (int, error)
	// Purge deletes processed records last updated before olderThan, and
	// failed and dead ones too if includeDead; never pending or claimed work.
	Purge(ctx context.Context, olderThan time.Time, includeDead bool) (int, error)
	// OldestPending is since when the oldest pending work has waited (zero
	// time if none).
	OldestPending(ctx context.Context) (time.Time, error)
	// Ping checks that the ledger is reachable (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// ErrInvalidURL: a ledger URL names no known backend.
var ErrInvalidURL = errors.New("invalid ledger URL")

// An Opener opens a ledger from a URL; backends register one per scheme.
type Opener func(ctx context.Context, url string, opts *Options) (Ledger, error)

var openers registry.Registry[Opener]

// Register makes a backend available to Open under scheme.
func Register(scheme string, o Opener) { openers.Register("ledger", scheme, o) }

// DefaultURL is the embedded default: a SQLite file under ./cairn-data.
const DefaultURL = "cairn-data/ledger.db"

// Open opens a ledger: sqlite:///abs/path.db, a plain path (SQLite), or
// postgres://… (postgresql:// too), or an object store: s3://bucket/prefix,
// file:///dir (package objledger). The backend packages must be linked in.
func Open(ctx context.Context, url string, opts *Options) (Ledger, error) {
	scheme, _, ok := strings.Cut(url, "://")
	if !ok {
		if url == "" {
			url = DefaultURL
		}
		abs, err := filepath.Abs(url)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
		}
		scheme, url = "sqlite", "sqlite://"+abs
	}
	if scheme == "postgresql" {
		scheme = "postgres"
	}
	o, found := openers.Get(scheme)
	if !found {
		return nil, fmt.Errorf("%w: unknown scheme %q in %q; known: %s (or a plain path for SQLite)", ErrInvalidURL, scheme, url, strings.Join(openers.Schemes(), ", "))
	}
	return o(ctx, url, opts)
}
