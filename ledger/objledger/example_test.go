package objledger_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A ledger kept in an object store (here in memory; in production
// ledger.Open(ctx, "s3://bucket/ledger", nil)): a duplicate delivery and a
// late, older event are decided without running anything twice.
func Example() {
	ctx := context.Background()
	l, err := objledger.Open(ctx, mem.Open(), nil, nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	put := func(seq, etag string) event.Event {
		return event.Event{Bucket: "lake", Key: "orders/2026-11-23.parquet", Kind: event.Created, Name: "ObjectCreated:Put", Sequencer: seq, ETag: etag}
	}
	ds, _ := l.Record(ctx, "webhook", []event.Event{put("0A", "e2"), put("0A", "e2"), put("05", "e1")})
	for _, d := range ds {
		fmt.Println(d.Seq, d.Outcome)
	}
	cs, _ := l.Claim(ctx, 10, time.Minute)
	// cs[0].Token is the claim's fencing token: commit the work's effects
	// conditionally on it (package fence).
	fmt.Println("claimed", len(cs), cs[0].Key, "attempt", cs[0].Attempts)
	fmt.Println(l.Complete(ctx, cs[0], "loaded"))
	// Output:
	// 0A new
	// 0A duplicate
	// 05 stale
	// claimed 1 orders/2026-11-23.parquet attempt 1
	// <nil>
}
