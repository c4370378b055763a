// Package metrics wraps an objstore.Backend with Prometheus metrics, registered
// on a Registerer the caller passes in (never the global one):
//
//	cairn_objstore_requests_total{store, op, outcome}
//	cairn_objstore_request_seconds{store, op}      (histogram)
//	cairn_objstore_bytes_written_total{store}
//
// outcome is "ok", or an expected result that is not a failure —
// "precondition_failed" (a compare-and-swap that lost, 412), "conflict" (409),
// "not_found" — or a failure: "ambiguous" (the write may have been applied),
// "not_supported", "invalid_key", "canceled", "error". Alert on failures, not on
// lost races: under contention, 412s are how compare-and-swap works.
package metrics

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/objstore"
)

// Metrics are the collectors; create them once per Registerer.
type Metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	written  *prometheus.CounterVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_objstore_requests_total",
			Help: "Object store requests by operation and outcome (precondition_failed, conflict and not_found are expected outcomes, not failures)."},
			[]string{"store", "op", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cairn_objstore_request_seconds",
			Help: "Object store request latency.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"store", "op"}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_objstore_bytes_written_total",
			Help: "Bytes written by Put and UploadPart."}, []string{"store"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds, m.written} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Outcome classifies an error for the outcome label.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, objstore.ErrPreconditionFailed):
		return "precondition_failed"
	case errors.Is(err, objstore.ErrConflict):
		return "conflict"
	case errors.Is(err, objstore.ErrNotFound):
		return "not_found"
	case errors.Is(err, objstore.ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, objstore.ErrNotSupported):
		return "not_supported"
	case errors.Is(err, objstore.ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// Wrap returns b instrumented; name is the store label (e.g. "lake").
func (m *Metrics) Wrap(b objstore.Backend, name string) objstore.Backend {
	x := &backend{Backend: b, m: m, name: name}
	if bd, ok := b.(objstore.BatchDeleter); ok {
		// Store.DeleteMany asks the outermost backend: keep batching.
		return batchBackend{x, bd}
	}
	return x
}

// batchBackend is backend over a backend that deletes in batches; a batch is
// one request, counted as op "delete_batch".
type batchBackend struct {
	*backend
	bd objstore.BatchDeleter
}

func (b batchBackend) DeleteBatch(ctx context.Context, keys []string) (map[string]error, error) {
	start := time.Now()
	failed, err := b.bd.DeleteBatch(ctx, keys)
	b.observe("delete_batch", start, err)
	return failed, err
}

type backend struct {
	objstore.Backend
	m    *Metrics
	name string
}

func (b *backend) observe(op string, start time.Time, err error) {
	b.m.requests.WithLabelValues(b.name, op, Outcome(err)).Inc()
	b.m.seconds.WithLabelValues(b.name, op).Observe(time.Since(start).Seconds())
}

// countingReader counts bytes read from a body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (b *backend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	start := time.Now()
	rc, info, err := b.Backend.Get(ctx, key)
	b.observe("get", start, err)
	return rc, info, err
}

func (b *backend) Head(ctx context.Context, key string) (objstore.Info, error) {
	start := time.Now()
	info, err := b.Backend.Head(ctx, key)
	b.observe("head", start, err)
	return info, err
}

func (b *backend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	start := time.Now()
	// Count bytes only where the size is unknown; a sized seekable body is left
	// as it is so backends keep their fast path.
	if _, ok := body.(io.ReadSeeker); !ok || size < 0 {
		body = &countingReader{r: body}
	}
	info, err := b.Backend.Put(ctx, key, body, size, opts)
	if err == nil {
		n := size
		if cr, ok := body.(*countingReader); ok {
			n = cr.n
		}
		b.m.written.WithLabelValues(b.name).Add(float64(max(n, 0)))
	}
	b.observe("put", start, err)
	return info, err
}

func (b *backend) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	start := time.Now()
	err := b.Backend.Delete(ctx, key, cond)
	b.observe("delete", start, err)
	return err
}

func (b *backend) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	start := time.Now()
	page, err := b.Backend.List(ctx, prefix, cursor, opts)
	b.observe("list", start, err)
	return page, err
}

func (b *backend) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	start := time.Now()
	info, err := b.Backend.Copy(ctx, src, dst, cond)
	b.observe("copy", start, err)
	return info, err
}

func (b *backend) CreateMultipart(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	start := time.Now()
	id, err := b.Backend.CreateMultipart(ctx, key, opts)
	b.observe("create_multipart", start, err)
	return id, err
}

func (b *backend) UploadPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objstore.Part, error) {
	start := time.Now()
	p, err := b.Backend.UploadPart(ctx, key, id, n, body, size)
	if err == nil {
		b.m.written.WithLabelValues(b.name).Add(float64(p.Size))
	}
	b.observe("upload_part", start, err)
	return p, err
}

func (b *backend) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	start := time.Now()
	info, err := b.Backend.CompleteMultipart(ctx, key, id, parts, cond)
	b.observe("complete_multipart", start, err)
	return info, err
}

func (b *backend) AbortMultipart(ctx context.Context, key, id string) error {
	start := time.Now()
	err := b.Backend.AbortMultipart(ctx, key, id)
	b.observe("abort_multipart", start, err)
	return err
}

func (b *backend) String() string { return b.Backend.String() }

// Unwrap returns the instrumented backend (objstore.Wrapper): counting
// requests changes nothing the server enforces.
func (b *backend) Unwrap() objstore.Backend { return b.Backend }
