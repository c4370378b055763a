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

// Quiesce does not return while the recorder holds a submission it has taken
// off its queue and not yet begun to record: that event is neither queued
// nor recording, and would otherwise be left unrun by a host that stops
// after Quiesce. (Found in review: the recorder's queue length and its
// recording flag were Quiesce's only view of it.)
func TestQuiesceSeesTheSubmissionInHand(t *testing.T) {
	t.Parallel()
	l, err := objledger.Open(context.Background(), objstore.New(mem.OpenBackend(""), nil), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil })
	p, err := intake.New(l, h, &intake.Options{ShortLived: true})
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once bool
	intake.SetAfterReceive(p, func() {
		if !once {
			once = true
			close(held)
			<-release
		}
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() { stop(); <-done }()
	ev := event.Event{Bucket: "b", Key: "held", Sequencer: "01", ETag: "e", Kind: event.Created, Name: "ObjectCreated:Put"}
	submitted := make(chan error, 1)
	go func() { _, err := p.Submit(context.Background(), "test", []event.Event{ev}); submitted <- err }()
	<-held
	// Far longer than the few Claim rounds Quiesce needs to call an idle
	// pipeline idle.
	qctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err = p.Quiesce(qctx)
	cancel()
	close(release)
	if err == nil {
		t.Fatal("Quiesce returned while the recorder held an unrecorded submission")
	}
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if err := p.Quiesce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rs, _ := l.Get(context.Background(), "b", "held"); len(rs) != 1 || rs[0].Status != ledger.Processed {
		t.Fatalf("after Quiesce: %+v, want the event processed", rs)
	}
}
