package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// An acquisition whose write lands after TryAcquire gave up leaves a lease
// held by nobody: not by its own manager (which was told it failed and cannot
// take it again while it looks held), not by anyone else until one TTL of
// silence has passed; the next holder gets a fresh token.
func TestLateAcquireHeldByNobody(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var late atomic.Bool
		fb := faulty.New(mem.OpenBackend(""), &faulty.Options{LateDelay: 100 * time.Millisecond, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
			if late.Load() && op == faulty.OpPut {
				return faulty.LateApply, 0
			}
			return faulty.None, 0
		}})
		s := objstore.New(fb, nil)
		a := lease.New(s, &lease.Options{TTL: ttl, Holder: "a"})
		b := lease.New(s, &lease.Options{TTL: ttl, Holder: "b"})
		late.Store(true)
		actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := a.TryAcquire(actx, "l")
		cancel()
		late.Store(false)
		if err == nil {
			t.Fatal("acquired although every write was late")
		}
		fb.Wait()
		st, _, err := a.Status(ctx, "l")
		if err != nil || st.Holder != "a" {
			t.Fatalf("the late acquisition did not land (%+v %v): the test needs it to", st, err)
		}
		if _, err := a.TryAcquire(ctx, "l"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("the manager whose acquisition landed late took it again: %v", err)
		}
		if _, err := b.TryAcquire(ctx, "l"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("another holder took a lease that looks held: %v", err)
		}
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 10*ttl)
		defer cancel()
		lb, err := b.Acquire(wctx, "l")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		if waited := time.Since(start); waited < ttl {
			t.Fatalf("took over after %v: before the orphaned lease's TTL", waited)
		}
		if lb.Token() != st.Token+1 {
			t.Fatalf("token %d after the late acquisition's %d", lb.Token(), st.Token)
		}
	})
}

// Holders racing for one lease through late-landing writes, lost requests and
// lost responses (5% each): a holder's lease is never valid while another
// holds it, tokens grow strictly with every acquisition, and afterwards the
// lease can be taken again with a token above all of them.
func TestContentionLateLanding(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed=", seed+1), func(t *testing.T) {
			t.Parallel()
			contention(t, seed+1)
		})
	}
}

// The same race on MinIO, through late-landing writes injected in front of it.
func TestContentionLateLandingMinIO(t *testing.T) {
	t.Parallel()
	b, _ := testenv.NewBucket(t, testenv.S3(t))
	contentionOn(t, b, 15)
}

func contention(t *testing.T, seed uint64) { contentionOn(t, mem.OpenBackend(""), seed) }

func contentionOn(t *testing.T, inner objstore.Backend, seed uint64) {
	ctx := context.Background()
	fb := faulty.New(inner, nil)
	s := objstore.New(fb, nil)
	if _, err := s.Capabilities(ctx); err != nil { // probed before the faults start
		t.Fatal(err)
	}
	fb.SetOptions(faulty.Options{Seed: seed, LateApplyRate: 0.05, LostRequestRate: 0.05, LostResponseRate: 0.05,
		LateJitter: 30 * time.Millisecond, Jitter: 200 * time.Microsecond})
	var mu sync.Mutex
	var active *lease.Lease
	var last int64
	var acquired, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			m := lease.New(s, &lease.Options{TTL: ttl, Poll: 5 * time.Millisecond, Holder: fmt.Sprint("h", g)})
			for range 15 {
				actx, cancel := context.WithTimeout(ctx, 20*ttl)
				l, err := m.Acquire(actx, "l")
				cancel()
				if err != nil {
					failed.Add(1) // a fault Acquire reported: allowed, never a double holder
					t.Logf("acquire: %v", err)
					continue
				}
				acquired.Add(1)
				mu.Lock()
				if active != nil && active.Valid() {
					t.Errorf("token %d acquired while token %d is still valid", l.Token(), active.Token())
				}
				// Tokens are ordered as the store granted them, not as the
				// goroutines got here: a holder descheduled between Acquire
				// and this line for longer than its lease may find a later
				// holder's token recorded first. Only a lease still valid
				// now must be the newest.
				if l.Token() <= last && l.Valid() {
					t.Errorf("token %d after token %d", l.Token(), last)
				}
				if l.Token() > last {
					active, last = l, l.Token()
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				if active == l {
					active = nil
				}
				mu.Unlock()
				_ = l.Release(ctx) // may fail: then it is taken over after one TTL
			}
		})
	}
	wg.Wait()
	fb.Wait()
	fb.SetOptions(faulty.Options{})
	wctx, cancel := context.WithTimeout(ctx, 10*ttl)
	defer cancel()
	l, err := lease.New(s, &lease.Options{TTL: ttl, Poll: 5 * time.Millisecond}).Acquire(wctx, "l")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= last {
		t.Fatalf("final token %d, not above %d", l.Token(), last)
	}
	l.Release(ctx)
	if acquired.Load() == 0 {
		t.Fatal("nobody acquired")
	}
	t.Logf("%d acquisitions, %d failed by faults; faults %+v", acquired.Load(), failed.Load(), fb.Stats())
}
