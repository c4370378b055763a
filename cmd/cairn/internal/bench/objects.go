package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/objstore"
)

// writeObjects writes n small objects under prefix, 32 at a time, stopping at
// the first error or when ctx ends.
func writeObjects(ctx context.Context, s *objstore.Store, prefix string, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			_, err := s.PutBytes(gctx, fmt.Sprintf("%sd%03d/obj-%07d", prefix, i%100, i), fmt.Appendf(nil, "object %d", i), nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// removeObjects deletes every object under prefix and returns how many it
// deleted; the first error stops it (objects already gone are no error).
func removeObjects(ctx context.Context, s *objstore.Store, prefix string) (int, error) {
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for info, err := range s.List(gctx, prefix, nil) {
		if err != nil {
			g.Go(func() error { return err })
			break
		}
		g.Go(func() error {
			err := s.Delete(gctx, info.Key, objstore.Condition{})
			if err == nil {
				n.Add(1)
			}
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			return err
		})
	}
	err := g.Wait()
	return int(n.Load()), err
}

// cleanupPrefix deletes what it can under prefix, quietly.
func cleanupPrefix(ctx context.Context, s *objstore.Store, prefix string) {
	_, _ = removeObjects(ctx, s, prefix)
}

// peakHeap runs f and samples the Go heap every 20ms.
func peakHeap(f func() error) (uint64, error) {
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	err := f()
	close(stop)
	wg.Wait()
	return peak.Load(), err
}

// firstErr is a if set, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
