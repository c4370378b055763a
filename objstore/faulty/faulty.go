// Package faulty wraps an objstore.Backend and injects failures: errors before a
// request reaches the store, latency, and the ambiguous failures that make
// distributed storage hard: a write applied by the server whose response is lost
// (the client sees an error although the write happened), a request lost
// before the server saw it (the client sees the same error although nothing
// happened), and a late-landing request: the client gives up (a reset, a
// timeout, a 502/504 from a proxy) and sees the same error, and the server
// applies the request later, after the client has moved on. Layers above use it
// to prove they stay correct under all three.
//
// A late-landing write is applied with its own condition, evaluated when it
// lands: a PUT conditional on ETag X lands only if the object's ETag is still X
// then, exactly as on a real server. Wait (or Close) waits for every late
// request still on its way, so a test can check the store after all of them.
//
// Faults are drawn from a seeded random source, so a failing test can be replayed
// with its seed, or decided per call by a Rule.
package faulty

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-s3/cairn/internal/backoff"
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
	// LateApply: the client gets the same ambiguous error at once, and the store
	// applies the request later (after Options.LateDelay, up to LateJitter more),
	// detached from the caller's context. Only for writes.
	LateApply
	// Full: the store refuses the request as a full disk does: nothing is
	// applied, and the client gets the error objstore/fsstore returns on one, an
	// objstore.ErrUnwritable wrapping syscall.ENOSPC (not transient: retry
	// loops give up at once). Only for requests that store data (put, copy,
	// and the multipart create, part and complete); the others (reads,
	// deletes, aborts) pass, as they do on a full disk.
	Full
)

func (f Fault) String() string {
	return [...]string{"none", "fail", "lost-response", "lost-request", "late-apply", "full"}[f]
}

// stores reports whether op stores data (what a full disk refuses).
func (op Op) stores() bool {
	return op == OpPut || op == OpCopy || op == OpCreateMP || op == OpPart || op == OpComplete
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
	// FailRate, LostResponseRate, LostRequestRate and LateApplyRate are per-call
	// probabilities (lost and late faults apply to writes only: put, delete,
	// copy, complete_multipart).
	FailRate, LostResponseRate, LostRequestRate, LateApplyRate float64
	// LateDelay is how long after the caller saw its error a LateApply request
	// lands, plus up to LateJitter more at random. Defaults: 0 and 60ms (a
	// request held by a proxy or a slow server past the client's timeout).
	LateDelay, LateJitter time.Duration
	// Latency is added to every call, plus up to Jitter more at random.
	Latency, Jitter time.Duration
	// Ops limits the faults to these operations. Default: all.
	Ops []Op
	// Rule, when set, decides every call instead of the rates above (a
	// full disk, Full, is injected by a Rule only).
	Rule Rule
	// IgnoreConditions makes the store behave like the many "S3-compatible"
	// servers that accept If-None-Match / If-Match and ignore them: conditions
	// are dropped and the backend declares no capabilities, so Probe must find out.
	IgnoreConditions bool
	// RacyConditions makes conditional PUTs check-then-act, as several
	// servers' were (SeaweedFS 4.16, versitygw's posix backend before a fix):
	// the condition is judged against a HEAD, then the write is applied
	// unconditionally after RaceWindow. A lone write is refused correctly;
	// concurrent ones can all win. The backend declares no capabilities.
	RacyConditions bool
	// RaceWindow is the gap between the check and the write. Default: 2ms.
	RaceWindow time.Duration
	// Quirks play the answers real servers give to the same situations, so
	// the layers above are tested against every mapping.
	Quirks Quirks
}

// Quirks are server answers that differ from MinIO's for the same outcome.
type Quirks struct {
	// MissingIfMatchNotFound: a write with If-Match on a missing key is 404
	// (ErrNotFound), as on AWS and versitygw, not 412.
	MissingIfMatchNotFound bool
	// ConflictRate: this share of conditional writes are answered 409
	// ConditionalRequestConflict (ErrConflict) without being applied, as AWS
	// answers a writer racing another conditional write of the key.
	ConflictRate float64
	// DeleteMissingOK: a conditional delete of a missing key succeeds (204),
	// as on versitygw, instead of ErrNotFound.
	DeleteMissingOK bool
	// FolderRefusesCreate: a write-once create (If-None-Match: *) of key K is
	// answered 412 while objects exist under "K/", although K reads as absent,
	// as SeaweedFS answers for a key that is also a folder (it does so even
	// after the folder is emptied; this plays the first case only).
	FolderRefusesCreate bool
}

// Stats counts the faults injected so far (Failed counts Fail and Full).
type Stats struct {
	Calls, Failed, LostResponses, LostRequests int
	// LateApplied counts late requests sent on to the store, LateLanded those
	// the store then applied (a late write can still fail its own condition).
	LateApplied, LateLanded int
}

// Backend is an objstore.Backend that injects faults into an inner one. It
// is not an objstore.Wrapper (it has no Unwrap) on purpose: it can make a
// server seem to enforce what it does not, or to ignore what it enforces, so
// a probe verdict measured through it must never be saved for the server
// under it.
type Backend struct {
	inner objstore.Backend

	mu    sync.Mutex
	opts  Options
	rnd   *rand.Rand
	stats Stats

	late sync.WaitGroup // late requests still on their way
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
	if o.LateJitter <= 0 && o.LateDelay <= 0 {
		o.LateJitter = 60 * time.Millisecond
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
			case op.mutates() && r < o.FailRate+o.LostResponseRate+o.LostRequestRate+o.LateApplyRate:
				f = LateApply
			}
		}
	}
	if !op.mutates() && (f == LostResponse || f == LostRequest || f == LateApply) {
		f = Fail
	}
	if f == Full && !op.stores() {
		f = None
	}
	switch f {
	case Fail, Full:
		b.stats.Failed++
	case LostResponse:
		b.stats.LostResponses++
	case LostRequest:
		b.stats.LostRequests++
	case LateApply:
		b.stats.LateApplied++
	}
	return f, d
}

// lateDelay draws how long a late request waits before it lands.
func (b *Backend) lateDelay() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.opts.LateDelay
	if b.opts.LateJitter > 0 {
		d += time.Duration(b.rnd.Int64N(int64(b.opts.LateJitter) + 1))
	}
	return d
}

// Wait blocks until every late request injected so far has landed or failed.
func (b *Backend) Wait() { b.late.Wait() }

func (b *Backend) cond(c objstore.Condition) objstore.Condition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opts.IgnoreConditions {
		return objstore.Condition{}
	}
	return c
}

// conflict answers a conditional write 409 at Quirks.ConflictRate.
func (b *Backend) conflict(c objstore.Condition) error {
	if c.IsZero() {
		return nil
	}
	b.mu.Lock()
	hit := b.opts.Quirks.ConflictRate > 0 && b.rnd.Float64() < b.opts.Quirks.ConflictRate
	b.mu.Unlock()
	if hit {
		return fmt.Errorf("faulty: 409 ConditionalRequestConflict: %w", objstore.ErrConflict)
	}
	return nil
}

// missingIfMatch maps a failed If-Match on a missing key to ErrNotFound when
// Quirks.MissingIfMatchNotFound is set.
func (b *Backend) missingIfMatch(ctx context.Context, key string, c objstore.Condition, err error) error {
	b.mu.Lock()
	on := b.opts.Quirks.MissingIfMatchNotFound
	b.mu.Unlock()
	if !on || c.Match == "" || !errors.Is(err, objstore.ErrPreconditionFailed) {
		return err
	}
	if _, herr := b.inner.Head(ctx, key); errors.Is(herr, objstore.ErrNotFound) {
		return fmt.Errorf("faulty: 404 NoSuchKey for If-Match on a missing key: %w", objstore.ErrNotFound)
	}
	return err
}

// racyCheck judges a condition against a HEAD and clears it, after a gap,
// when RacyConditions is set.
func (b *Backend) racyCheck(ctx context.Context, key string, c *objstore.Condition) error {
	b.mu.Lock()
	racy, window := b.opts.RacyConditions, b.opts.RaceWindow
	b.mu.Unlock()
	if !racy || c.IsZero() {
		return nil
	}
	if window <= 0 {
		window = 2 * time.Millisecond
	}
	info, err := b.inner.Head(ctx, key)
	switch {
	case err != nil && !errors.Is(err, objstore.ErrNotFound):
		return err
	case c.Absent && err == nil, c.Match != "" && (err != nil || info.ETag != objstore.NormalizeETag(c.Match)):
		return fmt.Errorf("%w: judged against a HEAD", objstore.ErrPreconditionFailed)
	}
	*c = objstore.Condition{}
	time.Sleep(window)
	return nil
}

// do runs call under the fault decided for (op, key). call gets the context to
// use: the caller's, or for a late request a detached one.
func do[T any](b *Backend, ctx context.Context, op Op, key string, call func(context.Context) (T, error)) (T, error) {
	var zero T
	f, d := b.decide(op, key)
	if err := backoff.Sleep(ctx, d); err != nil {
		return zero, err
	}
	switch f {
	case LateApply:
		delay := b.lateDelay()
		b.late.Add(1)
		go func() {
			defer b.late.Done()
			time.Sleep(delay)
			if _, err := call(context.WithoutCancel(ctx)); err == nil {
				b.mu.Lock()
				b.stats.LateLanded++
				b.mu.Unlock()
			}
		}()
		return zero, fmt.Errorf("faulty: %s gave up waiting; the request may still land: %w", op, objstore.ErrAmbiguous)
	case Fail:
		return zero, fmt.Errorf("%s: %w", op, ErrInjected)
	case Full:
		return zero, fmt.Errorf("%w: the disk holding %s is full: free space and retry (faulty: %s: %w)", objstore.ErrUnwritable, b.inner, op, syscall.ENOSPC)
	case LostRequest:
		return zero, fmt.Errorf("faulty: %s request lost before reaching the store: %w", op, objstore.ErrAmbiguous)
	case LostResponse:
		if _, err := call(ctx); err != nil {
			return zero, err
		}
		return zero, fmt.Errorf("faulty: %s applied, response lost: %w", op, objstore.ErrAmbiguous)
	}
	return call(ctx)
}

type pair struct {
	rc   io.ReadCloser
	info objstore.Info
}

// Get implements objstore.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	p, err := do(b, ctx, OpGet, key, func(ctx context.Context) (pair, error) {
		rc, i, err := b.inner.Get(ctx, key)
		return pair{rc, i}, err
	})
	return p.rc, p.info, err
}

// Head implements objstore.Backend.
func (b *Backend) Head(ctx context.Context, key string) (objstore.Info, error) {
	return do(b, ctx, OpHead, key, func(ctx context.Context) (objstore.Info, error) { return b.inner.Head(ctx, key) })
}

// Put implements objstore.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	opts.If = b.cond(opts.If)
	if err := b.conflict(opts.If); err != nil {
		return objstore.Info{}, err
	}
	if err := b.racyCheck(ctx, key, &opts.If); err != nil {
		return objstore.Info{}, err
	}
	if err := b.folderRefusal(ctx, key, opts.If); err != nil {
		return objstore.Info{}, err
	}
	if b.mayBeLate() {
		// A late request lands after the caller has returned and may reuse its
		// reader: keep a copy of the body.
		data, err := io.ReadAll(body)
		if err != nil {
			return objstore.Info{}, err
		}
		return do(b, ctx, OpPut, key, func(ctx context.Context) (objstore.Info, error) {
			info, err := b.inner.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
			return info, b.missingIfMatch(ctx, key, opts.If, err)
		})
	}
	return do(b, ctx, OpPut, key, func(ctx context.Context) (objstore.Info, error) {
		info, err := b.inner.Put(ctx, key, body, size, opts)
		return info, b.missingIfMatch(ctx, key, opts.If, err)
	})
}

// folderRefusal plays Quirks.FolderRefusesCreate.
func (b *Backend) folderRefusal(ctx context.Context, key string, c objstore.Condition) error {
	b.mu.Lock()
	on := b.opts.Quirks.FolderRefusesCreate
	b.mu.Unlock()
	if !on || !c.Absent {
		return nil
	}
	page, err := b.inner.List(ctx, key+"/", "", objstore.ListOptions{PageSize: 1})
	if err != nil || len(page.Entries) == 0 {
		return err
	}
	return fmt.Errorf("faulty: 412 PreconditionFailed (%q is a folder): %w", key, objstore.ErrPreconditionFailed)
}

// Delete implements objstore.Backend.
func (b *Backend) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	cond = b.cond(cond)
	if err := b.conflict(cond); err != nil {
		return err
	}
	_, err := do(b, ctx, OpDelete, key, func(ctx context.Context) (struct{}, error) { return struct{}{}, b.inner.Delete(ctx, key, cond) })
	b.mu.Lock()
	q := b.opts.Quirks
	b.mu.Unlock()
	if q.DeleteMissingOK && !cond.IsZero() && errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	return err
}

// List implements objstore.Backend.
func (b *Backend) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	return do(b, ctx, OpList, prefix, func(ctx context.Context) (objstore.ListPage, error) { return b.inner.List(ctx, prefix, cursor, opts) })
}

// Copy implements objstore.Backend.
func (b *Backend) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	cond = b.cond(cond)
	return do(b, ctx, OpCopy, dst, func(ctx context.Context) (objstore.Info, error) { return b.inner.Copy(ctx, src, dst, cond) })
}

// CreateMultipart implements objstore.Backend.
func (b *Backend) CreateMultipart(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	return do(b, ctx, OpCreateMP, key, func(ctx context.Context) (string, error) { return b.inner.CreateMultipart(ctx, key, opts) })
}

// UploadPart implements objstore.Backend.
func (b *Backend) UploadPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objstore.Part, error) {
	return do(b, ctx, OpPart, key, func(ctx context.Context) (objstore.Part, error) {
		return b.inner.UploadPart(ctx, key, id, n, body, size)
	})
}

// CompleteMultipart implements objstore.Backend.
func (b *Backend) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	cond = b.cond(cond)
	if err := b.conflict(cond); err != nil {
		return objstore.Info{}, err
	}
	parts = slices.Clone(parts) // a late request outlives the caller's slice
	return do(b, ctx, OpComplete, key, func(ctx context.Context) (objstore.Info, error) {
		return b.inner.CompleteMultipart(ctx, key, id, parts, cond)
	})
}

// AbortMultipart implements objstore.Backend.
func (b *Backend) AbortMultipart(ctx context.Context, key, id string) error {
	_, err := do(b, ctx, OpAbort, key, func(ctx context.Context) (struct{}, error) { return struct{}{}, b.inner.AbortMultipart(ctx, key, id) })
	return err
}

// Capabilities forwards to the inner backend, or declares nothing when
// conditions are ignored.
func (b *Backend) Capabilities() (objstore.Capabilities, bool) {
	b.mu.Lock()
	ignore := b.opts.IgnoreConditions || b.opts.RacyConditions
	b.mu.Unlock()
	if ignore {
		return objstore.Capabilities{}, false
	}
	return b.inner.Capabilities()
}

// MinPartSize forwards to the inner backend.
func (b *Backend) MinPartSize() int64 { return b.inner.MinPartSize() }

func (b *Backend) String() string { return "faulty(" + b.inner.String() + ")" }

// Close waits for late requests still on their way, then closes the inner
// backend.
func (b *Backend) Close() error {
	b.Wait()
	return b.inner.Close()
}

// mayBeLate reports whether a write may get the LateApply fault.
func (b *Backend) mayBeLate() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opts.Rule != nil || b.opts.LateApplyRate > 0
}
