package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
)

// bypass is cairn lambda --bench-bypass (hidden; benchmarks only): the same
// function with the ledger left out. Each invocation parses its events (an
// SQS batch of notifications, or notifications directly) and runs the
// handler once per event delivered, up to concurrency at once, with fencing
// token 0 and attempt 1, and answers an SQS batch with no failures. No
// deduplication, no ordering, no fencing, no retries, no dead letters: it is
// what cairn bench lambda measures cairn's added latency and throughput
// against, never a way to run a function.
type bypass struct {
	h           intake.Handler
	concurrency int
}

func runBypass(log *slog.Logger, h intake.Handler, concurrency int) error {
	log.Warn("cairn lambda --bench-bypass: no ledger; every event delivered runs the handler, duplicates and stale ones included (benchmarks only)")
	lambda.Start(&bypass{h: h, concurrency: concurrency})
	return nil
}

// Invoke handles one invocation (lambda.Handler).
func (b *bypass) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	if bytes.Equal(bytes.TrimSpace(payload), []byte(awslambda.DrainPayload)) {
		return []byte(`{"kind":"drain","bypass":true}`), nil // no ledger: nothing is left to run
	}
	var bodies [][]byte
	var batch events.SQSEvent
	isSQS := bytes.Contains(payload, []byte(`"aws:sqs"`)) && json.Unmarshal(payload, &batch) == nil && len(batch.Records) > 0
	if isSQS {
		for _, r := range batch.Records {
			bodies = append(bodies, []byte(r.Body))
		}
	} else {
		bodies = [][]byte{payload}
	}
	var evs []event.Event
	for _, body := range bodies {
		es, _, err := event.ParseAll(body)
		if err != nil {
			return nil, fmt.Errorf("bench bypass: %w", err)
		}
		evs = append(evs, es...)
	}
	var g errgroup.Group
	g.SetLimit(b.concurrency)
	for _, ev := range evs {
		g.Go(func() error {
			_, err := b.h.Handle(ctx, intake.Work{Event: ev, Token: 0, Attempt: 1, Source: "lambda-bypass"})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("bench bypass: the handler failed: %w", err)
	}
	if isSQS {
		return []byte(`{"batchItemFailures":[]}`), nil
	}
	return []byte(`{"kind":"direct","bypass":true}`), nil
}
