package pathlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	. "github.com/cairn-s3/cairn/lock/pathlock"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// Uncontended acquire+release of a write at depth 8.
func BenchmarkAcquireReleaseDepth8(b *testing.B) {
	var l Locker
	ctx := context.Background()
	r := Request{Write: []string{"/a/b/c/d/e/f/g/h"}}
	for b.Loop() {
		h, err := l.Acquire(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
}

// The same, while N disjoint locks are held: the cost must stay flat.
func BenchmarkAcquireWhileHolding(b *testing.B) {
	for _, n := range []int{10, 1000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			var l Locker
			ctx := context.Background()
			held := make([]*Held, 0, n)
			for i := range n {
				h, err := l.Acquire(ctx, Request{Write: []string{fmt.Sprintf("/held/%d/x", i)}})
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, h)
			}
			r := Request{Write: []string{"/a/b/c/d/e/f/g/h"}}
			b.ResetTimer()
			for b.Loop() {
				h, err := l.Acquire(ctx, r)
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
			}
			b.StopTimer()
			for _, h := range held {
				h.Release()
			}
		})
	}
}

// 64 goroutines doing 1 ms of simulated I/O under the lock over a 1,000-folder
// tree with 20% writes: the path lock against one global sync.RWMutex, in the
// same run. Reports both rates and their ratio.
func BenchmarkContendedVsGlobalRWMutex(b *testing.B) {
	folders := make([]string, 1000)
	for i := range folders {
		folders[i] = fmt.Sprintf("/data/%02d/%03d", i/100, i)
	}
	const workers, hold, run = 64, time.Millisecond, time.Second
	measure := func(op func(rng *rand.Rand)) float64 {
		var n atomic.Int64
		deadline := time.Now().Add(run)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for time.Now().Before(deadline) {
					op(rng)
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return float64(n.Load()) / run.Seconds()
	}
	for b.Loop() {
		var global sync.RWMutex
		baseline := measure(func(rng *rand.Rand) {
			if rng.IntN(5) == 0 {
				global.Lock()
				time.Sleep(hold)
				global.Unlock()
			} else {
				global.RLock()
				time.Sleep(hold)
				global.RUnlock()
			}
		})
		var l Locker
		cairn := measure(func(rng *rand.Rand) {
			r := Request{Read: []string{folders[rng.IntN(len(folders))]}}
			if rng.IntN(5) == 0 {
				r = Request{Write: []string{folders[rng.IntN(len(folders))]}}
			}
			h, err := l.Acquire(context.Background(), r)
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(hold)
			h.Release()
		})
		b.ReportMetric(baseline, "rwmutex-ops/s")
		b.ReportMetric(cairn, "pathlock-ops/s")
		b.ReportMetric(cairn/baseline, "ratio")
	}
}
