// Package ledgertest is the conformance suite every intake ledger backend must
// pass: call Run from the backend's tests, with a Harness whose New returns
// the backend wrapped in a *ledger.Ledger (ledger.New or the backend's
// Open), so the suite checks what users get. Process tests re-execute the
// test binary; its TestMain must call MaybeChild first, which runs the child
// side. The suite depends on the ledger and event packages only, so a backend
// in another module can run all of it.
//
// The cases are grouped by area, one file each: recording and reading
// (record.go), claims, leases and contention (claim.go), settling claims
// (settle.go), replay and purge (replay.go, with the tokens of a key whose
// record was purged), and several processes
// (process.go). A failing case fails through t.Fatal.
package ledgertest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// Harness makes fresh ledgers.
type Harness struct {
	// New returns an empty ledger with opts, and a URL other processes can open
	// it by ("" skips process tests). Register cleanup on t.
	New func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string)
	// Env is added to the environment of child processes (e.g. credentials).
	Env []string
	// Open, if set, opens another handle on the ledger whose URL New returned
	// (what a second process has), registering its cleanup on t. Default:
	// ledger.Open(url), which needs any credentials in this process's
	// environment.
	Open func(t *testing.T, url string) *ledger.Ledger
	// Only, if set, runs just the cases of these names (e.g. "NoDeadlocks"
	// against a second server set up differently). Default: every case.
	Only []string
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Basics", testBasics},
		{"Permutations", testPermutations},
		{"PermutationsWhileClaimed", testPermutationsWhileClaimed},
		{"NewerWhileClaimed", testNewerWhileClaimed},
		{"LeaseExpiryAndFencing", testLease},
		{"RetryThenDead", testRetryDead},
		{"CompleteBatchAndRelease", testBatchRelease},
		{"CompleteBatchRules", testCompleteBatchRules},
		{"CompleteAgain", testCompleteAgain},
		{"RecordAndClaim", testRecordAndClaim},
		{"RecordAndClaimOldestFirst", testRecordAndClaimOldestFirst},
		{"EventRoundTrip", testEventRoundTrip},
		{"OddKeys", testOddKeys},
		{"Lookup", testLookup},
		{"ReplayAndPurge", testReplayPurge},
		{"TokensAfterPurge", testTokensAfterPurge},
		{"EveryVersion", testEveryVersion},
		{"VersionRemovals", testVersionRemovals},
		{"TokensAcrossVersions", testTokensAcrossVersions},
		{"TokensAcrossVersionsClockBehind", testTokensAcrossVersionsClockBehind},
		{"Unordered", testUnordered},
		{"ListAndCounts", testList},
		{"ErrorClasses", testErrorClasses},
		{"DuplicateStormGoroutines", testStorm},
		{"NoLostUpdates", testNoLostUpdates},
		{"NoDeadlocks", testNoDeadlocks},
		{"DuplicateStormProcesses", testStormProcesses},
		{"KilledWorker", testKilledWorker},
		{"KilledRecorder", testKilledRecorder},
		{"KilledClaimer", testKilledClaimer},
		{"TwoHandles", testTwoHandles},
		{"Notes", testNotes},
	}
	for _, tc := range tests {
		if len(h.Only) > 0 && !slices.Contains(h.Only, tc.name) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func ev(key, seq string) event.Event {
	return event.Event{Bucket: "b", Key: key, Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: "etag-" + seq, Size: int64(len(seq)), Format: event.FormatS3}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// must takes a call's two results and returns a function of the test that
// returns v, or fails the test with err (t.Fatal: call it from the test's
// goroutine only): must(l.Counts(ctx))(t). (Go does not pass a call's two
// results after another argument, so must(t, l.Counts(ctx)) cannot be
// written.)
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func outcomes(ds []ledger.Decision) []ledger.Outcome {
	var o []ledger.Outcome
	for _, d := range ds {
		o = append(o, d.Outcome)
	}
	return o
}

// open opens another handle on the ledger at url (Harness.Open, or
// ledger.Open), closed when the test ends.
func (h Harness) open(t *testing.T, url string) *ledger.Ledger {
	t.Helper()
	if h.Open != nil {
		return h.Open(t, url)
	}
	l, err := ledger.Open(ctxT(t), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
