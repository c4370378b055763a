package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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
	l := openTemp(t, nil)
	bogus := ledger.Claim{Record: ledger.Record{Bucket: "b", Key: "nothing", Token: 7}, Ident: "nothing"}
	const writers, batches = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches*2)
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				ev := put(fmt.Sprintf("w%d/k%d", w, i))
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
	l := openTemp(t, nil)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 100 {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(i%5)*50*time.Microsecond)
				ev := put(fmt.Sprintf("w%d/k%d", w, i))
				_, _ = l.Record(cctx, "test", []event.Event{ev}) // may time out
				cancel()
			}
		})
	}
	wg.Wait()
	done := make(chan error, 1)
	go func() {
		_, err := l.Record(ctx, "test", []event.Event{put("after")})
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

// EveryVersion claims in SQL (one version of a key at a time), behind the
// writer's cache: a Record grouped after such a Claim must not decide from
// the rows the Claim changed. Events without version ids (ident = key) are
// recorded newer and newer while others claim and complete; at the end every
// key's record holds its newest event, handled.
func TestGroupCommitEveryVersionClaimThenRecord(t *testing.T) {
	ctx := context.Background()
	l := openTemp(t, &ledger.Options{EveryVersion: true})
	const keys, rounds = 8, 150
	stop := make(chan struct{})
	var wg, workers sync.WaitGroup
	errs := make(chan error, 100)
	for range 3 {
		workers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cs, err := l.Claim(ctx, 4, time.Minute)
				if err == nil && len(cs) > 0 {
					var cerrs []error
					cerrs, err = l.CompleteBatch(ctx, cs, make([]string, len(cs)))
					err = errors.Join(append(cerrs, err)...)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for k := range keys {
		wg.Go(func() {
			for i := 1; i <= rounds; i++ {
				ev := event.Event{Bucket: "b", Key: fmt.Sprintf("k%d", k), Sequencer: fmt.Sprintf("%04d", i), Kind: event.Created, Name: "ObjectCreated:Put"}
				if _, err := l.Record(ctx, "test", []event.Event{ev}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	workers.Wait()
	for {
		cs, err := l.Claim(ctx, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			break
		}
		if _, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil {
			t.Fatal(err)
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%04d", rounds)
	for k := range keys {
		rs, err := l.Get(ctx, "b", fmt.Sprintf("k%d", k))
		if err != nil || len(rs) != 1 || rs[0].Seq != want || rs[0].Status != ledger.Processed {
			t.Fatalf("k%d: %+v %v, want sequencer %s, processed", k, rs, err, want)
		}
	}
}

// A transaction logs the newest image of each row it changed, once: a
// RecordAndClaim that claims its own events, and a completion lingering into
// a Record's transaction, each write one log row with one image per row.
func TestTransactionLogsEachRowOnce(t *testing.T) {
	ctx := context.Background()
	l, path := openTempPath(t, nil)
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// logged returns the log rows written since the last call: for each, its
	// images' (ident, status).
	var last int64
	logged := func() [][]string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT id, images FROM cairn_intake_log WHERE id > ? ORDER BY id`, last)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out [][]string
		for rows.Next() {
			var images string
			if err := rows.Scan(&last, &images); err != nil {
				t.Fatal(err)
			}
			var imgs [][]any
			if err := json.Unmarshal([]byte(images), &imgs); err != nil {
				t.Fatal(err)
			}
			var row []string
			for _, img := range imgs {
				row = append(row, fmt.Sprint(img[2], " ", img[11])) // ident, status
			}
			out = append(out, row)
		}
		return out
	}
	_, cs, err := l.RecordAndClaim(ctx, "test", []event.Event{put("k1"), put("k2")}, 2, time.Hour)
	if err != nil || len(cs) != 2 {
		t.Fatalf("claimed %d (%v), want 2", len(cs), err)
	}
	if got, want := logged(), [][]string{{"k1 claimed", "k2 claimed"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("RecordAndClaim logged %q, want %q", got, want)
	}
	done := make(chan error, 1)
	go func() {
		errs, err := l.CompleteBatch(ledger.WithLinger(ctx, 5*time.Second), cs[:1], []string{""})
		done <- errors.Join(append(errs, err)...)
	}()
	waitQueued(t, l, 1) // the completion, lingering
	if _, err := l.Record(ctx, "test", []event.Event{put("k3")}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := logged(), [][]string{{"k1 processed", "k3 pending"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("a completion and a Record in one transaction logged %q, want %q", got, want)
	}
}

// put is a first event (sequencer 01) of an object created in bucket b.
func put(key string) event.Event {
	return event.Event{Bucket: "b", Key: key, Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put"}
}

// waitQueued waits until n calls wait in l's group-commit queue.
func waitQueued(t *testing.T, l *ledger.Ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for sqlite.Queued(l) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued after 30s, want %d", sqlite.Queued(l), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// openTemp opens a ledger in a file of the test's own, closed when it ends.
func openTemp(t *testing.T, opts *ledger.Options) *ledger.Ledger {
	t.Helper()
	l, _ := openTempPath(t, opts)
	return l
}

// openTempPath is openTemp that also returns the file's path.
func openTempPath(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// A call marked ledger.WithLinger does not take the idle writer: it waits to
// commit with the next urgent call, and commits alone only when its linger
// runs out. One whose context ends meanwhile leaves, having applied nothing.
func TestGroupCommitLinger(t *testing.T) {
	ctx := context.Background()
	l := openTemp(t, nil)
	evs := []event.Event{put("k1"), put("k2"), put("k3")}
	if _, err := l.Record(ctx, "test", evs); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 3, time.Hour)
	if err != nil || len(cs) != 3 {
		t.Fatalf("claimed %d (%v), want 3", len(cs), err)
	}
	complete := func(ctx context.Context, c ledger.Claim) <-chan error {
		done := make(chan error, 1)
		go func() {
			errs, err := l.CompleteBatch(ctx, []ledger.Claim{c}, []string{""})
			done <- errors.Join(append(errs, err)...)
		}()
		return done
	}

	// Lingering for an hour: still waiting after 200ms, until a Record comes.
	done := complete(ledger.WithLinger(ctx, time.Hour), cs[0])
	select {
	case err := <-done:
		t.Fatalf("a lingering completion took the idle writer (%v): it must wait for an urgent call", err)
	case <-time.After(200 * time.Millisecond):
	}
	waitQueued(t, l, 1)
	if _, err := l.Record(ctx, "test", []event.Event{put("other")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lingering completion did not commit with the Record that followed it")
	}

	// Lingering briefly, with nothing urgent coming: it commits alone.
	if err := <-complete(ledger.WithLinger(ctx, 20*time.Millisecond), cs[1]); err != nil {
		t.Fatal(err)
	}

	// Cancelled while lingering: it leaves, and k3 stays claimed.
	cctx, cancel := context.WithCancel(ledger.WithLinger(ctx, time.Hour))
	done = complete(cctx, cs[2])
	waitQueued(t, l, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled lingering completion returned %v, want context.Canceled", err)
	}
	for key, want := range map[string]ledger.Status{"k1": ledger.Processed, "k2": ledger.Processed, "k3": ledger.Claimed} {
		rs, err := l.Get(ctx, "b", key)
		if err != nil || len(rs) != 1 || rs[0].Status != want {
			t.Fatalf("%s: %+v (%v), want %s", key, rs, err, want)
		}
	}
}

// A call whose deadline comes before its linger would run out is urgent: with
// the writer idle it commits at once, instead of lingering past its deadline
// and failing with nothing applied.
func TestGroupCommitLingerBeforeDeadline(t *testing.T) {
	ctx := context.Background()
	l := openTemp(t, nil)
	if _, err := l.Record(ctx, "test", []event.Event{put("k")}); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 1, time.Hour)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claimed %d (%v), want 1", len(cs), err)
	}
	bctx, cancel := context.WithTimeout(ledger.WithLinger(ctx, time.Hour), 5*time.Second)
	defer cancel()
	errs, err := l.CompleteBatch(bctx, cs, []string{""})
	if err := errors.Join(append(errs, err)...); err != nil {
		t.Fatalf("a completion lingering past its deadline: %v", err)
	}
}
