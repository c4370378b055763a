package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
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
	// Concurrency is cairn's copies and deletes in flight (default: the
	// folder package's default, folder.DefaultConcurrency).
	Concurrency int
	// Rounds is how many times the ceiling is measured and a folder renamed
	// by cairn, alternating, so that noise from other work on the machine
	// falls on both alike (default 3).
	Rounds int
	// CeilingConcurrencies are the numbers of bare CopyObject requests in
	// flight at which the store's copy rate is measured in each round (default
	// 8, 16, 32, 64, 128).
	CeilingConcurrencies []int
	// CeilingObjects is how many objects each ceiling measurement copies
	// (default: Objects, at most 1000).
	CeilingObjects int
	// MemoryObjects, if set, also renames folders of these sizes and reports
	// the peak Go heap of each against the first.
	MemoryObjects []int
	// Progress gets a line before each slow setup step (default: none).
	Progress io.Writer
}

// Fs renames a folder with the naive sequential loop (list, copy one, delete
// one) and others with cairn (tree lock, intent journal, Concurrency copies
// and deletes in flight), and reports objects/s for both and the share of
// cairn's time spent on its journal.
//
// It also measures the store's ceiling: bare CopyObject requests of the same
// objects (no journal, no lock, nothing else) at each of
// CeilingConcurrencies, in Rounds rounds each followed by a rename, and
// reports cairn's copy rate (objects over its copy phase; the median of the
// rounds) against the ceiling (in each round, every object of the folder
// copied at the concurrency that was fastest in a short sweep; the median of
// the rounds), with the
// p50 and p99 of one copy on each side, the whole rename's rate against the
// same ceiling, and the requests cairn sent per object.
func Fs(ctx context.Context, opts FsOptions) ([]Result, error) {
	objects, concurrency, rounds := opts.Objects, opts.Concurrency, opts.Rounds
	if objects <= 0 {
		objects = 10000
	}
	if concurrency <= 0 {
		concurrency = folder.DefaultConcurrency
	}
	if rounds <= 0 {
		rounds = 3
	}
	ceilings := opts.CeilingConcurrencies
	if len(ceilings) == 0 {
		ceilings = []int{8, 16, 32, 64, 128}
	}
	ceilingObjects := opts.CeilingObjects
	if ceilingObjects <= 0 {
		ceilingObjects = 1000
	}
	ceilingObjects = min(ceilingObjects, objects)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	// Every request goes through a counter, so that cairn's requests per
	// object can be reported and its copies timed.
	var caps *objstore.Capabilities
	if c, err := opts.Store.Capabilities(ctx); err == nil {
		caps = &c
	}
	cb, wrapped := newCounted(opts.Store.Backend())
	s := objstore.New(wrapped, &objstore.Options{Capabilities: caps})
	root := fmt.Sprintf("cairn-bench-fs/%d/", time.Now().UnixNano())
	defer cleanupPrefix(context.WithoutCancel(ctx), s, root)
	fmt.Fprintf(progress, "writing %d × %d objects…\n", rounds+1, objects)
	if err := writeObjects(ctx, s, root+"naive-src/", objects); err != nil {
		return nil, err
	}
	src := func(r int) string { return fmt.Sprintf("%scairn-src-%d/", root, r) }
	for r := range rounds {
		if err := writeObjects(ctx, s, src(r), objects); err != nil {
			return nil, err
		}
	}
	// Naive: list, copy one, delete one.
	fmt.Fprintf(progress, "renaming %d objects with the naive loop…\n", objects)
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
	// Rounds: the ceiling at each concurrency, copying the first
	// CeilingObjects of the round's folder, then cairn renames that folder.
	sweeps := map[int][]copyRun{}
	var fulls []copyRun
	var renames []renameRun
	var copies Latencies
	requests := map[string]int{}
	for r := range rounds {
		var keys []string
		for info, err := range s.List(ctx, src(r), &objstore.ListOptions{PageSize: min(ceilingObjects, 1000)}) {
			if err != nil {
				return nil, err
			}
			keys = append(keys, strings.TrimPrefix(info.Key, src(r)))
			if len(keys) == ceilingObjects {
				break
			}
		}
		fmt.Fprintf(progress, "round %d of %d: bare CopyObject of %d objects at %v in flight, then cairn's rename of %d…\n",
			r+1, rounds, len(keys), ceilings, objects)
		roundBest := copyRun{}
		for _, c := range ceilings {
			run, err := copyObjects(ctx, s, keys, src(r), fmt.Sprintf("%sceiling/%d-%d/", root, r, c), c)
			if err != nil {
				return nil, err
			}
			sweeps[c] = append(sweeps[c], run)
			if run.rate() > roundBest.rate() || roundBest.concurrency == 0 {
				roundBest = run
			}
		}
		// The sweep's short runs find the best concurrency; the ceiling is a
		// run as long as the rename's copy phase (every object of the
		// folder) at it: a short burst outruns what a server sustains.
		all := keys
		if len(keys) < objects {
			all = nil
			for info, err := range s.List(ctx, src(r), nil) {
				if err != nil {
					return nil, err
				}
				all = append(all, strings.TrimPrefix(info.Key, src(r)))
			}
		}
		fmt.Fprintf(progress, "round %d of %d: bare CopyObject of all %d objects at %d in flight…\n", r+1, rounds, len(all), roundBest.concurrency)
		full, err := copyObjects(ctx, s, all, src(r), fmt.Sprintf("%sceiling/%d-full/", root, r), roundBest.concurrency)
		if err != nil {
			return nil, err
		}
		fulls = append(fulls, full)
		before := cb.snapshot(true)
		start := time.Now()
		res, err := ops.Rename(ctx, src(r), fmt.Sprintf("%scairn-dst-%d/", root, r), false)
		if err != nil {
			return nil, err
		}
		took := time.Since(start)
		reqs, lat := cb.since(before)
		if res.Objects != int64(objects) {
			return nil, fmt.Errorf("cairn renamed %d objects, want %d", res.Objects, objects)
		}
		renames = append(renames, renameRun{res: res, took: took})
		copies = append(copies, lat...)
		for op, n := range reqs {
			requests[op] += n
		}
	}
	// The ceiling: the median of the rounds' full-length runs.
	var ceilingRates []string
	for _, c := range ceilings {
		rates := make([]float64, len(sweeps[c]))
		for i, run := range sweeps[c] {
			rates[i] = run.rate()
		}
		ceilingRates = append(ceilingRates, fmt.Sprintf("%d: %s", c, joinRates(rates)))
	}
	fullRates := make([]float64, len(fulls))
	var ceilingLat Latencies
	var fullDesc []string
	for i, run := range fulls {
		fullRates[i] = run.rate()
		ceilingLat = append(ceilingLat, run.latencies...)
		fullDesc = append(fullDesc, fmt.Sprintf("%.0f at %d", run.rate(), run.concurrency))
	}
	bestRate := median(fullRates)
	copyRates, wholeRates := make([]float64, rounds), make([]float64, rounds)
	var journal, copyPhase, deletePhase, total float64
	for i, rr := range renames {
		copyRates[i] = float64(objects) / rr.res.CopySeconds
		wholeRates[i] = float64(objects) / rr.took.Seconds()
		journal += rr.res.JournalSeconds
		copyPhase += rr.res.CopySeconds
		deletePhase += rr.res.DeleteSeconds
		total += rr.took.Seconds()
	}
	whole := median(wholeRates)
	r := NewResult(fmt.Sprintf("rename of %d small objects on %s", objects, safetext.URL(opts.StoreURL)), "objects/s",
		float64(objects)/naive.Seconds(), whole)
	r.BaselineDesc = "naive loop: list, copy one, delete one"
	r.CairnDesc = fmt.Sprintf("cairn fs mv, %d in flight, tree lock + journal (median of %d)", concurrency, rounds)
	r.Note = fmt.Sprintf("journal: %.2fs of cairn's %.2fs (%.1f%%)", journal, total, 100*journal/total)
	cr := NewResult(fmt.Sprintf("rename copy rate against the store's best CopyObject rate, %d objects on %s", objects, safetext.URL(opts.StoreURL)),
		"copies/s", bestRate, median(copyRates))
	cr.BaselineDesc = fmt.Sprintf("bare CopyObject of every object, at the best of %v in flight (median of %d rounds)", ceilings, rounds)
	cr.CairnDesc = fmt.Sprintf("cairn fs mv copy phase, %d in flight (median of %d rounds)", concurrency, rounds)
	cr.BaselineP99, cr.CairnP99 = ceilingLat.Percentile(99), copies.Percentile(99)
	cr.Note = fmt.Sprintf("p50 of a copy: ceiling %s, cairn %s; whole rename %.0f objects/s = %.0f%% of the ceiling "+
		"(copy phase %.1f%%, delete phase %.1f%%, the rest %.1f%% of its time; journal requests, in all three, %.1f%%); cairn's requests per object: %s; "+
		"cairn's copies/s by round: %s; ceiling copies/s by round: %s; short sweep of %d copies, copies/s by in flight, by round: %s",
		ceilingLat.Percentile(50).Round(time.Microsecond), copies.Percentile(50).Round(time.Microsecond),
		whole, 100*whole/bestRate, 100*copyPhase/total, 100*deletePhase/total,
		100*(total-copyPhase-deletePhase)/total, 100*journal/total,
		perObject(requests, rounds*objects), joinRates(copyRates), strings.Join(fullDesc, ", "), ceilingObjects, strings.Join(ceilingRates, "; "))
	results := []Result{r, cr}
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

// renameRun is one of cairn's renames.
type renameRun struct {
	res  folder.Result
	took time.Duration
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func joinRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, "/")
}

// copyRun is one ceiling measurement: bare copies at one concurrency.
type copyRun struct {
	concurrency int
	took        time.Duration
	latencies   Latencies
}

func (r copyRun) rate() float64 { return float64(len(r.latencies)) / r.took.Seconds() }

// copyObjects copies from+key to to+key for every key, concurrency at a
// time, with nothing but the copy requests, and times them; then it deletes
// the copies (untimed).
func copyObjects(ctx context.Context, s *objstore.Store, keys []string, from, to string, concurrency int) (copyRun, error) {
	run := copyRun{concurrency: concurrency, latencies: make(Latencies, len(keys))}
	start := time.Now()
	err := ForEach(ctx, len(keys), concurrency, func(i int) error {
		t0 := time.Now()
		_, err := s.Copy(ctx, from+keys[i], to+keys[i], objstore.Condition{})
		run.latencies[i] = time.Since(t0)
		return err
	})
	run.took = time.Since(start)
	if err != nil {
		return run, err
	}
	dsts := make([]string, len(keys))
	for i, k := range keys {
		dsts[i] = to + k
	}
	if failed, err := s.DeleteMany(ctx, dsts, 32); err != nil || len(failed) > 0 {
		return run, fmt.Errorf("removing the ceiling's copies: %v %v", err, failed)
	}
	return run, nil
}

// perObject formats request counts per object, e.g. "copy 1.00, list 0.001".
func perObject(counts map[string]int, objects int) string {
	ops := make([]string, 0, len(counts))
	for op := range counts {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	var parts []string
	total := 0
	for _, op := range ops {
		total += counts[op]
		parts = append(parts, fmt.Sprintf("%s %.3g", op, float64(counts[op])/float64(objects)))
	}
	return fmt.Sprintf("%.3g (%s)", float64(total)/float64(objects), strings.Join(parts, ", "))
}

// counted wraps a backend, counting its requests by operation and timing its
// copies while timing is on.
type counted struct {
	objstore.Backend
	mu     sync.Mutex
	counts map[string]int
	copies Latencies
	timing bool
}

// countedBatch is counted over a backend that deletes in batches, which it
// keeps doing.
type countedBatch struct {
	*counted
	bd objstore.BatchDeleter
}

func newCounted(b objstore.Backend) (*counted, objstore.Backend) {
	c := &counted{Backend: b, counts: map[string]int{}}
	if bd, ok := b.(objstore.BatchDeleter); ok {
		return c, countedBatch{counted: c, bd: bd}
	}
	return c, c
}

func (c *counted) count(op string) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
}

type countedState struct {
	counts map[string]int
	copies int
}

// snapshot returns the counts so far and turns copy timing on or off.
func (c *counted) snapshot(timing bool) countedState {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timing = timing
	return countedState{counts: maps.Clone(c.counts), copies: len(c.copies)}
}

// since returns the requests sent and the copies timed since before, and
// turns timing off.
func (c *counted) since(before countedState) (map[string]int, Latencies) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timing = false
	out := map[string]int{}
	for op, n := range c.counts {
		if d := n - before.counts[op]; d > 0 {
			out[op] = d
		}
	}
	return out, slices.Clone(c.copies[before.copies:])
}

func (c *counted) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	c.count("get")
	return c.Backend.Get(ctx, key)
}

func (c *counted) Head(ctx context.Context, key string) (objstore.Info, error) {
	c.count("head")
	return c.Backend.Head(ctx, key)
}

func (c *counted) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	c.count("put")
	return c.Backend.Put(ctx, key, body, size, opts)
}

func (c *counted) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	c.count("delete")
	return c.Backend.Delete(ctx, key, cond)
}

func (c *counted) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	c.count("list")
	return c.Backend.List(ctx, prefix, cursor, opts)
}

func (c *counted) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	t0 := time.Now()
	info, err := c.Backend.Copy(ctx, src, dst, cond)
	d := time.Since(t0)
	c.mu.Lock()
	c.counts["copy"]++
	if c.timing {
		c.copies = append(c.copies, d)
	}
	c.mu.Unlock()
	return info, err
}

func (c countedBatch) DeleteBatch(ctx context.Context, keys []string) (map[string]error, error) {
	// One request per 1,000 keys, as S3's DeleteObjects takes them.
	c.mu.Lock()
	c.counts["delete_batch"] += (len(keys) + 999) / 1000
	c.mu.Unlock()
	return c.bd.DeleteBatch(ctx, keys)
}
