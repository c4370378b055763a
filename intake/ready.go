package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Readiness (GET /readyz, Pipeline.Ready) reports whether the pipeline can
// take events, which a ping of the ledger alone does not tell: a ledger on a
// full disk still answers reads while every recording fails (and every
// webhook answers 503). So readiness also fails once recording has failed
// readyFailures times in a row, and stays failed until a recording succeeds
// or readyHold passes without a failed one.
const (
	// readyFailures is how many recordings in a row must fail: one
	// transient error does not take the instance out of a load balancer.
	readyFailures = 3
	// readyHold is how long readiness stays failed after the last failed
	// recording. Then it reports ready again, so that traffic tests the
	// ledger anew (a load balancer that stopped sending events would never
	// let a recording succeed); if recording still fails, it fails again.
	readyHold = 30 * time.Second
)

// recordHealth is the recent outcome of recording: the recorder's ledger
// calls (a batch, and each submission recorded again alone).
type recordHealth struct {
	mu       sync.Mutex
	failures int       // failed recordings in a row
	first    time.Time // the first of them
	last     time.Time // the latest of them
	err      error     // the latest failure
}

// note records one recording's outcome at now. A recording cut short by
// the pipeline's own shutdown says nothing about the ledger.
func (h *recordHealth) note(err error, now time.Time) {
	if errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.failures, h.err = 0, nil
		return
	}
	if h.failures == 0 {
		h.first = now
	}
	h.failures++
	h.last, h.err = now, err
}

// check returns why the pipeline is not ready to record at now, or nil.
func (h *recordHealth) check(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures < readyFailures || now.Sub(h.last) >= readyHold {
		return nil
	}
	return fmt.Errorf("intake: the last %d attempts to record events failed (since %s), so deliveries are refused (503) until one succeeds: %w",
		h.failures, h.first.UTC().Format(time.RFC3339), h.err)
}
