// Package sourcekit is for authors of pull sources, not for users of the
// intake: the helpers cairn's own sources (intake/sqssrc, intake/natssrc,
// intake/kafkasrc) share. A source implements intake.Source, registers an
// opener with intake.RegisterSource, and passes the conformance suite
// intake/sourcetest; users then reach it through intake.OpenSource or its
// package's constructor, never through this package.
//
// The rules a source keeps are intake's: acknowledge a delivery to the broker
// only after the Sink's Submit returned without error; submit a message that
// is no event as intake.RefusedEvent (a visible, replayable dead letter), or,
// when it is left to the broker's own dead-letter redrive, count it with the
// Sink's Refused.
package sourcekit

import (
	"context"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/ledger"
)

// Sleep waits for d or until ctx is done (sources back off with it).
func Sleep(ctx context.Context, d time.Duration) {
	_ = backoff.Sleep(ctx, d)
}

// SubmitKeepingAlive submits evs from source to sink and calls keepalive
// every interval while the ledger is recording them (pull sources extend
// their broker's redelivery timer this way: NATS InProgress, SQS
// visibility). every ≤ 0 or a nil keepalive submits without keeping alive.
// keepalive is not called once SubmitKeepingAlive returned.
func SubmitKeepingAlive(ctx context.Context, sink intake.Sink, source string, evs []event.Event, every time.Duration, keepalive func()) ([]ledger.Decision, error) {
	if every <= 0 || keepalive == nil {
		return sink.Submit(ctx, source, evs)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				keepalive()
			case <-stop:
				return
			}
		}
	}()
	ds, err := sink.Submit(ctx, source, evs)
	close(stop)
	<-done
	return ds, err
}
