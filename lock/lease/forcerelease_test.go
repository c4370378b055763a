package lease_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// TestForceRelease: a lease released on purpose by someone else says whom it
// released, bumps the fencing token (the next holder's is two higher), leaves
// a lease held by another holder alone, and its old holder loses the lease;
// a sink whose mark was raised to the bumped token refuses the old holder's
// fenced writes.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		a := lease.New(s, &lease.Options{TTL: ttl, Holder: "worker-a"})
		b := lease.New(s, &lease.Options{TTL: ttl, Holder: "worker-b"})
		ops := lease.New(s, &lease.Options{TTL: ttl, Holder: "operator"})
		la, err := a.TryAcquire(ctx, "locks/x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fence.PutBytes(ctx, s, "out/report", []byte("a1"), la.Token(), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ops.ForceRelease(ctx, "locks/x", "worker-b"); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("force-releasing another holder's lease: %v, want ErrNotHeld", err)
		}
		released, err := ops.ForceRelease(ctx, "locks/x", "worker-a")
		if err != nil || released.Holder != "worker-a" || released.Token != la.Token() || released.Host == "" {
			t.Fatalf("force release: %+v %v", released, err)
		}
		st, _, err := ops.Status(ctx, "locks/x")
		if err != nil || st.Holder != "" || st.Token != la.Token()+1 {
			t.Fatalf("after: %+v %v, want free with token %d", st, err, la.Token()+1)
		}
		if _, err := ops.ForceRelease(ctx, "locks/x", ""); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("force-releasing a free lease: %v, want ErrNotHeld", err)
		}
		// What --fence-object does: the sink sees the bumped token.
		if _, err := fence.PutBytes(ctx, s, "out/report", []byte("a1"), st.Token, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := fence.PutBytes(ctx, s, "out/report", []byte("a2"), la.Token(), nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("the old holder's fenced write after force-unlock: %v, want ErrStale", err)
		}
		// The old holder finds out at its next renewal.
		select {
		case <-la.Done():
		case <-time.After(10 * ttl):
			t.Fatal("the old holder still holds the lease")
		}
		if err := la.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("the old holder's release: %v, want ErrLeaseLost", err)
		}
		lb, err := b.TryAcquire(ctx, "locks/x")
		if err != nil || lb.Token() != la.Token()+2 {
			t.Fatalf("the next holder: %v %v, want token %d", lb, err, la.Token()+2)
		}
		if _, err := fence.PutBytes(ctx, s, "out/report", []byte("b"), lb.Token(), nil); err != nil {
			t.Fatalf("the next holder's write: %v", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
