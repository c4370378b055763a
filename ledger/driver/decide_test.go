package driver_test

import (
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// A key written again while its work waits keeps its place in the queue (its
// pending-since time), so a key written faster than workers drain the queue
// cannot be pushed back for ever; work that failed and waits for a retry is
// due at once when newer work arrives.
func TestDecideQueuePlace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(seq string) event.Event {
		return event.Event{Bucket: "b", Key: "k", Sequencer: seq, Kind: event.Created, ETag: "e" + seq}
	}
	o, r := driver.Decide(nil, ev("01"), "t", t0, false)
	if o != ledger.Accepted || !r.NextAttempt.Equal(t0) {
		t.Fatalf("first event: %v, next %v", o, r.NextAttempt)
	}
	o, r2 := driver.Decide(r, ev("02"), "t", t0.Add(time.Minute), false)
	if o != ledger.Coalesced || !r2.NextAttempt.Equal(t0) || r2.Seq != "02" || r2.Gen != 2 {
		t.Fatalf("coalesced: %v, next %v, seq %s, gen %d; want the first event's place", o, r2.NextAttempt, r2.Seq, r2.Gen)
	}
	failed := *r2
	failed.Status, failed.NextAttempt, failed.Attempts = ledger.Failed, t0.Add(time.Hour), 2
	o, r3 := driver.Decide(&failed, ev("03"), "t", t0.Add(2*time.Minute), false)
	if o != ledger.Coalesced || r3.Status != ledger.Pending || !r3.NextAttempt.Equal(t0.Add(2*time.Minute)) || r3.Attempts != 0 {
		t.Fatalf("newer work on failed: %v, %s, next %v, attempts %d", o, r3.Status, r3.NextAttempt, r3.Attempts)
	}
}
