package docstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-s3/cairn/internal/linger"
	"github.com/cairn-s3/cairn/objstore"
)

// batcher queues the updates of one key for its committer goroutine.
type batcher struct {
	queue   []*request
	running bool
	// timer starts a committer for lingering requests whose linger ran out
	// while no urgent one came (nil: none armed).
	timer *time.Timer
	// wake tells a gathering committer that an update was queued.
	wake chan struct{}
}

// WithLinger returns a context that marks the updates made with it as not
// urgent: their caller can wait up to d longer for the answer. While no write
// of the document is in flight or due, such an update waits, up to d, for an
// urgent update of the same document and is written with it (one conditional
// write for both); a write in flight is followed by the urgent updates queued
// behind it, with the lingering ones. An update whose context's deadline is
// less than 2d away is urgent. d ≤ 0 marks nothing.
//
// A stream of low-priority updates (completions, in the object-store ledger)
// so rides in the writes of a stream of urgent ones (records) instead of
// alternating with them, write for write.
//
// It is the mark ledger.WithLinger sets: a ledger call made with either
// passes it on to the document updates it makes.
func WithLinger(ctx context.Context, d time.Duration) context.Context {
	return linger.With(ctx, d)
}

// urgent tells whether a committer should run for the queue now: it holds an
// urgent request, or one whose linger ran out. Otherwise it returns when the
// earliest linger runs out.
func urgent(queue []*request, now time.Time) (bool, time.Time) {
	var first time.Time
	for _, r := range queue {
		if !r.until.After(now) {
			return true, time.Time{}
		}
		if first.IsZero() || r.until.Before(first) {
			first = r.until
		}
	}
	return len(queue) == 0, first
}

// startLocked starts key's committer if none runs and one is due now, else
// arms b's timer for the earliest linger; d.mu is held.
func (d *Store) startLocked(key string, b *batcher) {
	if b.running || len(b.queue) == 0 {
		return
	}
	if d.closed {
		for _, r := range b.queue {
			r.done <- result{err: fmt.Errorf("%q: %w", key, ErrClosed)}
		}
		b.queue = nil
		d.drop(key, b)
		return
	}
	now, at := urgent(b.queue, time.Now())
	if now {
		if b.timer != nil {
			b.timer.Stop()
			b.timer = nil
		}
		b.running = true
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.run(key, b)
		}()
		return
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(time.Until(at), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.batchers[key] == b && b.timer == t { // not replaced meanwhile
			b.timer = nil
			d.startLocked(key, b)
		}
	})
	b.timer = t
}

// enqueue hands r to the key's committer, starting one if none runs, and waits
// for the result. A request cancelled while still queued is withdrawn (it was
// never applied); one whose deadline passes once a commit has taken it returns
// at once with ErrAmbiguous (its write may still land, as after a lost
// response): a caller is never held past its own deadline by a commit that
// hangs (a blackholed connection), which runs on, detached, until
// Options.CommitTimeout or Close.
func (d *Store) enqueue(ctx context.Context, key string, r *request) ([]byte, Meta, error) {
	d.mu.Lock()
	b := d.batchers[key]
	if b == nil {
		b = &batcher{wake: make(chan struct{}, 1)}
		d.batchers[key] = b
	}
	if l := linger.Of(ctx); l > 0 {
		r.until = time.Now().Add(l)
	}
	b.queue = append(b.queue, r)
	select {
	case b.wake <- struct{}{}:
	default:
	}
	d.startLocked(key, b)
	d.mu.Unlock()
	select {
	case res := <-r.done:
		return res.value, res.meta, res.err
	case <-ctx.Done():
	}
	d.mu.Lock()
	for i, q := range b.queue {
		if q == r {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			if len(b.queue) == 0 && !b.running {
				d.drop(key, b)
			}
			d.mu.Unlock()
			return nil, Meta{}, ctx.Err()
		}
	}
	d.mu.Unlock()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Cancelled, not out of time (a handle closing, a command
		// interrupted): the commit that took the write decides, and its
		// owner learns how (Close waits for what it started).
		res := <-r.done
		return res.value, res.meta, res.err
	}
	select {
	case res := <-r.done:
		return res.value, res.meta, res.err
	default:
		return nil, Meta{}, fmt.Errorf("docstore: %q: the caller gave up while its write was being committed; it may still land: %w (%w)",
			key, objstore.ErrAmbiguous, context.Cause(ctx))
	}
}

// run commits batches for key until its queue is empty, then exits (and the
// key's batcher is dropped, so idle keys cost no goroutine). The document as
// this Store last wrote it outlives the batcher (see written): the next batch
// compares-and-swaps against it without reading first.
func (d *Store) run(key string, b *batcher) {
	d.mu.Lock()
	cached := d.written[key] // what the last batch wrote
	d.mu.Unlock()
	var answered int       // the last batch's size
	var took time.Duration // and how long its commit took
	for {
		d.mu.Lock()
		if cached != nil {
			d.remember(key, cached)
		} else {
			delete(d.written, key)
		}
		if answered > 1 {
			d.gatherLocked(b, answered, took)
		}
		if now, _ := urgent(b.queue, time.Now()); len(b.queue) == 0 || !now {
			// Nothing queued but lingering updates: the next urgent update
			// (or the first linger to run out) starts a committer again.
			b.running = false
			if len(b.queue) == 0 {
				d.drop(key, b)
			} else {
				d.startLocked(key, b)
			}
			d.mu.Unlock()
			return
		}
		n := min(len(b.queue), d.opts.MaxBatch)
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		// Drain a wakeup left by updates queued before now: the gather
		// after this commit waits for those queued during it.
		select {
		case <-b.wake:
		default:
		}
		d.mu.Unlock()
		ctx, cancel := context.WithTimeout(d.base, d.opts.CommitTimeout)
		t0 := time.Now()
		cached = d.commit(ctx, key, batch, cached)
		took = time.Since(t0)
		cancel()
		answered = urgentCount(batch)
	}
}

// urgentCount is how many of reqs are urgent (not lingering): the callers
// a gather waits for. A lingering caller (a ledger's completion) is not
// expected back soon, and a queued one does not count as one back.
func urgentCount(reqs []*request) int {
	n := 0
	for _, r := range reqs {
		if r.until.IsZero() {
			n++
		}
	}
	return n
}

// maxGather bounds how long a committer waits for the callers of its last
// batch to come back (see gatherLocked).
const maxGather = 2 * time.Millisecond

// gatherLocked waits, while fewer than want updates are queued, for more:
// at most a quarter of the last commit's duration (took), and never over
// maxGather. Writers that update a document in a loop queue their next
// update microseconds after their answer; a committer that took the first
// of them alone would leave the others a whole write behind it, so under
// steady contention batches would alternate between one update and the
// rest. The wait costs a committed update at most a quarter of a write's
// time more, and is taken only after a batch of more than one urgent
// update; only urgent updates count (see urgentCount), and a queue that
// fills a batch ends it. d.mu is held, released while waiting.
func (d *Store) gatherLocked(b *batcher, want int, took time.Duration) {
	want = min(want, d.opts.MaxBatch)
	deadline := time.Now().Add(min(took/4, maxGather))
	for urgentCount(b.queue) < want && !d.closed {
		wait := time.Until(deadline)
		if wait <= 0 {
			return
		}
		d.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-b.wake:
		case <-t.C:
		case <-d.base.Done():
		}
		t.Stop()
		d.mu.Lock()
	}
}

// maxWritten bounds how many documents' last written states a Store keeps
// (the bodies of the most recently written ones; a document not kept costs
// its next write one read).
const maxWritten = 256

// remember keeps c as the state key was last written in; d.mu is held.
func (d *Store) remember(key string, c *current) {
	if _, ok := d.written[key]; !ok && len(d.written) >= maxWritten {
		for k := range d.written { // evict one at random
			delete(d.written, k)
			break
		}
	}
	d.written[key] = c
}

// drop forgets key's idle batcher; d.mu is held.
func (d *Store) drop(key string, b *batcher) {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	delete(d.batchers, key)
}
