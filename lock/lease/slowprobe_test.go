package lease_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// slowProbe is a store whose capabilities take a probe, and whose probe
// writes each take a long while (SeaweedFS's take seconds): every one moves
// the fake clock on by step.
type slowProbe struct {
	objstore.Backend
	clock *clockwork.FakeClock
	step  time.Duration
}

func (b slowProbe) Capabilities() (objstore.Capabilities, bool) {
	return objstore.Capabilities{}, false
}

func (b slowProbe) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	if strings.HasPrefix(key, "cairn-probe/") {
		b.clock.Advance(b.step)
	}
	return b.Backend.Put(ctx, key, body, size, opts)
}

// A lease or a tree lock taken on a store that must be probed first has its
// whole TTL once taken: the probe runs before the clock starts. (Its
// deadline used to count from before the probe, so a probe longer than the
// TTL handed out a lock already expired: cairn fs mv on Ceph RGW lost its
// 3 s lock at once.)
func TestProbeBeforeTheClockStarts(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	for _, tc := range []struct {
		name    string
		acquire func(t *testing.T, s *objstore.Store, clock clockwork.Clock) (deadline time.Time, release func())
	}{
		{"lease TryAcquire", func(t *testing.T, s *objstore.Store, clock clockwork.Clock) (time.Time, func()) {
			l, err := lease.New(s, &lease.Options{TTL: ttl, Clock: clock}).TryAcquire(t.Context(), "l")
			if err != nil {
				t.Fatal(err)
			}
			return l.Deadline(), func() { _ = l.Release(context.Background()) }
		}},
		{"lease Acquire", func(t *testing.T, s *objstore.Store, clock clockwork.Clock) (time.Time, func()) {
			l, err := lease.New(s, &lease.Options{TTL: ttl, Clock: clock}).Acquire(t.Context(), "l")
			if err != nil {
				t.Fatal(err)
			}
			return l.Deadline(), func() { _ = l.Release(context.Background()) }
		}},
		{"treelock", func(t *testing.T, s *objstore.Store, clock clockwork.Clock) (time.Time, func()) {
			m := treelock.New(s, &treelock.Options{TTL: ttl, Clock: clock})
			h, err := m.TryAcquire(t.Context(), treelock.Request{Write: []string{"/a"}})
			if err != nil {
				t.Fatal(err)
			}
			return h.Deadline(), func() { _ = h.Release(context.Background()); m.Close() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			s := objstore.New(slowProbe{mem.OpenBackend("slow"), clock, time.Second}, &objstore.Options{ProbeTTL: -1})
			deadline, release := tc.acquire(t, s, clock)
			defer release()
			if left := deadline.Sub(clock.Now()); left < ttl {
				t.Fatalf("taken with %s of its %s TTL left: the probe ate the rest", left, ttl)
			}
		})
	}
}
