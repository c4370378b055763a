package ledger

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/event"
)

// MaxText is how many bytes of a handler's result (Complete, CompleteBatch)
// or failure cause (Fail) a ledger keeps: longer ones are cut, at a UTF-8
// character boundary, to at most this many bytes (and bytes that are not
// UTF-8 are stored as U+FFFD).
const MaxText = 4096

// Ledger is the user-facing handle on a ledger, over a Backend. Open one with
// Open (by URL), a backend package's Open, or New. It is safe for
// concurrent use.
type Ledger struct {
	b Backend
}

// New returns a Ledger over b; its Close closes b.
func New(b Backend) *Ledger { return &Ledger{b: b} }

// Backend returns the backend the ledger runs on, for backend-specific calls
// (e.g. an object-store ledger's Compact).
func (l *Ledger) Backend() Backend { return l.b }

// EveryVersion reports whether the ledger keys work by version id
// (Options.EveryVersion, as its backend was opened with), so that code over
// the ledger (the intake's pipeline) need not be told twice. The backend
// says so (see Backend); one that does not is taken to key work per key.
func (l *Ledger) EveryVersion() bool {
	v, ok := l.b.(interface{ EveryVersion() bool })
	return ok && v.EveryVersion()
}

// Local reports whether the ledger lives on this machine alone (an embedded
// SQLite file), so that processes on other machines (other Lambda sandboxes)
// cannot share it. The backend says so with a method Local() bool; one that
// does not is taken to be shared.
func (l *Ledger) Local() bool {
	v, ok := l.b.(interface{ Local() bool })
	return ok && v.Local()
}

// clip makes s valid UTF-8 (a database text column may refuse anything
// else; JSON would replace the bad bytes anyway) and cuts it to at most
// MaxText bytes at a character boundary.
func clip(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > MaxText {
		i := MaxText
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i]
	}
	return s
}

// checkLease refuses a lease that would expire the moment it is granted.
func checkLease(op string, lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("ledger: %s: lease %v must be positive", op, lease)
	}
	return nil
}

// checkClaim refuses a claim without its identity (not one Claim returned):
// no record can be found for it.
func checkClaim(op string, c Claim) error {
	if c.Bucket == "" || c.Ident == "" {
		return fmt.Errorf("%s %s/%s: a claim without its bucket and identity (use a Claim that Claim or RecordAndClaim returned): %w",
			op, c.Bucket, c.Key, ErrNotFound)
	}
	return nil
}

// Record stores events durably and decides each (same order as evs).
func (l *Ledger) Record(ctx context.Context, source string, evs []event.Event) ([]Decision, error) {
	ds, _, err := l.b.RecordAndClaim(ctx, source, evs, 0, 0)
	return ds, err
}

// RecordAndClaim is Record that also claims, in the same transaction, up to n
// records as Claim(n) would right after the record (the fast path of a daemon
// with free workers: no separate claim transaction, and new work starts as
// soon as it is durable). The earliest due work is claimed first, so work
// that was waiting before this batch (older pending work, retries, expired
// leases) comes before the batch's own: claiming while recording never jumps
// the queue. It may claim fewer (the object-store ledger looks only at the
// shards the batch touched; none with Options.EveryVersion); n ≤ 0 claims
// nothing, as Record.
func (l *Ledger) RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]Decision, []Claim, error) {
	if n <= 0 {
		n, lease = 0, 0
	} else if err := checkLease("RecordAndClaim", lease); err != nil {
		return nil, nil, err
	}
	return l.b.RecordAndClaim(ctx, source, evs, n, lease)
}

// Claim leases up to n records of work for lease (none if n ≤ 0): pending and
// failed records whose time has come and claimed records whose lease ran out,
// the earliest due (NextAttempt) first. When more than n leases ran out at
// once, the candidates among them are those whose lease ran out first.
//
// Each claim carries a fencing token above every earlier one of its record:
// the record's first claim takes the claim's clock in Unix milliseconds, and
// each later claim one more than the last. So a key whose record was purged
// and made again by a newer event starts above the purged record's tokens
// (see MinPurgeAge), and a fence that kept the key's highest token accepts
// the new holder and still refuses the old ones.
func (l *Ledger) Claim(ctx context.Context, n int, lease time.Duration) ([]Claim, error) {
	if n <= 0 {
		return nil, nil
	}
	if err := checkLease("Claim", lease); err != nil {
		return nil, err
	}
	return l.b.Claim(ctx, n, lease)
}

// Renew extends the claim's lease to lease from now.
func (l *Ledger) Renew(ctx context.Context, c Claim, lease time.Duration) (Claim, error) {
	if err := checkLease("Renew", lease); err != nil {
		return c, err
	}
	if err := checkClaim("renew", c); err != nil {
		return c, err
	}
	return l.b.Renew(ctx, c, lease)
}

// Complete records the claim's work as processed, keeping result (cut to
// MaxText bytes), or, if newer work arrived while it ran, makes the record
// pending again. A Complete by the token that has completed the record
// already (processed, not claimed since) succeeds and changes nothing: it is
// the retry of a Complete whose answer was lost or late, so a caller may
// retry a Complete that failed without knowing whether it landed.
func (l *Ledger) Complete(ctx context.Context, c Claim, result string) error {
	if err := checkClaim("complete", c); err != nil {
		return err
	}
	return l.b.Complete(ctx, c, clip(result))
}

// CompleteBatch completes several claims in one transaction: errs[i] is
// Complete's answer for cs[i]; err is set only if nothing was applied.
func (l *Ledger) CompleteBatch(ctx context.Context, cs []Claim, results []string) (errs []error, err error) {
	if len(results) != len(cs) {
		return nil, fmt.Errorf("ledger: CompleteBatch: %d claims, %d results", len(cs), len(results))
	}
	if len(cs) == 0 {
		return []error{}, nil
	}
	errs = make([]error, len(cs))
	var ok []int // indexes of the claims the backend is given
	for i, c := range cs {
		if errs[i] = checkClaim("complete", c); errs[i] == nil {
			ok = append(ok, i)
		}
	}
	if len(ok) == 0 {
		return errs, nil
	}
	bcs, brs := make([]Claim, len(ok)), make([]string, len(ok))
	for j, i := range ok {
		bcs[j], brs[j] = cs[i], clip(results[i])
	}
	berrs, err := l.b.CompleteBatch(ctx, bcs, brs)
	if err != nil {
		return nil, err
	}
	for j, i := range ok {
		errs[i] = berrs[j]
	}
	return errs, nil
}

// Release gives the work back unfinished (e.g. at shutdown): the record is
// claimable again at once and the attempt is not counted.
func (l *Ledger) Release(ctx context.Context, c Claim) error {
	if err := checkClaim("release", c); err != nil {
		return err
	}
	return l.b.Release(ctx, c)
}

// Fail records a failed attempt and its cause (cut to MaxText bytes): the
// work is retried after a backoff if retryable and attempts remain, else the
// record is dead. If newer work arrived meanwhile, that work is pending
// instead.
func (l *Ledger) Fail(ctx context.Context, c Claim, cause string, retryable bool) error {
	if err := checkClaim("fail", c); err != nil {
		return err
	}
	return l.b.Fail(ctx, c, clip(cause), retryable)
}

// Lookup returns the newest record of each of keys in bucket, in one query
// (keys with no record are absent from the map).
func (l *Ledger) Lookup(ctx context.Context, bucket string, keys []string) (map[string]Record, error) {
	return l.b.Lookup(ctx, bucket, keys)
}

// Get returns the records of one key (ErrNotFound if it has none).
func (l *Ledger) Get(ctx context.Context, bucket, key string) ([]Record, error) {
	return l.b.Get(ctx, bucket, key)
}

// List pages through records in (bucket, ident) order (Filter.After* is
// the cursor).
func (l *Ledger) List(ctx context.Context, f Filter) ([]Claim, error) {
	if f.Limit <= 0 {
		f.Limit = defaultListLimit
	}
	if _, ok := l.b.(ErrorGrouper); f.ErrorClass == "" || ok {
		return l.b.List(ctx, f)
	}
	var out []Claim
	err := l.scan(ctx, f, func(c Claim) bool {
		out = append(out, c)
		return len(out) < f.Limit
	})
	return out, err
}

// defaultListLimit is Filter.Limit's default.
const defaultListLimit = 100

// Counts counts the records by status.
func (l *Ledger) Counts(ctx context.Context) (Counts, error) { return l.b.Counts(ctx) }

// Replay makes the selected records claimable again as an explicit replay:
// pending, attempts reset, the replay counted (never a duplicate). Only
// processed, failed and dead records can be replayed; the record's accepted
// (newest) event is what runs again, never an older one. It returns how many
// records were (or, with DryRun, would be) replayed.
func (l *Ledger) Replay(ctx context.Context, s Selection) (int, error) {
	if len(s.Statuses) == 0 {
		s.Statuses = []Status{Dead}
	}
	for _, st := range s.Statuses {
		switch st {
		case Processed, Failed, Dead:
		default:
			return 0, fmt.Errorf("ledger: replay: %q records cannot be replayed (processed, failed or dead only)", st)
		}
	}
	if _, ok := l.b.(ErrorGrouper); s.ErrorClass != "" && !ok {
		return 0, fmt.Errorf("ledger: replay: this ledger cannot select records by error class (see GroupsErrorsInQuery): list them with Filter.ErrorClass and replay them key by key")
	}
	return l.b.Replay(ctx, s)
}

// MinPurgeAge is the youngest records Purge deletes: olderThan must be at
// least this long before now. A key whose record was purged starts its
// fencing tokens again from the claiming machine's clock (see Claim), above
// every token of the purged record only if that record was last updated
// longer ago than the machines' clocks disagree.
const MinPurgeAge = time.Hour

// Purge deletes processed records last updated before olderThan, and failed
// and dead ones too if includeDead; never pending or claimed work. olderThan
// must be at least MinPurgeAge before now (this machine's clock), else
// nothing is deleted and Purge returns an error saying so.
func (l *Ledger) Purge(ctx context.Context, olderThan time.Time, includeDead bool) (int, error) {
	if age := time.Since(olderThan); age < MinPurgeAge {
		return 0, fmt.Errorf("ledger: purge: refused to purge records updated up to %s (%s before now, under ledger.MinPurgeAge, %s), nothing deleted: "+
			"a purged key's next fencing tokens start from the claiming machine's clock, which is above the purged record's tokens "+
			"only for records older than the machines' clocks can disagree; purge records older than %s or more (e.g. --older-than 30d)",
			olderThan.UTC().Format(time.RFC3339), age.Round(time.Second), MinPurgeAge, MinPurgeAge)
	}
	return l.b.Purge(ctx, olderThan, includeDead)
}

// OldestPending is since when the oldest pending work has waited (zero time
// if none).
func (l *Ledger) OldestPending(ctx context.Context) (time.Time, error) { return l.b.OldestPending(ctx) }

// Ping checks that the ledger is reachable (readiness).
func (l *Ledger) Ping(ctx context.Context) error { return l.b.Ping(ctx) }

// Close closes the backend.
func (l *Ledger) Close() error { return l.b.Close() }

// Flusher is implemented by backends that keep writes in the background
// (the object-store ledger lowers its work index shortly after a Record).
type Flusher interface {
	Flush(ctx context.Context) error
}

// Flush writes what the backend keeps in the background and returns once it
// is written (nothing to do on most backends). A short-lived process (a
// Lambda invocation) calls it before it stops: its recorded work is then
// visible to every other process at once.
func (l *Ledger) Flush(ctx context.Context) error {
	if f, ok := l.b.(Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}
