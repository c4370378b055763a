package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// testCompleteAgain: a Complete (or CompleteBatch) by the token that has
// completed the record already succeeds and changes nothing: it is the retry
// of a Complete whose answer was lost or came after its caller's deadline,
// and the work was done. Once a newer token claimed the record, the old
// token's Complete is refused.
func testCompleteAgain(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	must(l.Record(ctx, "s", []event.Event{ev("k", "01")}))(t)
	cs := must(l.Claim(ctx, 1, time.Minute))(t)
	if len(cs) != 1 {
		t.Fatalf("claimed %d, want 1", len(cs))
	}
	c := cs[0]
	if err := l.Complete(ctx, c, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, c, "again"); err != nil {
		t.Fatalf("Complete again by the token that completed the record: %v, want success", err)
	}
	if errs := must(l.CompleteBatch(ctx, []ledger.Claim{c}, []string{"again"}))(t); errs[0] != nil {
		t.Fatalf("CompleteBatch again by the token that completed the record: %v, want success", errs[0])
	}
	if r := must(l.Get(ctx, "b", "k"))(t)[0]; r.Status != ledger.Processed || r.Result != "ok" || r.Token != c.Token {
		t.Fatalf("record %+v, want processed by token %d with its first result", r, c.Token)
	}
	must(l.Record(ctx, "s", []event.Event{ev("k", "02")}))(t)
	next := must(l.Claim(ctx, 1, time.Minute))(t)
	if len(next) != 1 || next[0].Token <= c.Token {
		t.Fatalf("newer work claimed as %+v", next)
	}
	if err := l.Complete(ctx, c, "late"); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("Complete by a token a newer claim superseded: %v, want ErrSuperseded", err)
	}
}
