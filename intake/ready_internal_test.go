package intake

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Readiness fails after readyFailures failed recordings in a row, not after
// one; a success, or readyHold without a failure, makes it ready again; the
// pipeline's own shutdown does not count.
func TestRecordHealth(t *testing.T) {
	t.Parallel()
	full := errors.New("no space left on device")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		err   error
		at    time.Duration // after t0
		ready bool          // checked at the same moment
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one transient error", []step{{full, 0, true}, {nil, time.Second, true}, {full, 2 * time.Second, true}, {full, 3 * time.Second, true}}},
		{"failing", []step{{full, 0, true}, {full, time.Second, true}, {full, 2 * time.Second, false}, {full, 40 * time.Second, false}}},
		{"a success ends it", []step{{full, 0, true}, {full, 0, true}, {full, 0, false}, {nil, time.Second, true}}},
		{"the hold ends it", []step{{full, 0, true}, {full, 0, true}, {full, 0, false}, {context.DeadlineExceeded, readyHold - time.Second, false}}},
		{"shutdown does not count", []step{{full, 0, true}, {full, 0, true}, {context.Canceled, 0, true}, {ErrClosed, 0, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h recordHealth
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				h.note(s.err, now)
				if err := h.check(now); (err == nil) != s.ready {
					t.Fatalf("step %d (%v): check says %v, want ready=%v", i, s.err, err, s.ready)
				}
			}
		})
	}
	var h recordHealth
	for range readyFailures {
		h.note(full, t0)
	}
	if err := h.check(t0.Add(readyHold - time.Millisecond)); !errors.Is(err, full) {
		t.Fatalf("within the hold: %v, want the last failure", err)
	}
	if err := h.check(t0.Add(readyHold)); err != nil {
		t.Fatalf("after the hold without a failure: %v, want ready (traffic tests the ledger again)", err)
	}
}
