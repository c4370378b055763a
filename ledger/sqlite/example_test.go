package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// The embedded default ledger, one SQLite file: a duplicate delivery and a
// late, older event are decided without running anything twice; the work is
// claimed with a fencing token and completed. ledger.Open("cairn-data/ledger.db")
// opens the same by path.
func Example() {
	dir, err := os.MkdirTemp("", "cairn-sqlite-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	l, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	put := func(seq, etag string) event.Event {
		return event.Event{Bucket: "lake", Key: "orders/2026-11-23.parquet", Kind: event.Created, Name: "ObjectCreated:Put", Sequencer: seq, ETag: etag}
	}
	ds, err := l.Record(ctx, "webhook", []event.Event{put("0A", "e2"), put("0A", "e2"), put("05", "e1")})
	if err != nil {
		panic(err)
	}
	for _, d := range ds {
		fmt.Println(d.Seq, d.Outcome)
	}
	cs, err := l.Claim(ctx, 10, time.Minute)
	if err != nil {
		panic(err)
	}
	// cs[0].Token is the claim's fencing token: commit the work's effects
	// conditionally on it (package fence).
	fmt.Println("claimed", len(cs), cs[0].Key, "attempt", cs[0].Attempts)
	fmt.Println("complete:", l.Complete(ctx, cs[0], "loaded"))
	n, _ := l.Counts(ctx)
	fmt.Println("processed:", n[ledger.Processed])
	// Output:
	// 0A new
	// 0A duplicate
	// 05 stale
	// claimed 1 orders/2026-11-23.parquet attempt 1
	// complete: <nil>
	// processed: 1
}
