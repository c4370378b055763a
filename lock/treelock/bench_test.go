package treelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

// Distributed figures on MinIO: a lease's TryAcquire+Release, and a tree
// lock's acquire+release of a write at depth 2 (three nodes).
func BenchmarkMinIO(b *testing.B) {
	ep := testenv.S3(b)
	bk, _ := testenv.NewBucket(b, ep)
	s := objstore.New(bk, nil)
	ctx := context.Background()
	b.Run("LeaseAcquireRelease", func(b *testing.B) {
		m := lease.New(s, &lease.Options{TTL: time.Minute})
		for b.Loop() {
			l, err := m.TryAcquire(ctx, "bench/lease")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("TreeLockAcquireReleaseDepth2", func(b *testing.B) {
		m := treelock.New(s, &treelock.Options{TTL: time.Minute})
		defer m.Close()
		for b.Loop() {
			h, err := m.Acquire(ctx, treelock.Request{Write: []string{"/datasets/orders"}})
			if err != nil {
				b.Fatal(err)
			}
			h.Release(ctx)
		}
	})
}
