package docstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// waitQueued waits until key's queue holds n updates with no committer
// running.
func waitQueued(t *testing.T, d *docstore.Store, key string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if q, running := docstore.Queued(d, key); q == n && !running {
			return
		}
		if time.Now().After(deadline) {
			q, running := docstore.Queued(d, key)
			t.Fatalf("queue of %q: %d updates, committer running %v; want %d waiting", key, q, running, n)
		}
	}
}

// A lingering update waits, with no write in flight, for an urgent update of
// the same document and is written with it: one conditional write for both.
// Alone, it is written when its linger runs out; cancelled while it waits,
// it is never applied; close to its deadline it is urgent.
func TestLingerRidesWithUrgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := docstore.New(objstore.New(mem.OpenBackend(""), nil), &docstore.Options{Strategy: docstore.CAS})
	c := docstore.Typed[int](d)
	add := func(n int) func(v *int, _ docstore.Meta) error {
		return func(v *int, _ docstore.Meta) error { *v += n; return nil }
	}
	if _, _, err := c.Update(ctx, "n", add(1)); err != nil {
		t.Fatal(err)
	}

	writes := d.Stats().Writes
	type res struct {
		v   int
		err error
	}
	lingered := make(chan res, 1)
	go func() {
		v, _, err := c.Update(docstore.WithLinger(ctx, time.Hour), "n", add(10))
		lingered <- res{v, err}
	}()
	waitQueued(t, d, "n", 1)
	if got := d.Stats().Writes - writes; got != 0 {
		t.Fatalf("a lingering update was written with nothing urgent to ride with: %d writes", got)
	}
	v, _, err := c.Update(ctx, "n", add(100))
	if err != nil || v != 111 {
		t.Fatalf("urgent update: %d, %v; want 111 (after the lingering one, queued first)", v, err)
	}
	if r := <-lingered; r.err != nil || r.v != 11 {
		t.Fatalf("lingering update: %d, %v; want 11", r.v, r.err)
	}
	if got := d.Stats().Writes - writes; got != 1 {
		t.Fatalf("an urgent and a lingering update took %d writes, want 1", got)
	}

	// Alone: written once its linger runs out.
	if v, _, err := c.Update(docstore.WithLinger(ctx, 20*time.Millisecond), "n", add(1000)); err != nil || v != 1111 {
		t.Fatalf("lingering update alone: %d, %v; want 1111", v, err)
	}

	// Cancelled while it waits: not applied, and nothing stays queued.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Update(docstore.WithLinger(cctx, time.Hour), "n", add(10000))
		done <- err
	}()
	waitQueued(t, d, "n", 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled lingering update: %v", err)
	}
	if q, running := docstore.Queued(d, "n"); q != 0 || running {
		t.Fatalf("after the cancelled update: %d queued, committer running %v", q, running)
	}
	if v, _, err := c.Load(ctx, "n"); err != nil || v != 1111 {
		t.Fatalf("document after a cancelled lingering update: %d, %v; want 1111", v, err)
	}

	// A deadline less than twice the linger away: urgent, written at once.
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if v, _, err := c.Update(docstore.WithLinger(dctx, time.Hour), "n", add(1)); err != nil || v != 1112 {
		t.Fatalf("lingering update near its deadline: %d, %v; want 1112", v, err)
	}
}
