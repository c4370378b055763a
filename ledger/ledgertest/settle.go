package ledgertest

// Settling claims: CompleteBatch, Release, Fail, retries and dead letters.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

func testBatchRelease(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	must(l.Record(ctx, "s", []event.Event{ev("a", "01"), ev("b", "01"), ev("c", "01"), ev("d", "01")}))(t)
	cs := must(l.Claim(ctx, 10, 10*time.Second))(t)
	if len(cs) != 4 {
		t.Fatalf("claimed %d, want 4", len(cs))
	}
	byKey := map[string]ledger.Claim{}
	for _, c := range cs {
		byKey[c.Key] = c
	}
	// b gets newer work while claimed; c is released; d's lease expires and is
	// taken over, so its old claim is superseded in the batch.
	must(l.Record(ctx, "s", []event.Event{ev("b", "02")}))(t)
	if err := l.Release(ctx, byKey["c"]); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, byKey["c"]); !errors.Is(err, ledger.ErrLeaseLost) && !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("second release: %v, want a refusal", err)
	}
	clk.Add(11 * time.Second)
	again := must(l.Claim(ctx, 10, 10*time.Second))(t)
	keys := map[string]ledger.Claim{}
	for _, c := range again {
		keys[c.Key] = c
	}
	if c, ok := keys["c"]; !ok || c.Attempts != 1 {
		t.Fatalf("released work: claimable again with the attempt not counted; got %+v", again)
	}
	if _, ok := keys["d"]; !ok {
		t.Fatalf("expired claim of d not taken over: %+v", again)
	}
	// a and b expired too; complete a and b's fresh claims and d's stale one.
	batch := []ledger.Claim{keys["a"], keys["b"], byKey["d"]}
	errs, err := l.CompleteBatch(ctx, batch, []string{"ra", "rb", "rd"})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ledger.ErrSuperseded) {
		t.Fatalf("batch errors: %v, want nil, nil, ErrSuperseded", errs)
	}
	ra := must(l.Get(ctx, "b", "a"))(t)[0]
	rb := must(l.Get(ctx, "b", "b"))(t)[0]
	if ra.Status != ledger.Processed || ra.Result != "ra" {
		t.Fatalf("a after batch: %+v", ra)
	}
	if rb.Status != ledger.Processed || rb.Seq != "02" {
		t.Fatalf("b (its newer work was claimed after it arrived) after batch: %+v", rb)
	}
	if errs, err := l.CompleteBatch(ctx, nil, nil); err != nil || len(errs) != 0 {
		t.Fatalf("empty batch: %v %v", errs, err)
	}
}

func testRetryDead(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now, MaxAttempts: 3, RetryBase: time.Second, RetryMax: time.Minute})
	must(l.Record(ctx, "s", []event.Event{ev("k", "01"), ev("perm", "01")}))(t)
	for attempt := 1; attempt <= 3; attempt++ {
		cs := must(l.Claim(ctx, 10, time.Minute))(t)
		var c *ledger.Claim
		for i := range cs {
			if cs[i].Key == "k" {
				c = &cs[i]
			} else if err := l.Fail(ctx, cs[i], "bad input", false); err != nil {
				t.Fatal(err)
			}
		}
		if c == nil || c.Attempts != attempt {
			t.Fatalf("attempt %d: claims %+v", attempt, cs)
		}
		if err := l.Fail(ctx, *c, fmt.Sprintf("boom %d", attempt), true); err != nil {
			t.Fatal(err)
		}
		if attempt < 3 {
			if cs := must(l.Claim(ctx, 10, time.Minute))(t); len(cs) != 0 {
				t.Fatalf("retried before its backoff: %+v", cs)
			}
			clk.Add(2 * time.Minute)
		}
	}
	r := must(l.Get(ctx, "b", "k"))(t)[0]
	if r.Status != ledger.Dead || r.LastError != "boom 3" || r.Attempts != 3 {
		t.Fatalf("after max attempts: %+v", r)
	}
	if r := must(l.Get(ctx, "b", "perm"))(t)[0]; r.Status != ledger.Dead {
		t.Fatalf("a non-retryable failure: %s, want dead", r.Status)
	}
	clk.Add(time.Hour)
	if cs := must(l.Claim(ctx, 10, time.Minute))(t); len(cs) != 0 {
		t.Fatalf("dead letters were claimed: %+v", cs)
	}
	// A newer event revives a dead key.
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("k", "02")}))(t)); got[0] != ledger.Accepted {
		t.Fatalf("newer event for a dead key: %v", got)
	}
	if cs := must(l.Claim(ctx, 10, time.Minute))(t); len(cs) != 1 || cs[0].Attempts != 1 {
		t.Fatalf("claim after revival: %+v", cs)
	}
}

// CompleteBatch applies Complete's rules to every claim, whichever call
// claimed it (RecordAndClaim or Claim): processed; pending again when newer
// work arrived while it ran; refused once its lease ran out, even if no one
// has claimed the work since.
func testCompleteBatchRules(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	_, first, err := l.RecordAndClaim(ctx, "s", []event.Event{ev("x", "01"), ev("y", "01")}, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	must(l.Record(ctx, "s", []event.Event{ev("z", "01")}))(t)
	short := must(l.Claim(ctx, 1, time.Second))(t)
	if len(first) != 2 || len(short) != 1 || short[0].Key != "z" {
		t.Fatalf("claims: %+v and %+v", first, short)
	}
	must(l.Record(ctx, "s", []event.Event{ev("y", "02")}))(t) // newer work while y runs
	clk.Add(2 * time.Second)                                  // z's lease has run out
	errs := must(l.CompleteBatch(ctx, []ledger.Claim{first[0], first[1], short[0]}, []string{"r-" + first[0].Key, "r-" + first[1].Key, "rz"}))(t)
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ledger.ErrLeaseLost) {
		t.Fatalf("batch errors: %v, want nil, nil, ErrLeaseLost", errs)
	}
	x := must(l.Get(ctx, "b", "x"))(t)[0]
	y := must(l.Get(ctx, "b", "y"))(t)[0]
	if x.Status != ledger.Processed || x.Result != "r-x" {
		t.Fatalf("x: %+v", x)
	}
	if y.Status != ledger.Pending || y.Seq != "02" || y.Attempts != 0 || y.Result != "r-y" {
		t.Fatalf("y (newer work arrived while it ran): %+v, want pending 02 with 0 attempts", y)
	}
	again := map[string]ledger.Claim{}
	for _, c := range must(l.Claim(ctx, 10, 10*time.Second))(t) {
		again[c.Key] = c
	}
	if len(again) != 2 || again["y"].Seq != "02" || again["z"].Token != short[0].Token+1 {
		t.Fatalf("claimable after the batch: %+v, want y (02) and z (token %d)", again, short[0].Token+1)
	}
}
