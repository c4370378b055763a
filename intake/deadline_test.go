package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// hungRenew is a real ledger whose renewals hang while blocked, until the
// caller gives up on them: a blackholed connection (a dropped route, a hung
// NAT), which never errors by itself.
type hungRenew struct {
	ledger.Backend
	blocked atomic.Bool
}

func (f *hungRenew) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	if f.blocked.Load() {
		<-ctx.Done()
		return c, ctx.Err()
	}
	return f.Backend.Renew(ctx, c, lease)
}

// stallHandler is the handlers of TestLocalLeaseDeadline: the first attempt
// runs until its context ends (a long job), later ones return at once. Both check
// that no two runs of the key overlap.
func stallHandler(t *testing.T, h *handled, first func()) intake.Handler {
	return intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		h.enter(w)
		defer h.leave(w)
		if _, ok := ctx.Deadline(); !ok {
			t.Errorf("token %d: the handler's context has no deadline", w.Token)
		}
		if d, ok := intake.LeaseDeadline(ctx); !ok || d.IsZero() {
			t.Errorf("token %d: no lease deadline", w.Token)
		}
		if w.Attempt == 1 {
			first()
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute): // only without the rule: the overlap is seen by then
			}
			return "stale holder", nil
		}
		return "newer holder", nil
	})
}

// TestLocalLeaseDeadline: a holder cut off from its ledger by a fault that
// never errors (a renewal that hangs; a stalled object store) stops its
// handler by its own clock before the lease can have expired, so the key's
// next holder (another pipeline, or the same one) never runs beside it; the
// stopped run counts as a lease loss, never as processed. Without the rule
// (the renewal waiting for an answer that never comes) the first handler ran
// on beside the second.
func TestLocalLeaseDeadline(t *testing.T) {
	t.Parallel()
	// The shortest lease: its margin (MinLeaseMargin) is what keeps the next
	// holder clear of the stopped one on a loaded machine.
	const lease = intake.MinLease
	for _, tc := range []struct {
		name string
		// setup returns the pipelines' ledgers and the fault's switch: a
		// is the holder the fault cuts off (cut(true)), b (may be a) claims
		// next.
		setup func(t *testing.T) (a, b *ledger.Ledger, cut func(bool))
	}{
		{"hung-renewal", func(t *testing.T) (*ledger.Ledger, *ledger.Ledger, func(bool)) {
			l := &hungRenew{Backend: newLedger(t, nil).Backend()}
			led := ledger.New(l)
			return led, led, l.blocked.Store
		}},
		{"stalled-store", func(t *testing.T) (*ledger.Ledger, *ledger.Ledger, func(bool)) {
			// Two pipelines on one object-store ledger; a's requests stall
			// once cut: each for 5 leases, or until its deadline.
			shared := mem.OpenBackend("")
			var stalled atomic.Bool
			fb := faulty.New(shared, &faulty.Options{Rule: func(faulty.Op, string) (faulty.Fault, time.Duration) {
				if stalled.Load() {
					return faulty.None, 5 * lease
				}
				return faulty.None, 0
			}})
			open := func(b objstore.Backend) *ledger.Ledger {
				l, err := objledger.Open(context.Background(), objstore.New(b, nil), nil, &objledger.Options{Shards: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return l
			}
			return open(fb), open(shared), stalled.Store
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b, cut := tc.setup(t)
			h := newHandled()
			outcomes := make(chan string, 8)
			onOutcome := func(w intake.Work, outcome string, err error) { outcomes <- fmt.Sprint(w.Attempt, " ", outcome) }
			started := make(chan struct{})
			reg := prometheus.NewRegistry()
			pa, err := intake.New(a, stallHandler(t, h, func() { cut(true); close(started) }),
				&intake.Options{Lease: lease, Poll: 20 * time.Millisecond, Grace: 100 * time.Millisecond, Registerer: reg, OnOutcome: onOutcome})
			if err != nil {
				t.Fatal(err)
			}
			start(t, pa)
			if _, err := pa.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
				t.Fatal(err)
			}
			<-started
			if b != a {
				pb, err := intake.New(b, stallHandler(t, h, func() { t.Error("attempt 1 claimed twice") }),
					&intake.Options{Lease: lease, Poll: 20 * time.Millisecond, OnOutcome: onOutcome})
				if err != nil {
					t.Fatal(err)
				}
				start(t, pb)
			}
			got := map[string]bool{}
			for !got["2 processed"] {
				select {
				case o := <-outcomes:
					got[o] = true
				case <-time.After(30 * time.Second):
					t.Fatalf("outcomes so far %v; attempt 2 never processed", got)
				}
			}
			cut(false) // a's ledger answers again: its metrics are read, its pipeline stops
			if n := h.overlap.Load(); n > 0 {
				t.Fatalf("the stale holder's handler ran beside the next one (%d overlaps)", n)
			}
			for !got["1 lease_lost"] {
				select {
				case o := <-outcomes:
					got[o] = true
				case <-time.After(30 * time.Second):
					t.Fatalf("outcomes %v, want attempt 1 lease_lost", got)
				}
			}
			if got["1 processed"] {
				t.Fatalf("the stopped run counted as processed: %v", got)
			}
			if n := gathered(t, reg, "cairn_intake_lease_losses_total"); n != 1 {
				t.Fatalf("cairn_intake_lease_losses_total = %v, want 1", n)
			}
		})
	}
}

// TestHTTPHandlerSendsLeaseDeadline: an HTTP endpoint cannot be stopped, so
// each request carries the claim's deadline (header and body field, RFC 3339
// with milliseconds, the same instant), in the future and within a lease.
func TestHTTPHandlerSendsLeaseDeadline(t *testing.T) {
	t.Parallel()
	type seen struct {
		header, field string
		at            time.Time
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			LeaseDeadline string `json:"lease_deadline"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- seen{r.Header.Get("Cairn-Lease-Deadline"), body.LeaseDeadline, time.Now()}
	}))
	defer srv.Close()
	const lease = 5 * time.Second
	p, err := intake.New(newLedger(t, nil), &intake.HTTPHandler{URL: srv.URL}, &intake.Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.header == "" || s.header != s.field {
		t.Fatalf("Cairn-Lease-Deadline %q, lease_deadline %q: want the same deadline in both", s.header, s.field)
	}
	d, err := time.Parse("2006-01-02T15:04:05.000Z07:00", s.header)
	if err != nil {
		t.Fatalf("Cairn-Lease-Deadline %q: %v", s.header, err)
	}
	if !d.After(s.at) || d.After(s.at.Add(lease)) {
		t.Fatalf("deadline %v is not within a lease after the request (%v)", d, s.at)
	}
}
