package awslambda_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
)

// BenchmarkInvoke measures one SQS batch of 10 fresh keys per invocation,
// in process (no runtime API): through the ledger on MinIO (the object-store
// ledger), against the same handler called directly (the ledger bypassed).
// It reports the p50 and p99 latency of an invocation; `cairn bench lambda`
// measures the same through the Runtime Interface Emulator.
func BenchmarkInvoke(b *testing.B) {
	const batch = 10
	var n atomic.Int64
	payload := func() []byte {
		var msgs []sqsMsg
		for range batch {
			i := n.Add(1)
			msgs = append(msgs, sqsMsg{id: fmt.Sprint(i), body: string(event.S3Body(eventtest.Created("b", fmt.Sprintf("k/%d", i), "01")))})
		}
		return sqsBatch(msgs...)
	}
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) { return "", nil })
	run := func(b *testing.B, call func(ctx context.Context, p []byte) error) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			p := payload()
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := call(ctx, p); err != nil {
				b.Fatal(err)
			}
			cancel()
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("bypass", func(b *testing.B) {
		run(b, func(ctx context.Context, p []byte) error {
			evs, err := event.Parse(p)
			for _, ev := range evs {
				if _, err := h.Handle(ctx, intake.Work{Event: ev, Token: 1, Attempt: 1}); err != nil {
					return err
				}
			}
			return err
		})
	})
	b.Run("objledger-minio", func(b *testing.B) {
		be, _ := testenv.NewBucket(b, testenv.S3(b))
		l, err := objledger.Open(context.Background(), objstore.New(be, nil), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		benchFunction(b, l, h, run)
	})
}

func benchFunction(b *testing.B, l *ledger.Ledger, h intake.Handler, run func(*testing.B, func(context.Context, []byte) error)) {
	f, err := awslambda.New(l, h, nil)
	if err != nil {
		b.Fatal(err)
	}
	run(b, func(ctx context.Context, p []byte) error {
		_, err := f.Invoke(ctx, p)
		return err
	})
}
