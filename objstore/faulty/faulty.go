// Package faulty wraps an objstore.Backend and injects failures: errors before a
// request reaches the store, latency, and the ambiguous failures that make
// distributed storage hard: a write applied by the server whose response is lost
// (the client sees an error although the write happened), and a request lost
// before the server saw it (the client sees the same error although nothing
// happened). Layers above use it to prove they stay correct under both.
//
// Faults are drawn from a seeded random source, so a failing test can be replayed
// with its seed, or decided per call by a Rule.
package faulty

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

// Op names a Backend method.
type Op string

// The operations faults can target.
const (
	OpGet      Op = "get"
	OpHead     Op = "head"
	OpPut      Op = "put"
	OpDelete   Op = "delete"
	OpList     Op = "list"
	OpCopy     Op = "copy"
	OpCreateMP Op = "create_multipart"
	OpPart     Op = "upload_part"
	OpComplete Op = "complete_multipart"
	OpAbort    Op = "abort_multipart"
)

func (op Op) mutates() bool {
	return op == OpPut || op == OpDelete || op == OpCopy || op == OpComplete
}

// Fault is what happens to one call.
type Fault int

// The kinds of fault.
const (
	None Fault = iota
	// Fail: the request never reaches the store; a definite error (ErrInjected).
	Fail
	// LostResponse: the store applies the request, then the client gets an error
	// wrapping objstore.ErrAmbiguous. Only for writes.
	LostResponse
	// LostRequest: the store never sees the request, and the client gets the same
	// ambiguous error as for LostResponse. Only for writes.
	LostRequest
)

func (f Fault) String() string {
	return [...]string{"none", "fail", "lost-response", "lost-request"}[f]
}

// ErrInjected marks a Fail fault.
var ErrInjected = errors.New("faulty: injected failure")

// Rule decides the fault and the added latency of one call. It may be called
// concurrently.
type Rule func(op Op, key string) (Fault, time.Duration)

// Options configure the faults. The zero value injects nothing.
type Options struct {
	// Seed of the random source. Default: 1.
	Seed uint64
	// FailRate, LostResponseRate and LostRequestRate are per-call probabilities
	// (lost faults apply to writes only: put, delete, copy, complete_multipart).
	FailRate, LostResponseRate, LostRequestRate float64
	// Latency is added to every call, plus up to Jitter more at random.
	Latency, Jitter time.Duration
	// Ops limits the faults to these operations. Default: all.
	Ops []Op
	// Rule, when set, decides every call instead of the rates above.
	Rule Rule
	// IgnoreConditions makes the store behave like the many "S3-compatible"
	// servers that accept If-None-Match / If-Match and ignore them: conditions
	// are dropped and the backend declares no capabilities, so Probe must find out.
	IgnoreConditions bool
}

// Stats counts the faults injected so far.
type Stats struct {
	Calls, Failed, LostResponses, LostRequests int
}

// Backend is an objstore.Backend that injects faults into an inner one.
type Backend struct {
	inner objstore.Backend

	mu    sync.Mutex
	opts  Options
	rnd   *rand.Rand
	stats Stats
}

// New wraps inner. A nil opts injects nothing until SetOptions.
func New(inner objstore.Backend, opts *Options) *Backend {
	b := &Backend{inner: inner}
	var o Options
	if opts != nil {
		o = *opts
	}
	b.SetOptions(o)
	return b
}

// SetOptions replaces the fault configuration (e.g. to turn faults on after a
// test's setup) and reseeds the random source.
func (b *Backend) SetOptions(o Options) {
	if o.Seed == 0 {
		o.Seed = 1
	}
	b.mu.Lock()
	b.opts, b.rnd = o, rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	b.mu.Unlock()
}

// Stats returns the counts of injected faults.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

func (b *Backend) decide(op Op, key string) (Fault, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Calls++
	o := b.opts
	var f Fault
	var d time.Duration
	if o.Rule != nil {
		f, d = o.Rule(op, key)
	} else {
		targeted := len(o.Ops) == 0
		for _, x := range o.Ops {
			targeted = targeted || x == op
		}
		d = o.Latency
		if o.Jitter > 0 {
			d += time.Duration(b.rnd.Int64N(int64(o.Jitter)))
		}
		if targeted {
			r := b.rnd.Float64()
			switch {
			case r < o.FailRate:
				f = Fail
			case op.mutates() && r < o.FailRate+o.LostResponseRate:
				f = LostResponse
			case op.mutates() && r < o.FailRate+o.LostResponseRate+o.LostRequestRate:
				f = LostRequest
			}
		}
	}
	if !op.mutates() && (f == LostResponse || f == LostRequest) {
		f = Fail
	}
	switch f {
	case Fail:
		b.stats.Failed++
	case LostResponse:
		b.stats.LostResponses++
	case LostRequest:
		b.stats.LostRequests++
	}
	return f, d
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Backend) cond(c objstore.Condition) objstore.Condition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opts.IgnoreConditions {
		return objstore.Condition{}
	}
	return c
}

// do runs call under the fault decided for (op, key).
func do[T any](b *Backend, ctx context.Context, op Op, key string, call func() (T, error)) (T, error) {
	var zero T
	f, d := b.decide(op, key)
	if err := sleep(ctx, d); err != nil {
		return zero, err
	}
	switch f {
	case Fail:
		return zero, fmt.Errorf("%s: %w", op, ErrInjected)
	case LostRequest:
		return zero, fmt.Errorf("faulty: %s request lost before reaching the store: %w", op, objstore.ErrAmbiguous)
	case LostResponse:
		if _, err := call(); err != nil {
			return zero, err
		}
		return zero, fmt.Errorf("faulty: %s applied, response lost: %w", op, objstore.ErrAmbiguous)
	}
	return call()
}

type pair struct {
	rc   io.ReadCloser
	info objstore.Info
}

// Get implements objstore.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	p, err := do(b, ctx, OpGet, key, func() (pair, error) {
		rc, i, err := b.inner.Get(ctx, key)
		return pair{rc, i}, err
	})
	return p.rc, p.info, err
}

// Head implements objstore.Backend.
func (b *Backend) Head(ctx context.Context, key string) (objstore.Info, error) {
	return do(b, ctx, OpHead, key, func() (objstore.Info, error) { return b.inner.Head(ctx, key) })
}

// Put implements objstore.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	opts.If = b.cond(opts.If)
	return do(b, ctx, OpPut, key, func() (objstore.Info, error) { return b.inner.Put(ctx, key, body, size, opts) })
}

// Delete implements objstore.Backend.
func (b *Backend) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	cond = b.cond(cond)
	_, err := do(b, ctx, OpDelete, key, func() (struct{}, error) { return struct{}{}, b.inner.Delete(ctx, key, cond) })
	return err
}

// List implements objstore.Backend.
func (b *Backend) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	return do(b, ctx, OpList, prefix, func() (objstore.ListPage, error) { return b.inner.List(ctx, prefix, cursor, opts) })
}

// Copy implements objstore.Backend.
func (b *Backend) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	cond = b.cond(cond)
	return do(b, ctx, OpCopy, dst, func() (objstore.Info, error) { return b.inner.Copy(ctx, src, dst, cond) })
}

// CreateMultipart implements objstore.Backend.
func (b *Backend) CreateMultipart(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	return do(b, ctx, OpCreateMP, key, func() (string, error) { return b.inner.CreateMultipart(ctx, key, opts) })
}

// UploadPart implements objstore.Backend.
func (b *Backend) UploadPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objstore.Part, error) {
	return do(b, ctx, OpPart, key, func() (objstore.Part, error) { return b.inner.UploadPart(ctx, key, id, n, body, size) })
}

// CompleteMultipart implements objstore.Backend.
func (b *Backend) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	cond = b.cond(cond)
	return do(b, ctx, OpComplete, key, func() (objstore.Info, error) { return b.inner.CompleteMultipart(ctx, key, id, parts, cond) })
}

// AbortMultipart implements objstore.Backend.
func (b *Backend) AbortMultipart(ctx context.Context, key, id string) error {
	_, err := do(b, ctx, OpAbort, key, func() (struct{}, error) { return struct{}{}, b.inner.AbortMultipart(ctx, key, id) })
	return err
}

// Capabilities forwards to the inner backend, or declares nothing when
// conditions are ignored.
func (b *Backend) Capabilities() (objstore.Capabilities, bool) {
	b.mu.Lock()
	ignore := b.opts.IgnoreConditions
	b.mu.Unlock()
	if ignore {
		return objstore.Capabilities{}, false
	}
	return b.inner.Capabilities()
}

// MinPartSize forwards to the inner backend.
func (b *Backend) MinPartSize() int64 { return b.inner.MinPartSize() }

func (b *Backend) String() string { return "faulty(" + b.inner.String() + ")" }

// Close closes the inner backend.
func (b *Backend) Close() error { return b.inner.Close() }
