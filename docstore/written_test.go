package docstore_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// countGets counts the reads that reach the store.
type countGets struct {
	objstore.Backend
	gets atomic.Int64
}

func (c *countGets) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	c.gets.Add(1)
	return c.Backend.Get(ctx, key)
}

// Updates one after the other (each group commit ends before the next
// starts) write against the state the Store last wrote: no read first. A
// stale one (another writer came between) costs a 412 and a read, and the
// update is applied to the newer state; an update that changes nothing is
// checked against a read, never written blind.
func TestUpdatesAfterIdleSkipTheRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	back := &countGets{Backend: mem.OpenBackend("")}
	s := objstore.New(back, nil)
	d := docstore.New(s, &docstore.Options{Strategy: docstore.CAS})
	c := docstore.Typed[int](d)
	inc := func(v *int, _ docstore.Meta) error { *v++; return nil }
	if _, _, err := c.Update(ctx, "n", inc); err != nil {
		t.Fatal(err)
	}
	before := back.gets.Load()
	for range 10 {
		if _, _, err := c.Update(ctx, "n", inc); err != nil {
			t.Fatal(err)
		}
	}
	if got := back.gets.Load() - before; got != 0 {
		t.Errorf("10 updates after this Store's own write read the document %d times, want 0", got)
	}

	// Another writer (a second Store: another process) moves the document on.
	other := docstore.Typed[int](docstore.New(s, &docstore.Options{Strategy: docstore.CAS}))
	if _, _, err := other.Update(ctx, "n", func(v *int, _ docstore.Meta) error { *v += 100; return nil }); err != nil {
		t.Fatal(err)
	}
	redrives := d.Stats().Redrives
	v, _, err := c.Update(ctx, "n", inc)
	if err != nil || v != 112 {
		t.Fatalf("update after another writer's: %d, %v; want 112", v, err)
	}
	if d.Stats().Redrives != redrives+1 {
		t.Errorf("redrives %d → %d: a stale cached state must cost exactly one 412", redrives, d.Stats().Redrives)
	}

	// A no-op after another write is linearized at a read, not written.
	if _, _, err := other.Update(ctx, "n", inc); err != nil {
		t.Fatal(err)
	}
	writes := d.Stats().Writes
	v, _, err = c.Update(ctx, "n", func(*int, docstore.Meta) error { return nil })
	if err != nil || v != 113 {
		t.Fatalf("no-op update: %d, %v; want 113 (the other writer's value)", v, err)
	}
	if d.Stats().Writes != writes {
		t.Errorf("a no-op update wrote %d times", d.Stats().Writes-writes)
	}
}
