package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// The measuring ledger decides by the ledger's rules: a duplicate is one,
// work beyond n waits for Claim, a stale claim is refused, and newer work
// that arrived while a claim ran is pending again after it completes.
func TestMemLedgerRules(t *testing.T) {
	ctx := context.Background()
	m := newMemLedger()
	ev := func(key, seq string) event.Event {
		return event.Event{Bucket: "b", Key: key, Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: "e" + seq}
	}
	ds, cs, err := m.RecordAndClaim(ctx, "test", []event.Event{ev("a", "01"), ev("b", "01"), ev("a", "01")}, 1, time.Minute)
	if err != nil || len(cs) != 1 || ds[0].Outcome != ledger.Accepted || ds[2].Outcome != ledger.Duplicate {
		t.Fatalf("decisions %v, claims %d, %v", ds, len(cs), err)
	}
	more, err := m.Claim(ctx, 5, time.Minute)
	if err != nil || len(more) != 1 || more[0].Key != "b" {
		t.Fatalf("Claim: %v, %v", more, err)
	}
	if _, _, err := m.RecordAndClaim(ctx, "test", []event.Event{ev("a", "02")}, 0, 0); err != nil {
		t.Fatal(err)
	}
	stale := cs[0]
	stale.Token++
	errs, err := m.CompleteBatch(ctx, []ledger.Claim{stale, cs[0], more[0]}, []string{"x", "ok", "ok"})
	if err != nil || !errors.Is(errs[0], ledger.ErrLeaseLost) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("CompleteBatch: %v, %v", errs, err)
	}
	counts, _ := m.Counts(ctx)
	if counts[ledger.Pending] != 1 || counts[ledger.Processed] != 1 {
		t.Fatalf("counts %v: want a pending again (newer work), b processed", counts)
	}
	again, err := m.Claim(ctx, 5, time.Minute)
	if err != nil || len(again) != 1 || again[0].Key != "a" || again[0].Seq != "02" {
		t.Fatalf("Claim after: %v, %v", again, err)
	}
}
