package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/postgres"
)

// TestClaimOldestFirst: Claim hands out pending work oldest first even when
// the table's physical order differs. Rewriting a row (here a duplicate event
// bumps its seen count) moves its live version behind the others in the heap;
// a claim that scans the heap, as a bitmap scan over the work index does,
// would hand out the newer keys first.
func TestClaimOldestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tick := func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() }
	l, err := postgres.Open(ctx, testenv.PostgresSchema(t, testenv.PGExec), &ledger.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys, old = 40, 20
	ev := func(i int) event.Event {
		return event.Event{Bucket: "b", Key: fmt.Sprintf("k%03d", i), ETag: "e", Size: 1, Sequencer: "0001",
			Kind: event.Created, Name: "ObjectCreated:Put"}
	}
	for i := range keys {
		if _, err := l.Record(ctx, "test", []event.Event{ev(i)}); err != nil {
			t.Fatal(err)
		}
		tick()
	}
	// The oldest keys again: duplicates, which rewrite their rows (keeping
	// their place in the queue).
	for i := range old {
		ds, err := l.Record(ctx, "test", []event.Event{ev(i)})
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Outcome != ledger.Duplicate {
			t.Fatalf("event %d again: %s, want duplicate", i, ds[0].Outcome)
		}
	}
	cs, err := l.Claim(ctx, old, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != old {
		t.Fatalf("claimed %d, want %d", len(cs), old)
	}
	for i, c := range cs {
		if want := ev(i).Key; c.Key != want {
			t.Fatalf("claim %d is %s, want %s (oldest first); got %v", i, c.Key, want, keysOf(cs))
		}
	}
}

func keysOf(cs []ledger.Claim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Key
	}
	return out
}

// TestClaimDoesNotReadLiveClaims: looking for expired leases must not read
// every live claim. Off the work index (status, next_at), Claim's
// expired-lease arm (and RecordAndClaim's probe) returned every claimed
// row's entry and fetched its heap tuple to test lease_until, on every call:
// O(live claims) per claim, which made eight concurrent claimers slower than
// two. The count of entries the work and lease indexes return during one
// call comes from PostgreSQL's own statistics, flushed on the ledger's one
// connection.
func TestClaimDoesNotReadLiveClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := postgres.Open(ctx, testenv.PostgresSchema(t, testenv.PGExec), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	db := l.Backend().(interface{ DB() *sql.DB }).DB()
	db.SetMaxOpenConns(1) // the statistics read below are the ledger's connection's own
	evs := func(prefix string, n int) []event.Event {
		out := make([]event.Event, n)
		for i := range out {
			out[i] = event.Event{Bucket: "b", Key: fmt.Sprintf("%s%05d", prefix, i), ETag: "e", Size: 1, Sequencer: "0001",
				Kind: event.Created, Name: "ObjectCreated:Put"}
		}
		return out
	}
	// On an empty ledger RecordAndClaim writes the rows claimed at once: no
	// dead pending versions, which every scan of the work index would read
	// until a vacuum could remove them (not while any test's transaction in
	// the shared database is older).
	const live = 2000
	if _, cs, err := l.RecordAndClaim(ctx, "test", evs("live", live), live, time.Hour); err != nil || len(cs) != live {
		t.Fatalf("claimed %d of %d: %v", len(cs), live, err)
	}
	read := func() int64 {
		t.Helper()
		if _, err := db.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		err := db.QueryRowContext(ctx, `SELECT COALESCE(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
WHERE schemaname = current_schema() AND indexrelname IN ('cairn_ledger_work', 'cairn_ledger_lease')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := l.Record(ctx, "test", evs("new", 10)); err != nil {
		t.Fatal(err)
	}
	before := read()
	cs, err := l.Claim(ctx, 5, time.Minute)
	if err != nil || len(cs) != 5 {
		t.Fatalf("claimed %d of 5: %v", len(cs), err)
	}
	// A Claim of 5 with 10 pending reads about 5 pending entries.
	if n := read() - before; n > live/10 {
		t.Errorf("one Claim(5) read %d index entries with %d live claims: it reads the live claims", n, live)
	}
	before = read()
	// Work is due (5 pending): RecordAndClaim probes, records, then claims.
	if _, cs, err := l.RecordAndClaim(ctx, "test", evs("more", 1), 5, time.Minute); err != nil || len(cs) != 5 {
		t.Fatalf("RecordAndClaim claimed %d of 5: %v", len(cs), err)
	}
	if n := read() - before; n > live/10 {
		t.Errorf("one RecordAndClaim read %d index entries with %d live claims: it reads the live claims", n, live)
	}
}
