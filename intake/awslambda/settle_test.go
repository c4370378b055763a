package awslambda_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/ledger"
)

// hangingFail is a ledger whose Fail hangs (a ledger slow or unreachable as
// the invocation ends) once hang is set, noting the deadline of each call.
type hangingFail struct {
	ledger.Backend
	mu        sync.Mutex
	hang      bool
	deadlines []time.Time
}

func (b *hangingFail) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	b.mu.Lock()
	hang := b.hang
	d, _ := ctx.Deadline()
	b.deadlines = append(b.deadlines, d)
	b.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return b.Backend.Fail(ctx, c, cause, retryable)
}

// With the ledger hanging when handlers are stopped, settling gives up by a
// quarter of StopBefore before Lambda's deadline (the claim's lease then
// runs out as after a kill), so the invocation answers in time. Found in
// review: each attempt to settle was bounded by the lease alone, and a 3s
// invocation answered 668ms after its deadline, when Lambda has killed it
// and its SQS answer is lost.
func TestSettlingEndsBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	b := &hangingFail{Backend: sharedLedger(t, nil).Backend()}
	l := ledger.New(b)
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		b.mu.Lock()
		b.hang = true
		b.mu.Unlock()
		<-ctx.Done()
		return "", ctx.Err()
	})
	const stopBefore = 800 * time.Millisecond
	f := newFunction(t, l, h, &awslambda.Options{StopBefore: stopBefore})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if _, err := f.Invoke(ctx, sqsBatch(sqsMsg{id: "m1", body: s3Body("a", "01")})); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.deadlines) == 0 {
		t.Fatal("the handler's outcome was never settled")
	}
	for _, d := range b.deadlines {
		if d.IsZero() || d.After(deadline.Add(-stopBefore/4)) {
			t.Errorf("a settling call may run until %v, past a quarter of StopBefore before the deadline (%v)", d, deadline.Add(-stopBefore/4))
		}
	}
}
