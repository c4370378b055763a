package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
	"github.com/cairn-s3/cairn/objstore/metrics"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// The wrapper keeps every guarantee of the store under it.
func TestConformance(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b := mem.OpenBackend(t.Name())
		return objstoretest.Instance{Store: objstore.New(m.Wrap(b, "test"), nil), Uploads: b.Uploads}
	}})
}

func TestCountsOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := objstore.New(m.Wrap(mem.OpenBackend(""), "lake"), nil)
	if _, err := s.PutBytes(ctx, "k", []byte("12345"), &objstore.PutOptions{If: objstore.IfAbsent()}); err != nil {
		t.Fatal(err)
	}
	// A lost race: 412, then the HEAD with which the Store tells it from a
	// create refused on an absent key (objstore.ErrCreateRefused).
	_, _ = s.PutBytes(ctx, "k", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()})
	_, _ = s.Head(ctx, "missing")
	want := `
# HELP cairn_objstore_requests_total Object store requests by operation and outcome (precondition_failed, conflict and not_found are expected outcomes, not failures).
# TYPE cairn_objstore_requests_total counter
cairn_objstore_requests_total{op="head",outcome="not_found",store="lake"} 1
cairn_objstore_requests_total{op="head",outcome="ok",store="lake"} 1
cairn_objstore_requests_total{op="put",outcome="ok",store="lake"} 1
cairn_objstore_requests_total{op="put",outcome="precondition_failed",store="lake"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cairn_objstore_requests_total"); err != nil {
		t.Fatal(err)
	}
	bytes := `
# HELP cairn_objstore_bytes_written_total Bytes written by Put and UploadPart.
# TYPE cairn_objstore_bytes_written_total counter
cairn_objstore_bytes_written_total{store="lake"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(bytes), "cairn_objstore_bytes_written_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("registering twice on one registry must fail, not panic")
	}
}

// batchMem is the memory store with a batch delete that counts its calls:
// the wrapper must keep offering it (Store.DeleteMany asks the outermost
// backend), or every key costs a request of its own.
type batchMem struct {
	*mem.Backend
	batches int
}

func (b *batchMem) DeleteBatch(ctx context.Context, keys []string) (map[string]error, error) {
	b.batches++
	for _, k := range keys {
		if err := b.Delete(ctx, k, objstore.Condition{}); err != nil {
			return map[string]error{k: err}, nil
		}
	}
	return nil, nil
}

func TestKeepsBatchDeletes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := &batchMem{Backend: mem.OpenBackend("")}
	s := objstore.New(m.Wrap(b, "lake"), nil)
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		if _, err := s.PutBytes(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	if failed, err := s.DeleteMany(ctx, keys, 4); err != nil || len(failed) > 0 {
		t.Fatal(failed, err)
	}
	if b.batches != 1 {
		t.Fatalf("%d batch deletes under the wrapper, want 1", b.batches)
	}
	want := `
# HELP cairn_objstore_requests_total Object store requests by operation and outcome (precondition_failed, conflict and not_found are expected outcomes, not failures).
# TYPE cairn_objstore_requests_total counter
cairn_objstore_requests_total{op="delete_batch",outcome="ok",store="lake"} 1
cairn_objstore_requests_total{op="put",outcome="ok",store="lake"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cairn_objstore_requests_total"); err != nil {
		t.Fatal(err)
	}
}
