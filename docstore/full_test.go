package docstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/fsstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A store that takes no writes (a full disk) is not a transient failure:
// an update gives up after its first write with objstore.ErrUnwritable,
// instead of retrying it MaxAttempts times (about 10 s with the defaults).
// The full disk is injected (faulty.Full) under every strategy, and real (a
// full tmpfs) under the directory store, where the test can mount one.
func TestFullStoreGivesUpAtOnce(t *testing.T) {
	t.Parallel()
	injected := func(opts faulty.Options) func(t *testing.T) (*objstore.Store, *atomic.Int64) {
		return func(t *testing.T) (*objstore.Store, *atomic.Int64) {
			var puts atomic.Int64
			opts.Rule = func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
				if op == faulty.OpPut {
					puts.Add(1)
					return faulty.Full, 0
				}
				return faulty.None, 0
			}
			return objstore.New(faulty.New(mem.OpenBackend(""), &opts), nil), &puts
		}
	}
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) (*objstore.Store, *atomic.Int64)
		opts  docstore.Options
	}{
		{"group commit", injected(faulty.Options{}), docstore.Options{}},
		{"no group commit", injected(faulty.Options{}), docstore.Options{NoGroupCommit: true}},
		{"register", injected(faulty.Options{IgnoreConditions: true}), docstore.Options{Strategy: docstore.Register, LastWriterWins: true}},
		{"full tmpfs", func(t *testing.T) (*objstore.Store, *atomic.Int64) {
			dir := testenv.SmallDisk(t, 1<<20)
			b, err := fsstore.OpenBackend(dir, &fsstore.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			testenv.FillDisk(t, dir)
			var puts atomic.Int64
			s := objstore.New(faulty.New(b, &faulty.Options{Rule: func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
				if op == faulty.OpPut {
					puts.Add(1)
				}
				return faulty.None, 0
			}}), nil)
			t.Cleanup(func() { s.Close() })
			return s, &puts
		}, docstore.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, puts := tc.store(t)
			d := docstore.New(s, &tc.opts)
			_, _, err := d.UpdateJSON(context.Background(), "doc.json", func([]byte, docstore.Meta) ([]byte, error) { return []byte(`{"a":1}`), nil })
			if !errors.Is(err, objstore.ErrUnwritable) || !strings.Contains(err.Error(), "is full: free space and retry") {
				t.Fatalf("update on a full store: %v, want ErrUnwritable saying the disk is full", err)
			}
			if n := puts.Load(); n != 1 {
				t.Fatalf("update on a full store sent %d writes, want 1 (a full disk is not transient)", n)
			}
		})
	}
}
