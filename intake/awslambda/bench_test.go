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
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"golang.org/x/sync/errgroup"
)

// BenchmarkInvoke measures one SQS batch of 10 fresh keys per invocation,
// in process (no runtime API), in one run: the same handler with the ledger
// bypassed (called directly), behind a Powertools-style idempotency guard
// on the same MinIO bucket (per event a conditional put INPROGRESS, then a
// put COMPLETED: no ordering, fencing or dead letters), and through cairn's
// object-store ledger in that bucket. It reports each one's p50 and p99 per
// invocation and store requests per 1,000 events, and logs the ratios.
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
		lastP50, lastP99 = float64(lat[len(lat)/2].Microseconds())/1000, float64(lat[len(lat)*99/100].Microseconds())/1000
		b.ReportMetric(lastP50, "p50-ms")
		b.ReportMetric(lastP99, "p99-ms")
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
	var res = map[string][3]float64{} // p50, p99, requests per 1,000 events
	count := func(b *testing.B, name string, fb *faulty.Backend, f func(*testing.B, func(*testing.B, func(context.Context, []byte) error))) {
		var p50, p99 float64
		var calls int
		f(b, func(b *testing.B, call func(context.Context, []byte) error) {
			before := fb.Stats().Calls
			events := 0
			run(b, func(ctx context.Context, p []byte) error { events += batch; return call(ctx, p) })
			calls = fb.Stats().Calls - before
			p50, p99 = lastP50, lastP99
			res[name] = [3]float64{p50, p99, float64(calls) * 1000 / float64(max(events, 1))}
			b.ReportMetric(res[name][2], "requests/1000ev")
		})
	}
	b.Run("powertools-minio", func(b *testing.B) {
		be, _ := testenv.NewBucket(b, testenv.S3(b))
		fb := faulty.New(be, nil)
		s := objstore.New(fb, nil)
		count(b, "powertools", fb, func(b *testing.B, measure func(*testing.B, func(context.Context, []byte) error)) {
			measure(b, func(ctx context.Context, p []byte) error {
				evs, err := event.Parse(p)
				if err != nil {
					return err
				}
				var g errgroup.Group
				for _, ev := range evs {
					g.Go(func() error {
						key := "idempotency/" + ev.Bucket + "/" + ev.Key + "@" + ev.Sequencer
						info, err := s.PutBytes(ctx, key, []byte(`{"status":"INPROGRESS"}`), &objstore.PutOptions{If: objstore.IfAbsent()})
						if err != nil {
							return err
						}
						if _, err := h.Handle(ctx, intake.Work{Event: ev, Token: 1, Attempt: 1}); err != nil {
							return err
						}
						_, err = s.PutBytes(ctx, key, []byte(`{"status":"COMPLETED"}`), &objstore.PutOptions{If: objstore.IfMatch(info.ETag)})
						return err
					})
				}
				return g.Wait()
			})
		})
	})
	b.Run("objledger-minio", func(b *testing.B) {
		be, _ := testenv.NewBucket(b, testenv.S3(b))
		fb := faulty.New(be, nil)
		l, err := objledger.Open(context.Background(), objstore.New(fb, nil), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		count(b, "cairn", fb, func(b *testing.B, measure func(*testing.B, func(context.Context, []byte) error)) {
			f, err := awslambda.New(l, h, nil)
			if err != nil {
				b.Fatal(err)
			}
			measure(b, func(ctx context.Context, p []byte) error {
				_, err := f.Invoke(ctx, p)
				return err
			})
		})
	})
	if c, pt, ok := res["cairn"], res["powertools"], len(res) == 2; ok {
		fmt.Printf("object-store ledger vs Powertools-style guard on the same MinIO: p50 %.1f vs %.1f ms, p99 %.1f vs %.1f ms, store requests per 1,000 events %.0f vs %.0f (%.2fx)\n",
			c[0], pt[0], c[1], pt[1], c[2], pt[2], c[2]/pt[2])
	}
}

// lastP50 and lastP99 are the latest run's percentiles (ms).
var lastP50, lastP99 float64
