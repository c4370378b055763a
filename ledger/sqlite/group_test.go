package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// Concurrent calls share the writer's transactions (group commit). A call
// that fails inside a shared transaction (here a Renew the ledger refuses)
// must not fail the others: each is run again alone, and every Record lands.
func TestGroupCommitIsolatesAFailingCall(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bogus := ledger.Claim{Record: ledger.Record{Bucket: "b", Key: "nothing", Token: 7}, Ident: "nothing"}
	const writers, batches = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches*2)
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				ev := event.Event{Bucket: "b", Key: fmt.Sprintf("w%d/k%d", w, i), Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put"}
				if _, err := l.Record(ctx, "test", []event.Event{ev}); err != nil {
					errs <- fmt.Errorf("record: %w", err)
				}
			}
		})
		wg.Go(func() {
			for range batches {
				if _, err := l.Renew(ctx, bogus, time.Minute); !errors.Is(err, ledger.ErrNotFound) {
					errs <- fmt.Errorf("renew of a claim with no record: %v, want not found", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c, err := l.Counts(ctx); err != nil || c[ledger.Pending] != writers*batches {
		t.Fatalf("counts %v (%v), want %d pending", c, err, writers*batches)
	}
}

// Calls whose context ends while they wait for the writer leave the queue;
// one of them may have been handed the lead, which must pass on: the ledger
// keeps answering.
func TestGroupCommitSurvivesCancelledWaiters(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 100 {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(i%5)*50*time.Microsecond)
				ev := event.Event{Bucket: "b", Key: fmt.Sprintf("w%d/k%d", w, i), Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put"}
				_, _ = l.Record(cctx, "test", []event.Event{ev}) // may time out
				cancel()
			}
		})
	}
	wg.Wait()
	done := make(chan error, 1)
	go func() {
		_, err := l.Record(ctx, "test", []event.Event{{Bucket: "b", Key: "after", Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put"}})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a Record after cancelled waiters never returned: the writer's lead was lost")
	}
}
