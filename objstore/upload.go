package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// UploadOptions configure Upload. A nil *UploadOptions means all defaults.
type UploadOptions struct {
	PutOptions
	// PartSize is the size of each part. Default: 8 MiB, raised to the backend's
	// minimum part size if smaller.
	PartSize int64
	// Concurrency is how many parts are uploaded at once; memory use is about
	// Concurrency × PartSize. Default: 4.
	Concurrency int
	// Progress, if set, is called with the number of bytes uploaded so far. It may
	// be called from several goroutines, never concurrently with itself.
	Progress func(uploaded int64)
}

// Upload streams r to key. A body that fits in one part is written with one Put;
// a larger one goes through a multipart upload whose completion carries the
// condition, so a write-once or compare-and-swap upload of any size is atomic.
// On any failure, including a failed condition, the multipart upload is aborted
// so no parts are left behind.
func (s *Store) Upload(ctx context.Context, key string, r io.Reader, opts *UploadOptions) (Info, error) {
	var o UploadOptions
	if opts != nil {
		o = *opts
	}
	if err := ValidateKey(key); err != nil {
		return Info{}, wrapErr("upload", key, err)
	}
	po, err := normPut(&o.PutOptions)
	if err != nil {
		return Info{}, wrapErr("upload", key, err)
	}
	if o.PartSize <= 0 {
		o.PartSize = 8 << 20
	}
	if min := s.b.MinPartSize(); o.PartSize < min {
		o.PartSize = min
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	var progressMu sync.Mutex
	var uploaded atomic.Int64
	report := func(n int64) {
		if o.Progress == nil {
			return
		}
		progressMu.Lock()
		o.Progress(uploaded.Add(n))
		progressMu.Unlock()
	}

	first := make([]byte, o.PartSize)
	n, err := io.ReadFull(r, first)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Info{}, wrapErr("upload", key, fmt.Errorf("reading the source: %w", err))
	}
	if err != nil { // the whole body fits in one part
		if err := s.requireCondition(ctx, "put", po.If, putCaps); err != nil {
			return Info{}, wrapErr("upload", key, err)
		}
		info, err := s.b.Put(ctx, key, bytes.NewReader(first[:n]), int64(n), po)
		if err == nil {
			report(int64(n))
		}
		return info, wrapErr("upload", key, err)
	}
	if err := s.requireCondition(ctx, "multipart completion", po.If, multipartCaps); err != nil {
		return Info{}, wrapErr("upload", key, err)
	}
	id, err := s.b.CreateMultipart(ctx, key, po)
	if err != nil {
		return Info{}, wrapErr("upload", key, err)
	}
	info, err := s.uploadParts(ctx, key, id, first, r, o, report)
	if err != nil {
		// Abort with a fresh context: the caller's may be the reason we failed.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		if aerr := s.b.AbortMultipart(actx, key, id); aerr != nil && !errors.Is(aerr, ErrNotFound) {
			err = fmt.Errorf("%w (and aborting multipart upload %s failed: %v; it will linger until a lifecycle rule removes it)", err, id, aerr)
		}
		return Info{}, wrapErr("upload", key, err)
	}
	return info, nil
}

func (s *Store) uploadParts(ctx context.Context, key, id string, first []byte, r io.Reader, o UploadOptions, report func(int64)) (Info, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Concurrency) // g.Go blocks while Concurrency parts are in flight
	pool := sync.Pool{New: func() any { b := make([]byte, o.PartSize); return &b }}
	var mu sync.Mutex
	var parts []Part
	submit := func(data []byte, number int) {
		mu.Lock()
		parts = append(parts, Part{Number: number})
		mu.Unlock()
		g.Go(func() error {
			p, err := s.b.UploadPart(gctx, key, id, number, bytes.NewReader(data), int64(len(data)))
			if err != nil {
				return fmt.Errorf("part %d: %w", number, err)
			}
			mu.Lock()
			parts[number-1] = p
			mu.Unlock()
			report(int64(len(data)))
			full := data[:cap(data)]
			pool.Put(&full)
			return nil
		})
	}
	buf, n := first, len(first)
	for num := 1; ; num++ {
		submit(buf[:n], num)
		if int64(n) < o.PartSize || gctx.Err() != nil {
			break
		}
		buf = *pool.Get().(*[]byte)
		var err error
		n, err = io.ReadFull(r, buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			_ = g.Wait()
			return Info{}, fmt.Errorf("reading the source: %w", err)
		}
	}
	if err := g.Wait(); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	return s.b.CompleteMultipart(ctx, key, id, parts, o.If)
}
