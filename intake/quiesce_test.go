package intake_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Quiesce returns once due work the dispatcher claimed for it has run: the
// Claim round it asked for found work, which ran and settled between two of
// its looks, and nothing is left. (Found in review: it waited for its
// deadline 45 times in 50.)
func TestQuiesceAfterFastWork(t *testing.T) {
	hung := 0
	for i := range 50 {
		l, err := objledger.Open(context.Background(), objstore.New(mem.OpenBackend(""), nil), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev := event.Event{Bucket: "b", Key: fmt.Sprint("k", i), Sequencer: "01", ETag: "e", Kind: event.Created, Name: "ObjectCreated:Put"}
		if _, err := l.Record(context.Background(), "test", []event.Event{ev}); err != nil {
			t.Fatal(err)
		}
		h := intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil })
		p, err := intake.New(l, h, &intake.Options{ShortLived: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // far beyond a claim round: only a hang reaches it
		err = p.Quiesce(qctx)
		cancel()
		stop()
		<-done
		rs, _ := l.Get(context.Background(), "b", ev.Key)
		l.Close()
		if err != nil && len(rs) == 1 && rs[0].Status == ledger.Processed {
			hung++
			break
		}
	}
	if hung > 0 {
		t.Errorf("Quiesce waited for its deadline with the work done and nothing left")
	}
}
