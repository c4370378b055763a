package cli

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/bench"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

func benchFsCmd(e *env) *cobra.Command {
	var storeURL string
	var objects, concurrency int
	var memObjects []int
	cmd := &cobra.Command{
		Use:   "fs --store URL",
		Short: "Folder rename: cairn (parallel, journaled, locked) against the naive list/copy/delete loop",
		Long: `Writes --objects small objects under two folders of the store, renames one with
the naive sequential loop (list, copy one, delete one) and the other with cairn
(tree lock, intent journal, --concurrency copies and deletes in flight), and
prints objects/s for both, the ratio, and the share of cairn's time spent on
its journal.

With --memory-objects N,… it then renames folders of N objects (on the store
given; use a local directory) and reports the peak Go heap during each rename:
the manifest is streamed in chunks, so memory stays flat as N grows.

Everything the bench writes is under cairn-bench-fs/ and is deleted after.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeURL == "" || objects < 1 || concurrency < 1 {
				return usagef("--store, --objects >= 1 and --concurrency >= 1 are required")
			}
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			root := fmt.Sprintf("cairn-bench-fs/%d/", time.Now().UnixNano())
			defer cleanupPrefix(context.WithoutCancel(ctx), s, root)
			fmt.Fprintf(e.stderr, "writing 2 × %d objects…\n", objects)
			if err := writeObjects(ctx, s, root+"naive-src/", objects); err != nil {
				return err
			}
			if err := writeObjects(ctx, s, root+"cairn-src/", objects); err != nil {
				return err
			}
			// Naive: list, copy one, delete one.
			start := time.Now()
			for info, err := range s.List(ctx, root+"naive-src/", nil) {
				if err != nil {
					return err
				}
				dst := root + "naive-dst/" + info.Key[len(root+"naive-src/"):]
				if _, err := s.Copy(ctx, info.Key, dst, objstore.Condition{}); err != nil {
					return err
				}
				if err := s.Delete(ctx, info.Key, objstore.Condition{}); err != nil {
					return err
				}
			}
			naive := time.Since(start)
			tm := treelock.New(s, nil)
			defer tm.Close()
			ops := folder.New(s, &folder.Options{Locker: folder.TreeLocker{M: tm}, Concurrency: concurrency})
			start = time.Now()
			res, err := ops.Rename(ctx, root+"cairn-src/", root+"cairn-dst/", false)
			if err != nil {
				return err
			}
			took := time.Since(start)
			if res.Objects != int64(objects) {
				return fmt.Errorf("cairn renamed %d objects, want %d", res.Objects, objects)
			}
			r := bench.NewResult(fmt.Sprintf("rename of %d small objects on %s", objects, safetext.URL(storeURL)), "objects/s",
				float64(objects)/naive.Seconds(), float64(objects)/took.Seconds())
			r.BaselineDesc = "naive loop: list, copy one, delete one"
			r.CairnDesc = fmt.Sprintf("cairn fs mv, %d in flight, tree lock + journal", concurrency)
			r.Note = fmt.Sprintf("journal: %.2fs of cairn's %.2fs (%.1f%%)", res.JournalSeconds, took.Seconds(), 100*res.JournalSeconds/took.Seconds())
			results := []bench.Result{r}
			var heaps []float64
			for _, n := range memObjects {
				prefix := fmt.Sprintf("%smem-%d/", root, n)
				fmt.Fprintf(e.stderr, "writing %d objects for the memory run…\n", n)
				if err := writeObjects(ctx, s, prefix+"src/", n); err != nil {
					return err
				}
				peak, err := peakHeap(func() error {
					_, err := ops.Rename(ctx, prefix+"src/", prefix+"dst/", false)
					return err
				})
				if err != nil {
					return err
				}
				heaps = append(heaps, float64(peak)/(1<<20))
				cleanupPrefix(ctx, s, prefix)
			}
			// Flat memory: the peak heap of each size against the smallest's.
			for i := range heaps {
				mr := bench.NewResult(fmt.Sprintf("peak Go heap renaming %d objects (baseline: renaming %d)", memObjects[i], memObjects[0]), "MiB", heaps[0], heaps[i])
				mr.Lower = true
				mr.BaselineDesc = fmt.Sprintf("%d objects", memObjects[0])
				mr.CairnDesc = fmt.Sprintf("%d objects", memObjects[i])
				if i > 0 || len(heaps) == 1 {
					results = append(results, mr)
				}
			}
			return bench.Print(e.stdout, e.json, results)
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "store URL (s3://… or a directory)")
	cmd.Flags().IntVar(&objects, "objects", 10000, "objects in the renamed folders")
	cmd.Flags().IntVar(&concurrency, "concurrency", 32, "cairn's copies and deletes in flight")
	cmd.Flags().IntSliceVar(&memObjects, "memory-objects", nil, "also rename folders of these sizes and report peak heap (e.g. 20000,200000)")
	return cmd
}

// writeObjects writes n small objects under prefix, 32 at a time.
func writeObjects(ctx context.Context, s *objstore.Store, prefix string, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			_, err := s.PutBytes(gctx, fmt.Sprintf("%sd%03d/obj-%07d", prefix, i%100, i), fmt.Appendf(nil, "object %d", i), nil)
			return err
		})
	}
	return g.Wait()
}

func cleanupPrefix(ctx context.Context, s *objstore.Store, prefix string) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for info, err := range s.List(ctx, prefix, nil) {
		if err != nil {
			break
		}
		g.Go(func() error {
			if err := s.Delete(gctx, info.Key, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return err
			}
			return nil
		})
	}
	_ = g.Wait()
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
