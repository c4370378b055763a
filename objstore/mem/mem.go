// Package mem is an in-memory objstore backend for examples and unit tests. It
// enforces every condition atomically (one mutex), so its declared capabilities
// are all true. Stores opened by URL as mem://NAME are shared by name within the
// process; Open returns a private one.
package mem

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"iter"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

type object struct {
	data []byte
	info objstore.Info
}

type upload struct {
	key   string
	opts  objstore.PutOptions
	parts map[int][]byte
}

// Backend is an in-memory objstore.Backend.
type Backend struct {
	name string
	now  func() time.Time

	mu      sync.RWMutex
	objects map[string]*object
	keys    []string // sorted
	uploads map[string]*upload
	nextID  int
}

// OpenBackend returns an empty in-memory backend named name (its String is
// mem://name), for wrappers; Open is the Store over a new one.
func OpenBackend(name string) *Backend {
	return &Backend{name: name, now: time.Now, objects: map[string]*object{}, uploads: map[string]*upload{}}
}

// Open returns a Store over a new, empty in-memory backend.
func Open() *objstore.Store { return objstore.New(OpenBackend(""), nil) }

var (
	namedMu sync.Mutex
	named   = map[string]*Backend{}
)

func init() {
	objstore.Register("mem", func(_ context.Context, u *url.URL) (objstore.Backend, error) {
		if u.RawQuery != "" {
			// A key holding '?' would otherwise lose its tail unseen.
			return nil, fmt.Errorf("%w: mem URLs take no parameters (got %q); a key holding '?' goes apart from the URL (cairn: --store URL --key KEY)", objstore.ErrInvalidURL, "?"+u.RawQuery)
		}
		name := u.Host + u.Path
		namedMu.Lock()
		defer namedMu.Unlock()
		b, ok := named[name]
		if !ok {
			b = OpenBackend(name)
			named[name] = b
		}
		return b, nil
	})
}

func (b *Backend) String() string { return "mem://" + b.name }

// Close does nothing; the data lives as long as the Backend.
func (b *Backend) Close() error { return nil }

// Capabilities: the mem backend enforces every condition.
func (b *Backend) Capabilities() (objstore.Capabilities, bool) {
	return objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, DeleteIfMatch: true, CopyIfAbsent: true,
		CopyIfMatch: true, MultipartIfAbsent: true, MultipartIfMatch: true}, true
}

// MinPartSize is 1 byte: memory has no reason to insist on large parts.
func (b *Backend) MinPartSize() int64 { return 1 }

func (b *Backend) get(key string) (*object, error) {
	o, ok := b.objects[key]
	if !ok {
		return nil, fmt.Errorf("%w: no object at this key", objstore.ErrNotFound)
	}
	return o, nil
}

func copyInfo(i objstore.Info) objstore.Info {
	i.Metadata = maps.Clone(i.Metadata)
	return i
}

// Get implements objstore.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, objstore.Info{}, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	o, err := b.get(key)
	if err != nil {
		return nil, objstore.Info{}, err
	}
	return io.NopCloser(bytes.NewReader(o.data)), copyInfo(o.info), nil
}

// Head implements objstore.Backend.
func (b *Backend) Head(ctx context.Context, key string) (objstore.Info, error) {
	if err := ctx.Err(); err != nil {
		return objstore.Info{}, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	o, err := b.get(key)
	if err != nil {
		return objstore.Info{}, err
	}
	return copyInfo(o.info), nil
}

// check tests cond against the current object; the caller holds b.mu.
func (b *Backend) check(key string, cond objstore.Condition) error {
	o, exists := b.objects[key]
	switch {
	case cond.Absent && exists:
		return fmt.Errorf("%w: an object already exists at this key", objstore.ErrPreconditionFailed)
	case cond.Match != "" && !exists:
		return fmt.Errorf("%w: %w: if-match on a missing key", objstore.ErrPreconditionFailed, objstore.ErrNotFound)
	case cond.Match != "" && o.info.ETag != cond.Match:
		return fmt.Errorf("%w: the object's ETag is %s, not %s", objstore.ErrPreconditionFailed, o.info.ETag, cond.Match)
	}
	return nil
}

// store installs data at key; the caller holds b.mu for writing.
func (b *Backend) store(key string, data []byte, etag string, opts objstore.PutOptions) objstore.Info {
	info := objstore.Info{Key: key, Size: int64(len(data)), ETag: etag, LastModified: b.now().UTC(),
		ContentType: opts.ContentType, Metadata: maps.Clone(opts.Metadata)}
	if _, ok := b.objects[key]; !ok {
		i, _ := slices.BinarySearch(b.keys, key)
		b.keys = slices.Insert(b.keys, i, key)
	}
	b.objects[key] = &object{data: data, info: info}
	return copyInfo(info)
}

func md5hex(data []byte) string {
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:])
}

// Put implements objstore.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, _ int64, opts objstore.PutOptions) (objstore.Info, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return objstore.Info{}, fmt.Errorf("reading the body: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return objstore.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(key, opts.If); err != nil {
		return objstore.Info{}, err
	}
	return b.store(key, data, md5hex(data), opts), nil
}

// Delete implements objstore.Backend.
func (b *Backend) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objects[key]; !ok {
		if cond.Match != "" {
			return fmt.Errorf("%w: no object at this key", objstore.ErrNotFound)
		}
		return nil
	}
	if err := b.check(key, cond); err != nil {
		return err
	}
	delete(b.objects, key)
	i, _ := slices.BinarySearch(b.keys, key)
	b.keys = slices.Delete(b.keys, i, i+1)
	return nil
}

// List implements objstore.Backend.
func (b *Backend) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ListPage{}, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return objstore.PageFromScanner(b.scan, prefix, cursor, opts)
}

func (b *Backend) scan(prefix, after, skip string) iter.Seq2[objstore.Info, error] {
	return func(yield func(objstore.Info, error) bool) {
		i, _ := slices.BinarySearch(b.keys, max(prefix, after))
		for ; i < len(b.keys); i++ {
			k := b.keys[i]
			if k <= after {
				continue
			}
			if !strings.HasPrefix(k, prefix) {
				return
			}
			if skip != "" && strings.HasPrefix(k, skip) {
				// Jump past the whole skipped range.
				i += sortSearch(b.keys[i:], func(s string) bool { return !strings.HasPrefix(s, skip) }) - 1
				continue
			}
			info := b.objects[k].info
			info.Metadata, info.ContentType = nil, ""
			if !yield(info, nil) {
				return
			}
		}
	}
}

func sortSearch(keys []string, f func(string) bool) int {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(keys[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Copy implements objstore.Backend.
func (b *Backend) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	if err := ctx.Err(); err != nil {
		return objstore.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.get(src)
	if err != nil {
		return objstore.Info{}, fmt.Errorf("copy source: %w", err)
	}
	if err := b.check(dst, cond); err != nil {
		return objstore.Info{}, err
	}
	return b.store(dst, o.data, o.info.ETag, objstore.PutOptions{ContentType: o.info.ContentType, Metadata: o.info.Metadata}), nil
}

// CreateMultipart implements objstore.Backend.
func (b *Backend) CreateMultipart(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	id := fmt.Sprintf("mem-upload-%d", b.nextID)
	b.uploads[id] = &upload{key: key, opts: opts, parts: map[int][]byte{}}
	return id, nil
}

func (b *Backend) upload(key, id string) (*upload, error) {
	u, ok := b.uploads[id]
	if !ok || u.key != key {
		return nil, fmt.Errorf("%w: no multipart upload %q for this key", objstore.ErrNotFound, id)
	}
	return u, nil
}

// UploadPart implements objstore.Backend.
func (b *Backend) UploadPart(ctx context.Context, key, id string, number int, body io.Reader, _ int64) (objstore.Part, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return objstore.Part{}, fmt.Errorf("reading part %d: %w", number, err)
	}
	if err := ctx.Err(); err != nil {
		return objstore.Part{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u, err := b.upload(key, id)
	if err != nil {
		return objstore.Part{}, err
	}
	u.parts[number] = data
	return objstore.Part{Number: number, ETag: md5hex(data), Size: int64(len(data))}, nil
}

// CompleteMultipart implements objstore.Backend.
func (b *Backend) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	if err := ctx.Err(); err != nil {
		return objstore.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u, err := b.upload(key, id)
	if err != nil {
		return objstore.Info{}, err
	}
	if err := b.check(key, cond); err != nil {
		return objstore.Info{}, err
	}
	var data []byte
	var sums []byte
	for i, p := range parts {
		d, ok := u.parts[p.Number]
		if !ok || p.Number != i+1 {
			return objstore.Info{}, fmt.Errorf("%w: part %d was not uploaded (parts must be 1..N)", objstore.ErrNotSupported, p.Number)
		}
		data = append(data, d...)
		s := md5.Sum(d)
		sums = append(sums, s[:]...)
	}
	delete(b.uploads, id)
	return b.store(key, data, fmt.Sprintf("%s-%d", md5hex(sums), len(parts)), u.opts), nil
}

// AbortMultipart implements objstore.Backend.
func (b *Backend) AbortMultipart(ctx context.Context, key, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.upload(key, id); err != nil {
		return err
	}
	delete(b.uploads, id)
	return nil
}

// Uploads returns the number of multipart uploads in progress (for tests).
func (b *Backend) Uploads() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.uploads)
}
