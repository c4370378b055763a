package folder_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// stuckWait bounds how long a test store holds a request back waiting for
// another to start: only a test that would otherwise hang ever waits it out.
const stuckWait = 20 * time.Second

// holdFirstCopy holds the copy of one key back until a copy of a key from a
// later manifest chunk has started.
type holdFirstCopy struct {
	objstore.Backend
	first   string
	later   map[string]bool
	started chan struct{}
	once    sync.Once
	waited  atomic.Bool // the held copy was released by the deadline
}

func (h *holdFirstCopy) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	if h.later[src] {
		h.once.Do(func() { close(h.started) })
	}
	if src == h.first {
		select {
		case <-h.started:
		case <-time.After(stuckWait):
			h.waited.Store(true)
		case <-ctx.Done():
		}
	}
	return h.Backend.Copy(ctx, src, dst, cond)
}

// One slow copy does not hold the rename back: copies of later manifest
// chunks start while it is in flight (the workers do not drain at every
// chunk). Against the old per-chunk pool, the held copy waits out stuckWait
// and the test fails.
func TestCopiesRunAcrossChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := mem.Open()
	want := fill(t, inner, "src/", 7) // 42 objects: 5 chunks of 10
	all, err := inner.ListAll(ctx, "src/", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &holdFirstCopy{Backend: inner.Backend(), first: all[0].Key, later: map[string]bool{}, started: make(chan struct{})}
	for _, info := range all[30:] {
		h.later[info.Key] = true
	}
	s := objstore.New(h, nil)
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}, Concurrency: 4, ChunkSize: 10})
	if _, err := ops.Rename(ctx, "src/", "dst/", false); err != nil {
		t.Fatal(err)
	}
	if h.waited.Load() {
		t.Errorf("the copy of %s was held until the deadline: no copy of the last chunks started while it was in flight", h.first)
	}
	if got := contents(t, s, "dst/"); !equal(got, want) {
		t.Errorf("dst holds %d objects, want %d", len(got), len(want))
	}
	if left := countKeys(t, s, "src/"); left != 0 {
		t.Errorf("%d sources left", left)
	}
	noJournal(t, s)
}

// batchStore deletes in batches (as S3's DeleteObjects) and does not enforce
// conditional DELETE (as MinIO): a rename's delete phase lists and batches
// there. It records the batches and holds the first back until a second is
// in flight.
type batchStore struct {
	objstore.Backend
	mu       sync.Mutex
	sizes    []int
	inFlight int
	most     int
	second   chan struct{}
	once     sync.Once
	waited   atomic.Bool
}

func (b *batchStore) Capabilities() (objstore.Capabilities, bool) {
	c, ok := b.Backend.Capabilities()
	c.DeleteIfMatch = false
	return c, ok
}

func (b *batchStore) DeleteBatch(ctx context.Context, keys []string) (map[string]error, error) {
	if len(keys) == 0 || !strings.HasPrefix(keys[0], "src/") {
		return b.deleteAll(ctx, keys) // the journal's removal
	}
	b.mu.Lock()
	b.sizes = append(b.sizes, len(keys))
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	first := len(b.sizes) == 1
	if b.inFlight > 1 {
		b.once.Do(func() { close(b.second) })
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	if first {
		select {
		case <-b.second:
		case <-time.After(stuckWait):
			b.waited.Store(true)
		case <-ctx.Done():
		}
	}
	return b.deleteAll(ctx, keys)
}

func (b *batchStore) deleteAll(ctx context.Context, keys []string) (map[string]error, error) {
	failed := map[string]error{}
	for _, k := range keys {
		if err := b.Delete(ctx, k, objstore.Condition{}); err != nil {
			failed[k] = err
		}
	}
	return failed, nil
}

// On a store without conditional DELETE the sources go in batch requests
// of at most 100 keys, several at once. (The old delete phase sent one
// request per 1,000-entry chunk, one at a time: 1 batch of 252 here.)
func TestDeletesInConcurrentBatches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := mem.Open()
	want := fill(t, inner, "src/", 42) // 252 objects, one chunk
	b := &batchStore{Backend: inner.Backend(), second: make(chan struct{})}
	s := objstore.New(b, nil)
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}, Concurrency: 4})
	res, err := ops.Rename(ctx, "src/", "dst/", false)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	sizes, most := slices.Clone(b.sizes), b.most
	b.mu.Unlock()
	sum := 0
	for _, n := range sizes {
		sum += n
		if n > 100 {
			t.Errorf("a batch of %d keys, want at most 100 (batches %v)", n, sizes)
		}
	}
	if sum != len(want) || most < 2 || b.waited.Load() {
		t.Errorf("batches %v (%d keys, want %d), at most %d in flight (want several)", sizes, sum, len(want), most)
	}
	if res.DeleteSeconds <= 0 || res.CopySeconds <= 0 {
		t.Errorf("phase times: %+v", res)
	}
	if got := contents(t, s, "dst/"); !equal(got, want) {
		t.Errorf("dst holds %d objects, want %d", len(got), len(want))
	}
	if left := countKeys(t, s, "src/"); left != 0 {
		t.Errorf("%d sources left", left)
	}
	noJournal(t, s)
}

// gone412 answers a conditional DELETE of a missing key with 412, as some
// servers do (AWS and versitygw answer 404).
type gone412 struct{ objstore.Backend }

func (g gone412) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	err := g.Backend.Delete(ctx, key, cond)
	if cond.Match != "" && errors.Is(err, objstore.ErrNotFound) {
		return objstore.ErrPreconditionFailed
	}
	return err
}

// A source already gone when the delete phase reaches it (a roll-forward,
// or another deleter) is not a conflict, even where the server answers the
// conditional DELETE with 412; a source that changed still is.
func TestDeleteOfGoneSourceAnswered412(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := mem.Open()
	want := fill(t, inner, "src/", 2)
	s := objstore.New(gone412{inner.Backend()}, nil)
	if c, _ := s.Capabilities(ctx); !c.DeleteIfMatch {
		t.Fatal("the memory store should enforce conditional DELETE")
	}
	var once atomic.Bool
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}, Concurrency: 1,
		Progress: func(p folder.Progress) {
			if p.Phase == "delete" && once.CompareAndSwap(false, true) {
				// One source goes, another changes, before the phase reaches them.
				if err := inner.Delete(ctx, "src/1-x", objstore.Condition{}); err != nil {
					t.Error(err)
				}
				if _, err := inner.PutBytes(ctx, "src/1-a.txt", []byte("rogue"), nil); err != nil {
					t.Error(err)
				}
			}
		}})
	_, err := ops.Rename(ctx, "src/", "dst/", false)
	var ce *folder.ConflictError
	if !errors.As(err, &ce) || ce.N != 1 || ce.Keys[0] != "src/1-a.txt" {
		t.Fatalf("rename: %v, want one conflict, on src/1-a.txt (src/1-x was only gone)", err)
	}
	if got := contents(t, s, "dst/"); !equal(got, want) {
		t.Errorf("dst holds %d objects, want %d", len(got), len(want))
	}
}

func countKeys(t *testing.T, s *objstore.Store, prefix string) int {
	t.Helper()
	infos, err := s.ListAll(context.Background(), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}
