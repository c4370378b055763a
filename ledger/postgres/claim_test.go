package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testenv"
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
