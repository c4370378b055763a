package docstore

import (
	"context"
)

// batcher queues the updates of one key for its committer goroutine.
type batcher struct {
	queue   []*request
	running bool
}

// enqueue hands r to the key's committer, starting one if none runs, and waits
// for the result. A request cancelled while still queued is withdrawn (it was
// never applied); once a commit has taken it, its outcome is awaited, since
// the write may land.
func (d *Store) enqueue(ctx context.Context, key string, r *request) ([]byte, Meta, error) {
	d.mu.Lock()
	b := d.batchers[key]
	if b == nil {
		b = &batcher{}
		d.batchers[key] = b
	}
	b.queue = append(b.queue, r)
	if !b.running {
		b.running = true
		go d.run(key, b)
	}
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
			d.mu.Unlock()
			return nil, Meta{}, ctx.Err()
		}
	}
	d.mu.Unlock()
	res := <-r.done
	return res.value, res.meta, res.err
}

// run commits batches for key until its queue is empty, then exits (and the
// key's batcher is dropped, so idle keys cost no goroutine). The document as
// this Store last wrote it outlives the batcher (see written): the next batch
// compares-and-swaps against it without reading first.
func (d *Store) run(key string, b *batcher) {
	d.mu.Lock()
	cached := d.written[key] // what the last batch wrote
	d.mu.Unlock()
	for {
		d.mu.Lock()
		if cached != nil {
			d.remember(key, cached)
		} else {
			delete(d.written, key)
		}
		if len(b.queue) == 0 {
			b.running = false
			delete(d.batchers, key)
			d.mu.Unlock()
			return
		}
		n := min(len(b.queue), d.opts.MaxBatch)
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		d.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), d.opts.CommitTimeout)
		cached = d.commit(ctx, key, batch, cached)
		cancel()
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
