package intake_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// The smallest pipeline: a Go handler, a SQLite ledger, and an event
// submitted in-process (as the webhook or a pull source would submit it).
// Submit returns once the ledger's decision is durable; the handler then runs.
func ExampleHandlerFunc() {
	dir, err := os.MkdirTemp("", "cairn-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	led, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	defer led.Close()

	handled := make(chan string, 1)
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		handled <- fmt.Sprintf("handled %s/%s (attempt %d)", w.Event.Bucket, w.Event.Key, w.Attempt)
		return "ok", nil
	})
	p, err := intake.New(led, h, nil)
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- p.Run(runCtx) }()

	ev := event.Event{Bucket: "invoices", Key: "2024/03/inv-0042.pdf", Sequencer: "0001", ETag: "e1", Kind: event.Created}
	ds, err := p.Submit(ctx, "example", []event.Event{ev})
	fmt.Println("decision:", ds[0].Outcome, err)
	fmt.Println(<-handled)

	// An event without a bucket is refused whole; nothing is recorded.
	_, err = p.Submit(ctx, "example", []event.Event{{Key: "x", Sequencer: "0002", Kind: event.Created}})
	fmt.Println("invalid:", errors.Is(err, intake.ErrInvalidEvent))

	stop()
	<-stopped
	// Output:
	// decision: new <nil>
	// handled invoices/2024/03/inv-0042.pdf (attempt 1)
	// invalid: true
}
