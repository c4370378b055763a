package treelock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testmain"
	"github.com/cairn-s3/cairn/lock/pathlock/pathlocktest"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) { testmain.Run(m) }

var tree = []string{"/", "/a", "/a/b", "/c"}

func requests() []treelock.Request { return pathlocktest.Requests(tree) }

var conflict = pathlocktest.Conflict

// Every pair of requests from two processes' worth of sessions: admitted
// together exactly when the lineage rule allows.
func TestExhaustiveOracle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.New()
	a, b := treelock.New(s, nil), treelock.New(s, nil)
	defer a.Close()
	defer b.Close()
	rs := requests()
	for _, x := range rs {
		hx, err := a.TryAcquire(ctx, x)
		if err != nil {
			t.Fatalf("acquire %+v on a free tree: %v", x, err)
		}
		for _, y := range rs {
			hy, err := b.TryAcquire(ctx, y)
			if err != nil && !errors.Is(err, treelock.ErrNotAcquired) {
				t.Fatal(err)
			}
			if err == nil {
				hy.Release(ctx)
			}
			if got, want := err == nil, !conflict(x, y); got != want {
				t.Fatalf("holding %+v, %+v admitted=%v; the lineage rule says %v", x, y, got, want)
			}
		}
		hx.Release(ctx)
	}
	t.Logf("%d pairs", len(rs)*len(rs))
}

// A crashed process's locks are released after one TTL of silence.
func TestCrashedSessionReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.New()
	const ttl = 300 * time.Millisecond
	a := treelock.New(s, &treelock.Options{TTL: ttl})
	if _, err := a.Acquire(ctx, treelock.Request{Write: []string{"/jobs/x"}}); err != nil {
		t.Fatal(err)
	}
	a.Close() // stops renewing without releasing: a crash
	b := treelock.New(s, &treelock.Options{TTL: ttl})
	defer b.Close()
	if _, err := b.TryAcquire(ctx, treelock.Request{Read: []string{"/jobs"}}); !errors.Is(err, treelock.ErrNotAcquired) {
		t.Fatalf("before the TTL: %v, want ErrNotAcquired", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*ttl)
	defer cancel()
	start := time.Now()
	h, err := b.Acquire(wctx, treelock.Request{Read: []string{"/jobs"}})
	if err != nil {
		t.Fatalf("after the crashed session's TTL: %v", err)
	}
	if time.Since(start) < ttl/2 {
		t.Fatalf("acquired after %v: the dead session was pruned too early", time.Since(start))
	}
	h.Release(ctx)
}

// Independent sessions with random requests over a small tree: everyone
// finishes (no deadlock) and conflicting requests are never held together.
func TestRandomLoadInvariant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(faulty.New(mem.NewBackend(""), &faulty.Options{Jitter: 300 * time.Microsecond}), nil)
	paths := []string{"/a", "/a/x", "/a/y", "/b", "/b/x", "/b/x/1"}
	var mu sync.Mutex
	active := map[int]treelock.Request{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			m := treelock.New(s, &treelock.Options{TTL: 5 * time.Second, Poll: 2 * time.Millisecond})
			defer m.Close()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for i := range 15 {
				var r treelock.Request
				for range 1 + rng.IntN(2) {
					p := paths[rng.IntN(len(paths))]
					if rng.IntN(3) == 0 {
						r.Write = append(r.Write, p)
					} else {
						r.Read = append(r.Read, p)
					}
				}
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				h, err := m.Acquire(wctx, r)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				id := g*100 + i
				mu.Lock()
				for _, o := range active {
					if conflict(r, o) {
						t.Errorf("conflicting requests held together: %+v and %+v", r, o)
					}
				}
				active[id] = r
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				delete(active, id)
				mu.Unlock()
				h.Release(ctx)
			}
		})
	}
	wg.Wait()
}
