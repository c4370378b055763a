package awslambda_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/ledger"
)

// Work that fits an invocation easily (0.6s of 1.5s) but becomes due while
// the invocation's own work runs is claimed by Quiesce late, cut at the stop
// time and counted: a few such invocations make it a dead letter although
// its handler never failed (found in review). An attempt cut in the second
// half of an invocation is released uncounted.
func TestLateClaimsNotCounted(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, &ledger.Options{RetryBase: 300 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		d := 1100 * time.Millisecond
		if w.Event.Key == "victim" {
			d = 600 * time.Millisecond
		}
		select {
		case <-time.After(d):
			return "", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	f := newFunction(t, l, h, &awslambda.Options{StopBefore: 500 * time.Millisecond})
	// After its first attempt, the victim becomes due 300ms into each
	// invocation (a retry's backoff), while the invocation's own work runs.
	if _, err := l.Record(context.Background(), "test", []event.Event{eventtest.Created("b", "victim", "01")}); err != nil {
		t.Fatal(err)
	}
	// Its first attempt: a drain that runs it, cut by a short invocation.
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	_, _ = f.Invoke(ctx, []byte(awslambda.DrainPayload))
	cancel()
	for i := range 8 {
		invoke(t, f, 2*time.Second, []byte(s3Body(fmt.Sprintf("own%d", i), "01")))
		rs, _ := l.Get(context.Background(), "b", "victim")
		t.Logf("after invocation %d: victim %s attempts %d: %s", i, rs[0].Status, rs[0].Attempts, rs[0].LastError)
		if rs[0].Status == ledger.Dead && strings.Contains(rs[0].LastError, "deadline") {
			t.Fatalf("a 0.6s handler that never failed is a dead letter after %d invocations of 2s, each claiming it late and cutting it", i+1)
		}
	}
}
