package intake_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Once Options.Deadline has passed, nothing is claimed or started: work an
// attempt gave back at the deadline (released uncounted: it was claimed late)
// is not claimed again, started with its context already ended, and released
// again, in a loop until the pipeline stops (seen in a full run: four
// releases of one key in one Lambda invocation).
func TestNothingClaimedPastTheDeadline(t *testing.T) {
	t.Parallel()
	l, err := objledger.Open(context.Background(), objstore.New(mem.OpenBackend(""), nil), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var runs, released atomic.Int32
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		runs.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	})
	start := time.Now()
	p, err := intake.New(l, h, &intake.Options{ShortLived: true, Deadline: start.Add(400 * time.Millisecond),
		OnOutcome: func(w intake.Work, outcome string, err error) {
			if outcome == intake.OutcomeReleased {
				released.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 1500*time.Millisecond) // runs on well past the deadline
	defer stop()
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	time.Sleep(time.Until(start.Add(300 * time.Millisecond))) // claimed in the second half: released uncounted at the deadline
	ev := event.Event{Bucket: "b", Key: "k", Sequencer: "01", ETag: "e", Kind: event.Created, Name: "ObjectCreated:Put"}
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	_ = p.Quiesce(ctx)
	<-done
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler started %d times; want once (nothing may start past the deadline)", n)
	}
	if n := released.Load(); n != 1 {
		t.Errorf("the work was released %d times; want once", n)
	}
}
