package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// TestMain runs the child side of ledgertest's process cases first (see
// ledgertest.MaybeChild), then the tests.
func TestMain(m *testing.M) {
	ledgertest.MaybeChild()
	testmain.Run(m)
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, harness(sqlledger.LogLimits{}))
}

// TestConformanceTinyLog runs the suite with the intake log folded every few
// rows and bytes, so that every case crosses folds forced by its bounds.
func TestConformanceTinyLog(t *testing.T) {
	ledgertest.Run(t, harness(sqlledger.LogLimits{Rows: 6, Bytes: 2000}))
}

func harness(limits sqlledger.LogLimits) ledgertest.Harness {
	return ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		l, err := sqlite.OpenWithLogLimits(context.Background(), path, opts, limits)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, "sqlite://" + path
	}}
}

// Text that is not valid UTF-8 cannot travel through the intake log's JSON:
// such a batch is written to the table directly, byte for byte, and the
// rows the log holds at that moment are folded first (the direct write's
// guard compares revisions with the table's).
func TestInvalidUTF8BypassesTheLog(t *testing.T) {
	ctx := context.Background()
	l, path := openTempPath(t, nil)
	ev := func(key, seq, etag string) event.Event {
		return event.Event{Bucket: "b", Key: key, Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: etag}
	}
	record := func(l *ledger.Ledger, want ledger.Outcome, evs ...event.Event) {
		t.Helper()
		ds, err := l.Record(ctx, "s", evs)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if d.Outcome != want {
				t.Fatalf("%s/%s: %s, want %s", evs[i].Key, evs[i].Sequencer, d.Outcome, want)
			}
		}
	}
	record(l, ledger.Accepted, ev("logged", "01", "e1"))
	if _, err := l.Get(ctx, "b", "logged"); err != nil { // folds: the table has revision 1
		t.Fatal(err)
	}
	record(l, ledger.Coalesced, ev("logged", "02", "e2"))                             // revision 2, in the log
	record(l, ledger.Accepted, ev("odd", "01", "bad\xff\xfe"))                        // direct
	record(l, ledger.Coalesced, ev("logged", "03", "e3"), ev("odd", "02", "\xc3bad")) // direct: revision 3 over 2
	other, err := ledger.Open(ctx, "sqlite://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, h := range []*ledger.Ledger{l, other} {
		for key, want := range map[string]string{"logged": "e3", "odd": "\xc3bad"} {
			rs, err := h.Get(ctx, "b", key)
			if err != nil || len(rs) != 1 || rs[0].ETag != want || rs[0].Seq != map[string]string{"logged": "03", "odd": "02"}[key] {
				t.Fatalf("%s: %+v %v, want ETag %q", key, rs, err, want)
			}
		}
	}
	record(other, ledger.Duplicate, ev("logged", "03", "e3"), ev("odd", "02", "\xc3bad"))
}

// A key whose ident is not valid UTF-8 (an EveryVersion ident carries the
// version id, which events do not restrict) is found by a handle that did not
// record it: claimed, completed, and decided a duplicate when it comes again.
func TestInvalidUTF8Ident(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	opts := &ledger.Options{EveryVersion: true}
	l, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ev := event.Event{Bucket: "b", Key: "k", VersionID: "v\xff", Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put"}
	if _, err := l.Record(ctx, "s", []event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	other, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cs, err := other.Claim(ctx, 10, time.Minute)
	if err != nil || len(cs) != 1 || cs[0].VersionID != ev.VersionID {
		t.Fatalf("claim: %+v %v", cs, err)
	}
	if err := other.Complete(ctx, cs[0], "done"); err != nil {
		t.Fatal(err)
	}
	if ds, err := l.Record(ctx, "s", []event.Event{ev}); err != nil || ds[0].Outcome != ledger.Duplicate {
		t.Fatalf("the same event again: %+v %v, want duplicate", ds, err)
	}
}

// A closed handle keeps none of its writer's cache: a process may hold a
// closed *Ledger (a deferred Close, say) while it opens the file again, and
// the cache of a busy handle is up to ~100 MB. The audit bench's peak heap
// went from 14 to 157 MiB that way. Not parallel: it measures the live heap.
func TestClosedHandleReleasesItsCache(t *testing.T) {
	ctx := context.Background()
	live := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]event.Event, 20000)
	for i := range evs {
		evs[i] = event.Event{Bucket: "b", Key: fmt.Sprintf("some/longish/key/%08d", i), ETag: "e", Sequencer: "01", Kind: event.Created}
	}
	if _, err := l.Record(ctx, "t", evs); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, len(evs), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	keep := []*ledger.Ledger{l}
	held := live()
	keep[0] = nil
	gone := live()
	if held > gone+4<<20 {
		t.Fatalf("a closed handle of 20,000 records holds %.1f MiB", float64(held-gone)/(1<<20))
	}
}

// TestClaimDoesNotFoldTheBacklog: a Claim's cost does not grow with the work
// waiting in the intake log. Claim used to look at every dirty entry of work
// on every call, and so folded whenever more than 4,096 were waiting: under a
// backlog each small Claim wrote thousands of rows into the table (and
// claimed them back from it, as rows a dirty entry hides), and cairn serve's
// throughput fell as its senders grew. The entries are kept in order now, and
// a Claim takes the earliest due of them: expired leases and pending work
// alike, oldest first, with nothing written to the table.
func TestClaimDoesNotFoldTheBacklog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	l, err := sqlite.Open(ctx, path, &ledger.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const batches, per = 10, 1000
	for b := range batches {
		evs := make([]event.Event, per)
		for i := range evs {
			evs[i] = event.Event{Bucket: "b", Key: fmt.Sprintf("k%02d-%04d", b, i), ETag: "e", Size: 1, Sequencer: "01",
				Kind: event.Created, Name: "ObjectCreated:Put"}
		}
		if _, err := l.Record(ctx, "s", evs); err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
	}
	claim := func(n int, lease time.Duration) []ledger.Claim {
		t.Helper()
		cs, err := l.Claim(ctx, n, lease)
		if err != nil || len(cs) != n {
			t.Fatalf("claimed %d of %d: %v", len(cs), n, err)
		}
		return cs
	}
	// Five leases that run out, then the backlog in order: the expired
	// leases first (their work is the oldest), then the oldest pending.
	expiring := claim(5, time.Second)
	advance(time.Minute)
	var got []string
	for range 20 {
		cs := claim(10, time.Hour)
		for _, c := range cs {
			got = append(got, c.Key)
		}
		if _, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range expiring {
		if got[i] != c.Key {
			t.Fatalf("claim %d is %s, want the expired lease of %s first; got %v", i, got[i], c.Key, got[:10])
		}
	}
	for i, k := range got[5:] {
		if want := fmt.Sprintf("k00-%04d", i+5); k != want {
			t.Fatalf("claim %d is %s, want %s (oldest first)", i+5, k, want)
		}
	}
	// Nothing was folded: the table is as empty as before the first Claim.
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM cairn_ledger`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("20 claims of 10 folded %d rows of a %d-event backlog into the table", rows, batches*per)
	}
}
