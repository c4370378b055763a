package intake_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// A pipeline with a Go handler: duplicates and stale deliveries never reach
// it, and it commits its effect conditionally on the fencing token.
func Example() {
	dir, _ := os.MkdirTemp("", "cairn-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	led, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	defer led.Close()

	// served is the handler's output table: key → (etag, highest token seen).
	type row struct {
		etag  string
		token int64
	}
	served := map[string]row{}
	handled := make(chan string, 1)
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		if cur, ok := served[w.Event.Key]; ok && cur.token > w.Token {
			return "fenced off", nil // a newer holder already wrote: do nothing
		}
		served[w.Event.Key] = row{w.Event.ETag, w.Token}
		handled <- fmt.Sprintf("%s %s → %s (attempt %d)", w.Event.Kind, w.Event.Key, w.Event.ETag, w.Attempt)
		return "ok", nil
	})
	p, err := intake.New(led, h, &intake.Options{Concurrency: 1})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- p.Run(runCtx) }()

	put := func(seq, etag string) event.Event {
		return event.Event{Bucket: "photos", Key: "cats/tom.jpg", Sequencer: seq, ETag: etag, Kind: event.Created, Name: "ObjectCreated:Put"}
	}
	// The newest write's event, a duplicate of it, and a late older one,
	// delivered together (as a webhook or pull source would submit them).
	ds, err := p.Submit(ctx, "example", []event.Event{put("0002", "bbb"), put("0002", "bbb"), put("0001", "aaa")})
	if err != nil {
		panic(err)
	}
	for _, d := range ds {
		fmt.Println("decision:", d.Outcome)
	}
	fmt.Println(<-handled)
	stop()
	<-stopped
	// Output:
	// decision: new
	// decision: duplicate
	// decision: stale
	// created cats/tom.jpg → bbb (attempt 1)
}
