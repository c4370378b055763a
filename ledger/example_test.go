package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/sqlite" // the sqlite:// scheme and plain paths
)

// Open a ledger by URL (here a SQLite file; postgres://… and s3://… work
// alike with their backends linked in), record a delivery twice, and run its
// work once: Claim hands it out with a fencing token, Complete settles it.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ledger-example")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	put := event.Event{Bucket: "lake", Key: "orders/1.json", Kind: event.Created, Name: "ObjectCreated:Put", Sequencer: "0A", ETag: "e1"}
	ds, _ := l.Record(ctx, "webhook", []event.Event{put, put})
	fmt.Println(ds[0].Outcome, ds[1].Outcome)
	cs, _ := l.Claim(ctx, 10, time.Minute)
	// cs[0].Token is the claim's fencing token: commit the work's effects
	// conditionally on it (package fence).
	fmt.Println("claimed", len(cs), cs[0].Key, "attempt", cs[0].Attempts)
	fmt.Println(l.Complete(ctx, cs[0], "loaded"))
	rs, _ := l.Get(ctx, "lake", "orders/1.json")
	fmt.Println(rs[0].Status, rs[0].Result, rs[0].Seen)
	// Output:
	// new duplicate
	// claimed 1 orders/1.json attempt 1
	// <nil>
	// processed loaded 2
}
