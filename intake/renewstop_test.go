package intake_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
)

// renewWatch is a real ledger whose renewals are held until they are
// cancelled or the claim's outcome is recorded, and which notes every renewal
// that is in flight, or sent, once an outcome was recorded.
type renewWatch struct {
	ledger.Backend
	renewing chan struct{} // a value when a renewal is in flight

	mu       sync.Mutex
	inFlight int
	settled  chan struct{} // closed by the first outcome
	done     bool
	late     []string
}

func newRenewWatch(b ledger.Backend) *renewWatch {
	return &renewWatch{Backend: b, renewing: make(chan struct{}, 1), settled: make(chan struct{})}
}

func (w *renewWatch) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	w.mu.Lock()
	if w.done {
		w.late = append(w.late, "a renewal sent after the outcome was recorded")
	}
	w.inFlight++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inFlight--
		w.mu.Unlock()
	}()
	select {
	case w.renewing <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return c, ctx.Err()
	case <-w.settled:
		return w.Backend.Renew(ctx, c, lease)
	}
}

// outcome notes that the claim's outcome is being recorded.
func (w *renewWatch) outcome() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight > 0 {
		w.late = append(w.late, "a renewal in flight when the outcome was recorded")
	}
	if !w.done {
		w.done = true
		close(w.settled)
	}
}

func (w *renewWatch) Complete(ctx context.Context, c ledger.Claim, result string) error {
	w.outcome()
	return w.Backend.Complete(ctx, c, result)
}

func (w *renewWatch) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	w.outcome()
	return w.Backend.CompleteBatch(ctx, cs, results)
}

func (w *renewWatch) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	w.outcome()
	return w.Backend.Fail(ctx, c, cause, retryable)
}

func (w *renewWatch) Release(ctx context.Context, c ledger.Claim) error {
	w.outcome()
	return w.Backend.Release(ctx, c)
}

// TestNoRenewalAfterStop: a handler that returns while a renewal of its
// lease is in flight has its outcome recorded only once that renewal is
// over (cancelled), and no renewal is sent afterwards: the outcome is the
// claim's last request. Before, stopping the renewal did not wait for the
// request in flight, nor stop a tick that had already fired, so a renewal
// could reach the ledger beside the completion or after it.
func TestNoRenewalAfterStop(t *testing.T) {
	t.Parallel()
	w := newRenewWatch(newLedger(t, nil).Backend())
	outcomes := make(chan string, 1)
	p, err := intake.New(ledger.New(w), intake.HandlerFunc(func(ctx context.Context, _ intake.Work) (string, error) {
		select {
		case <-w.renewing: // return while the renewal is in flight
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done", nil
	}), &intake.Options{Concurrency: 1, Lease: intake.MinLease, Poll: 20 * time.Millisecond,
		OnOutcome: func(_ intake.Work, outcome string, _ error) { outcomes <- outcome }})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, p)
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
		t.Fatal(err)
	}
	if got := <-outcomes; got != intake.OutcomeProcessed {
		t.Fatalf("outcome %q, want %q", got, intake.OutcomeProcessed)
	}
	stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.late) > 0 {
		t.Fatalf("renewals beside or after the claim's outcome: %s", strings.Join(w.late, "; "))
	}
}
