package objledger_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
)

// TestConcurrentFirstStart opens a fresh ledger from several handles at once
// (each its own Store, probe and document cache, as separate processes have),
// each asking for a different shard count, many times: every open succeeds
// and all agree on the one descriptor that was written.
func TestConcurrentFirstStart(t *testing.T) {
	t.Parallel()
	const opens = 6
	race := func(t *testing.T, trial int, open func(shards int) (*objledger.Backend, error)) {
		start := make(chan struct{})
		errs, shards := make([]error, opens), make([]int, opens)
		var wg sync.WaitGroup
		for i := range opens {
			wg.Go(func() {
				<-start
				b, err := open(i + 1)
				if err == nil {
					shards[i] = b.Shards()
					err = b.Close()
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("trial %d: open %d of %d concurrent first opens: %v", trial, i+1, opens, err)
			}
			if shards[i] != shards[0] {
				t.Fatalf("trial %d: the opens see %v shards, want one count", trial, shards)
			}
		}
	}
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for trial := range 10 {
			dir := filepath.ToSlash(t.TempDir())
			race(t, trial, func(shards int) (*objledger.Backend, error) {
				s, err := objstore.Open(ctx, "file://"+dir, nil)
				if err != nil {
					return nil, err
				}
				return objledger.OpenBackend(ctx, s, nil, &objledger.Options{Shards: shards})
			})
		}
	})
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ep := testenv.S3Server(t, "minio")
		b, _ := testenv.NewBucket(t, ep)
		for trial := range 5 {
			pb, err := objstore.Prefixed(b, fmt.Sprintf("trial%d/", trial))
			if err != nil {
				t.Fatal(err)
			}
			race(t, trial, func(shards int) (*objledger.Backend, error) {
				return objledger.OpenBackend(ctx, objstore.New(pb, nil), &ledger.Options{}, &objledger.Options{Shards: shards})
			})
		}
	})
}
