package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
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
		po.If = s.wire(po.If)
		info, err := s.b.Put(ctx, key, bytes.NewReader(first[:n]), int64(n), po)
		if err == nil {
			report(int64(n))
		}
		return info, wrapErr("upload", key, s.explainRefusal(ctx, key, po.If, err))
	}
	if err := s.requireCondition(ctx, "multipart completion", po.If, multipartCaps); err != nil {
		if errors.Is(err, ErrNotSupported) && s.requireCondition(ctx, "put", po.If, putCaps) == nil {
			// The store enforces the condition on a PUT but not on a
			// multipart completion (gofakes3): one conditional PUT of the
			// whole body instead, up to S3's 5 GiB limit.
			po.If = s.wire(po.If)
			info, err := s.uploadOnePut(ctx, key, first, r, po, report)
			return info, wrapErr("upload", key, s.explainRefusal(ctx, key, po.If, err))
		}
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
	whole := md5.New() // to recognise the object under a server's own ETag scheme
	buf, n := first, len(first)
	for num := 1; ; num++ {
		whole.Write(buf[:n])
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
	info, err := s.b.CompleteMultipart(ctx, key, id, parts, s.wire(o.If))
	if err != nil {
		return info, s.explainRefusal(ctx, key, o.If, err)
	}
	return s.settledETag(ctx, key, info, hex.EncodeToString(whole.Sum(nil))), nil
}

// settledETag returns info with the ETag the server will show for the object
// from now on. Most servers answer a multipart completion with the ETag a
// HEAD shows ("md5-of-part-md5s-N"); some (gofakes3) answer that but store
// the MD5 of the whole object, so a compare-and-swap on the answered ETag
// would fail for ever. A HEAD settles it: if it shows the whole body's MD5,
// the object is ours (or byte-identical) under the server's scheme; any other
// ETag is a later write, and the completion's answer stands.
func (s *Store) settledETag(ctx context.Context, key string, info Info, wholeMD5 string) Info {
	head, err := s.b.Head(ctx, key)
	if err != nil || head.ETag == info.ETag || head.ETag != wholeMD5 {
		return info
	}
	info.ETag = head.ETag
	if !head.LastModified.IsZero() {
		info.LastModified = head.LastModified
	}
	return info
}

// maxSinglePut is S3's limit on one PutObject.
const maxSinglePut = 5 << 30

// uploadOnePut writes first and the rest of r with one conditional Put,
// spooling the body to a temporary file to learn its size.
func (s *Store) uploadOnePut(ctx context.Context, key string, first []byte, r io.Reader, po PutOptions, report func(int64)) (Info, error) {
	f, err := os.CreateTemp("", "cairn-upload-*")
	if err != nil {
		return Info{}, fmt.Errorf("spooling the body for a single conditional PUT: %w", err)
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	n, err := io.Copy(f, io.LimitReader(io.MultiReader(bytes.NewReader(first), r), maxSinglePut+1))
	if err != nil {
		return Info{}, fmt.Errorf("spooling the body for a single conditional PUT: %w", err)
	}
	if n > maxSinglePut {
		return Info{}, fmt.Errorf("%w: %s enforces %s on a PUT but not on a multipart completion, and the body is over the 5 GiB a single PUT can carry", ErrNotSupported, s.b, po.If)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Info{}, err
	}
	info, err := s.b.Put(ctx, key, f, n, po)
	if err == nil {
		report(n)
	}
	return info, err
}
