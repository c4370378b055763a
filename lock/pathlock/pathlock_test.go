package pathlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	. "github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/pathlock/pathlocktest"
)

var tree = []string{"/", "/a", "/a/b", "/a/c", "/d"}

func requests() []Request { return pathlocktest.Requests(tree) }

var conflict = pathlocktest.Conflict

// oracle checks every pair; it returns the first pair the lock gets wrong.
func oracle(t *testing.T) (Request, Request, bool, bool) {
	t.Helper()
	rs := requests()
	var l Locker
	for _, a := range rs {
		ha, ok, err := l.TryAcquire(a)
		if err != nil || !ok {
			t.Fatalf("acquiring %+v on an empty table: %v %v", a, ok, err)
		}
		for _, b := range rs {
			hb, ok, err := l.TryAcquire(b)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				hb.Release()
			}
			if want := !conflict(a, b); ok != want {
				ha.Release()
				return a, b, ok, want
			}
		}
		ha.Release()
	}
	if n := l.Nodes(); n != 0 {
		t.Fatalf("%d nodes left after releasing everything", n)
	}
	return Request{}, Request{}, false, false
}

func TestExhaustiveOracle(t *testing.T) {
	if a, b, got, want := oracle(t); got != want {
		t.Fatalf("holding %+v, a request %+v was admitted=%v; the lineage rule says %v", a, b, got, want)
	}
	t.Logf("%d requests, %d pairs checked", len(requests()), len(requests())*len(requests()))
}

// The four-mode scheme has no SIX: a node one request reads and writes below
// gets S or IX. Either choice fails the oracle, so the test can fail.
func TestFourModesAreNotEnough(t *testing.T) {
	for _, pick := range []Mode{S, IX} {
		restore := UseFourModes(pick)
		a, b, got, want := oracle(t)
		restore()
		if got == want {
			t.Fatalf("with %s instead of SIX the oracle found no wrong answer; it should", pick)
		}
		t.Logf("with %s instead of SIX: holding %+v admits %+v=%v, but the rule says %v", pick, a, b, got, want)
	}
}

func TestModes(t *testing.T) {
	var l Locker
	h, _ := l.Acquire(context.Background(), Request{Read: []string{"/a"}, Write: []string{"/a/b"}})
	defer h.Release()
	want := map[string]Mode{"/": IX, "/a": SIX, "/a/b": X}
	for p, m := range want {
		if h.Modes()[p] != m {
			t.Errorf("%s: %s, want %s", p, h.Modes()[p], m)
		}
	}
}

func TestFIFONoStarvation(t *testing.T) {
	var l Locker
	ctx := context.Background()
	r1, _ := l.Acquire(ctx, Request{Read: []string{"/a"}})
	got := make(chan *Held)
	go func() {
		w, _ := l.Acquire(ctx, Request{Write: []string{"/a"}})
		got <- w
	}()
	for l.Waiting("/a") == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, ok, _ := l.TryAcquire(Request{Read: []string{"/a"}}); ok {
		t.Fatal("a reader overtook a queued writer")
	}
	r1.Release()
	w := <-got
	w.Release()
	if l.Nodes() != 0 {
		t.Fatalf("nodes left: %d", l.Nodes())
	}
}

func TestCancelWithdraws(t *testing.T) {
	var l Locker
	r1, _ := l.Acquire(context.Background(), Request{Read: []string{"/a"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, Request{Write: []string{"/a/x", "/a"}})
		done <- err
	}()
	for l.Waiting("/a") == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	// The withdrawn writer no longer blocks readers.
	r2, ok, _ := l.TryAcquire(Request{Read: []string{"/a/x"}})
	if !ok {
		t.Fatal("a cancelled waiter still blocks")
	}
	r2.Release()
	r1.Release()
	if l.Nodes() != 0 {
		t.Fatalf("nodes left after cancel: %d", l.Nodes())
	}
}

func TestBadPaths(t *testing.T) {
	var l Locker
	for _, p := range []string{"a", "", "/a//b", "/a/../b", "/./a"} {
		if _, err := l.Acquire(context.Background(), Request{Read: []string{p}}); !errors.Is(err, ErrBadPath) {
			t.Errorf("%q: %v", p, err)
		}
	}
}

// Random load with random cancellations: no deadlock (the test finishes), and
// no two conflicting requests are ever held at once.
func TestRandomLoadInvariant(t *testing.T) {
	var l Locker
	var paths []string
	for _, a := range []string{"a", "b", "c"} {
		paths = append(paths, "/"+a)
		for _, b := range []string{"x", "y", "z"} {
			paths = append(paths, "/"+a+"/"+b)
			for _, c := range []string{"1", "2"} {
				paths = append(paths, "/"+a+"/"+b+"/"+c)
			}
		}
	}
	var mu sync.Mutex
	active := map[int]Request{}
	var wg sync.WaitGroup
	const goroutines = 1000
	deadline := time.Now().Add(2 * time.Minute)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 20 {
				var r Request
				for range 1 + rng.IntN(3) {
					p := paths[rng.IntN(len(paths))]
					if rng.IntN(5) == 0 {
						r.Write = append(r.Write, p)
					} else {
						r.Read = append(r.Read, p)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
				h, err := l.Acquire(ctx, r)
				cancel()
				if err != nil {
					continue
				}
				id := g*100 + i
				mu.Lock()
				for other, o := range active {
					if conflict(r, o) {
						mu.Unlock()
						t.Errorf("conflicting requests held together: %+v and %+v (%d)", r, o, other)
						h.Release()
						return
					}
				}
				active[id] = r
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				mu.Lock()
				delete(active, id)
				mu.Unlock()
				h.Release()
			}
		})
	}
	wg.Wait()
	if time.Now().After(deadline) {
		t.Fatal("random load took too long")
	}
	if n := l.Nodes(); n != 0 {
		t.Fatalf("%d nodes left after the load", n)
	}
}

func ExampleLocker() {
	var l Locker
	ctx := context.Background()
	// Rename /in/batch-7 to /done/batch-7: write both.
	mv, _ := l.Acquire(ctx, Request{Write: []string{"/in/batch-7", "/done/batch-7"}})
	// A snapshot of /in/batch-8 can run alongside: no lineage in common.
	snap, ok, _ := l.TryAcquire(Request{Read: []string{"/in/batch-8"}})
	fmt.Println("snapshot of a sibling alongside the rename:", ok)
	snap.Release()
	// A snapshot of all of /in cannot: the rename writes inside it.
	_, ok, _ = l.TryAcquire(Request{Read: []string{"/in"}})
	fmt.Println("snapshot of /in during the rename:", ok)
	mv.Release()
	// Output:
	// snapshot of a sibling alongside the rename: true
	// snapshot of /in during the rename: false
}
