package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/postgres"
)

// A ledger shared by many workers on many machines, in PostgreSQL: its
// tables are made (or upgraded) on first use. Each worker records what it
// receives and claims work; two workers never get the same claim, and the
// fencing token lets a handler's effects refuse a holder that lost its lease.
// (Not run: it needs a server; the package's tests run the conformance suite
// on a PostgreSQL they start.)
func Example() {
	ctx := context.Background()
	l, err := postgres.Open(ctx, "postgres://cairn@127.0.0.1:5432/cairn?sslmode=disable", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	ds, err := l.Record(ctx, "sqs", []event.Event{{Bucket: "photos", Key: "2026/cat.jpg", Sequencer: "0055AED6DCD90281E5", Kind: event.Created}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ds[0].Outcome)
	cs, err := l.Claim(ctx, 10, time.Minute)
	if err != nil || len(cs) == 0 {
		fmt.Println(cs, err)
		return
	}
	err = l.Complete(ctx, cs[0], "thumbnail written")
	if errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrSuperseded) {
		fmt.Println("another worker holds the key now; its result counts")
	}
}
