package treelock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
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
	s := mem.Open()
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
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		const ttl = 300 * time.Millisecond
		a := treelock.New(s, &treelock.Options{TTL: ttl})
		if _, err := a.Acquire(ctx, treelock.Request{Write: []string{"/jobs/x"}}); err != nil {
			t.Fatal(err)
		}
		a.Crash() // stops renewing without releasing: a crash
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
		// Time in the bubble passes only while everyone waits: b watched the
		// session from its TryAcquire on, so a whole TTL, and at most one
		// poll (TTL/30) more.
		if waited := time.Since(start); waited < ttl || waited > ttl+ttl/30 {
			t.Fatalf("acquired after %v, want a whole TTL (%v) of watching the crashed session", waited, ttl)
		}
		h.Release(ctx)
	})
}

// Independent sessions with random requests over a small tree: everyone
// finishes (no deadlock) and conflicting requests are never held together.
func TestRandomLoadInvariant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(faulty.New(mem.OpenBackend(""), &faulty.Options{Jitter: 300 * time.Microsecond}), nil)
	paths := []string{"/a", "/a/x", "/a/y", "/b", "/b/x", "/b/x/1"}
	holds := newHolds()
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
				holds.hold(t, ctx, g*100+i, r, h)
			}
		})
	}
	wg.Wait()
}

// A request that gave up while its writes to a node were landing late leaves
// no entry behind: its withdrawal moves the node's ETag on (creating the node
// if absent), so the late write cannot land after it, and a withdrawal that
// could not be confirmed is retried while the session lives. Before, the
// withdrawal of an absent node did nothing, the late create landed with our
// entry, and the node stayed locked for as long as the process lived.
func TestLateLandingStepLeavesNoEntry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var late atomic.Bool
		fb := faulty.New(mem.OpenBackend(""), &faulty.Options{LateDelay: 150 * time.Millisecond, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
			if late.Load() && op == faulty.OpPut && strings.Contains(key, "/paths/") {
				return faulty.LateApply, 0
			}
			return faulty.None, 0
		}})
		s := objstore.New(fb, nil)
		const ttl = 600 * time.Millisecond
		a := treelock.New(s, &treelock.Options{TTL: ttl, Poll: 5 * time.Millisecond})
		defer a.Close()
		b := treelock.New(s, &treelock.Options{TTL: ttl, Poll: 5 * time.Millisecond})
		defer b.Close()
		r := treelock.Request{Write: []string{"/"}} // X on the one node
		late.Store(true)
		actx, cancel := context.WithTimeout(ctx, 40*time.Millisecond)
		_, err := a.Acquire(actx, r)
		cancel()
		late.Store(false)
		if err == nil {
			t.Fatal("acquired although every node write was late")
		}
		fb.Wait() // every late write has landed or failed its condition
		// a is alive and renewing: only a clean withdrawal frees the node.
		wctx, cancel := context.WithTimeout(ctx, 3*ttl)
		defer cancel()
		h, err := b.Acquire(wctx, r)
		if err != nil {
			t.Fatalf("a request that gave up left its entry in the node (a's session is alive): %v", err)
		}
		h.Release(ctx)
		if st := fb.Stats(); st.LateLanded == 0 {
			t.Logf("no late write landed (stats %+v)", st)
		}
	})
}

// Random load with late-landing, lost requests and lost responses: everyone
// finishes (no orphan entry blocks a node), and conflicting requests are never
// held together.
func TestRandomLoadLateLanding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fb := faulty.New(mem.OpenBackend(""), &faulty.Options{Seed: 15, Jitter: 300 * time.Microsecond,
		LateApplyRate: 0.05, LostRequestRate: 0.05, LostResponseRate: 0.05, LateJitter: 30 * time.Millisecond})
	s := objstore.New(fb, nil)
	paths := []string{"/a", "/a/x", "/b", "/b/x"}
	holds := newHolds()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			m := treelock.New(s, &treelock.Options{TTL: 2 * time.Second, Poll: 2 * time.Millisecond})
			defer m.Close()
			rng := rand.New(rand.NewPCG(uint64(g), 15))
			for i := range 12 {
				var r treelock.Request
				p := paths[rng.IntN(len(paths))]
				if rng.IntN(2) == 0 {
					r.Write = append(r.Write, p)
				} else {
					r.Read = append(r.Read, p)
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				h, err := m.Acquire(wctx, r)
				cancel()
				if err != nil {
					if wctx.Err() != nil {
						t.Errorf("acquire %+v: %v (an orphan entry?)", r, err)
						return
					}
					failures.Add(1) // a fault the retries did not absorb: allowed
					continue
				}
				holds.hold(t, ctx, g*100+i, r, h)
			}
		})
	}
	wg.Wait()
	fb.Wait()
	// Afterwards every path is free again for a fresh session.
	fb.SetOptions(faulty.Options{})
	m := treelock.New(s, &treelock.Options{TTL: 2 * time.Second, Poll: 2 * time.Millisecond})
	defer m.Close()
	for _, p := range paths {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := m.Acquire(wctx, treelock.Request{Write: []string{p}})
		cancel()
		if err != nil {
			t.Fatalf("%s still locked after every request finished: %v", p, err)
		}
		h.Release(ctx)
	}
	t.Logf("faults %+v, acquisitions failed by faults: %d", fb.Stats(), failures.Load())
}

// checkTokens: a write excludes every other grant on its path, so the tokens
// of its path's writers grow in the order they hold it — across the cleanups
// that releases do in between.
// holds is what the random-load tests' requesters hold at once.
type holds struct {
	mu        sync.Mutex
	active    map[int]treelock.Request
	lastToken map[string]int64
}

func newHolds() *holds {
	return &holds{active: map[int]treelock.Request{}, lastToken: map[string]int64{}}
}

// hold checks that r conflicts with nothing held and that its tokens grew,
// holds it for a moment, and releases it.
func (hs *holds) hold(t *testing.T, ctx context.Context, id int, r treelock.Request, h *treelock.Held) {
	hs.mu.Lock()
	for _, o := range hs.active {
		if conflict(r, o) {
			t.Errorf("conflicting requests held together: %+v and %+v", r, o)
		}
	}
	checkTokens(t, h, r, hs.lastToken)
	hs.active[id] = r
	hs.mu.Unlock()
	time.Sleep(time.Millisecond)
	hs.mu.Lock()
	delete(hs.active, id)
	hs.mu.Unlock()
	h.Release(ctx)
}

func checkTokens(t *testing.T, h *treelock.Held, r treelock.Request, last map[string]int64) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range r.Write {
		if seen[p] {
			continue
		}
		seen[p] = true
		tok := h.Token(p)
		if tok <= last[p] {
			t.Errorf("a writer of %s holds token %d after a writer with %d", p, tok, last[p])
		}
		last[p] = tok
	}
}
