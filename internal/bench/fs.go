package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

// FsOptions configures Fs. Store is required; zero fields take the defaults.
type FsOptions struct {
	// Store is where the folders are written and renamed (under
	// cairn-bench-fs/, deleted after).
	Store *objstore.Store
	// StoreURL names the store in the results (credentials are not shown).
	StoreURL string
	// Objects is how many small objects each renamed folder holds (default 10000).
	Objects int
	// Concurrency is cairn's copies and deletes in flight (default 32).
	Concurrency int
	// MemoryObjects, if set, also renames folders of these sizes and reports
	// the peak Go heap of each against the first.
	MemoryObjects []int
	// Progress gets a line before each slow setup step (default: none).
	Progress io.Writer
}

// Fs renames a folder with the naive sequential loop (list, copy one, delete
// one) and another with cairn (tree lock, intent journal, Concurrency copies
// and deletes in flight), and reports objects/s for both and the share of
// cairn's time spent on its journal.
func Fs(ctx context.Context, opts FsOptions) ([]Result, error) {
	s, objects, concurrency := opts.Store, opts.Objects, opts.Concurrency
	if objects <= 0 {
		objects = 10000
	}
	if concurrency <= 0 {
		concurrency = 32
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	root := fmt.Sprintf("cairn-bench-fs/%d/", time.Now().UnixNano())
	defer cleanupPrefix(context.WithoutCancel(ctx), s, root)
	fmt.Fprintf(progress, "writing 2 × %d objects…\n", objects)
	if err := writeObjects(ctx, s, root+"naive-src/", objects); err != nil {
		return nil, err
	}
	if err := writeObjects(ctx, s, root+"cairn-src/", objects); err != nil {
		return nil, err
	}
	// Naive: list, copy one, delete one.
	start := time.Now()
	for info, err := range s.List(ctx, root+"naive-src/", nil) {
		if err != nil {
			return nil, err
		}
		dst := root + "naive-dst/" + info.Key[len(root+"naive-src/"):]
		if _, err := s.Copy(ctx, info.Key, dst, objstore.Condition{}); err != nil {
			return nil, err
		}
		if err := s.Delete(ctx, info.Key, objstore.Condition{}); err != nil {
			return nil, err
		}
	}
	naive := time.Since(start)
	tm := treelock.New(s, nil)
	defer tm.Close()
	ops := folder.New(s, &folder.Options{Locker: folder.TreeLocker{M: tm}, Concurrency: concurrency})
	start = time.Now()
	res, err := ops.Rename(ctx, root+"cairn-src/", root+"cairn-dst/", false)
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	if res.Objects != int64(objects) {
		return nil, fmt.Errorf("cairn renamed %d objects, want %d", res.Objects, objects)
	}
	r := NewResult(fmt.Sprintf("rename of %d small objects on %s", objects, safetext.URL(opts.StoreURL)), "objects/s",
		float64(objects)/naive.Seconds(), float64(objects)/took.Seconds())
	r.BaselineDesc = "naive loop: list, copy one, delete one"
	r.CairnDesc = fmt.Sprintf("cairn fs mv, %d in flight, tree lock + journal", concurrency)
	r.Note = fmt.Sprintf("journal: %.2fs of cairn's %.2fs (%.1f%%)", res.JournalSeconds, took.Seconds(), 100*res.JournalSeconds/took.Seconds())
	results := []Result{r}
	var heaps []float64
	for _, n := range opts.MemoryObjects {
		prefix := fmt.Sprintf("%smem-%d/", root, n)
		fmt.Fprintf(progress, "writing %d objects for the memory run…\n", n)
		if err := writeObjects(ctx, s, prefix+"src/", n); err != nil {
			return nil, err
		}
		peak, err := peakHeap(func() error {
			_, err := ops.Rename(ctx, prefix+"src/", prefix+"dst/", false)
			return err
		})
		if err != nil {
			return nil, err
		}
		heaps = append(heaps, float64(peak)/(1<<20))
		cleanupPrefix(ctx, s, prefix)
	}
	// Flat memory: the peak heap of each size against the smallest's.
	for i := range heaps {
		mr := NewResult(fmt.Sprintf("peak Go heap renaming %d objects (baseline: renaming %d)", opts.MemoryObjects[i], opts.MemoryObjects[0]), "MiB", heaps[0], heaps[i])
		mr.Lower = true
		mr.BaselineDesc = fmt.Sprintf("%d objects", opts.MemoryObjects[0])
		mr.CairnDesc = fmt.Sprintf("%d objects", opts.MemoryObjects[i])
		if i > 0 || len(heaps) == 1 {
			results = append(results, mr)
		}
	}
	return results, nil
}
