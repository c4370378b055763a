package objstore

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Prefixed returns a Backend that stores every key under prefix in b, so one
// bucket can hold many independent stores (s3://bucket/prefix URLs use it). The
// prefix must be empty or a valid key prefix ending in "/".
func Prefixed(b Backend, prefix string) (Backend, error) {
	if prefix == "" {
		return b, nil
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	x := &prefixed{b: b, p: prefix}
	if bd, ok := b.(BatchDeleter); ok {
		return prefixedBatch{x, bd}, nil
	}
	return x, nil
}

// unprefixed returns the backend under a key prefix, if b is one.
func unprefixed(b Backend) (Backend, bool) {
	switch x := b.(type) {
	case *prefixed:
		return x.b, true
	case prefixedBatch:
		return x.b, true
	}
	return nil, false
}

// prefixedBatch is prefixed over a backend that deletes in batches: it keeps
// doing so (Store.DeleteMany asks the outermost backend).
type prefixedBatch struct {
	*prefixed
	bd BatchDeleter
}

func (x prefixedBatch) DeleteBatch(ctx context.Context, keys []string) (map[string]error, error) {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = x.k(k)
	}
	failed, err := x.bd.DeleteBatch(ctx, full)
	if len(failed) == 0 {
		return failed, err
	}
	out := make(map[string]error, len(failed))
	for k, ferr := range failed {
		out[strings.TrimPrefix(k, x.p)] = ferr
	}
	return out, err
}

type prefixed struct {
	b Backend
	p string
}

func (x *prefixed) k(key string) string { return x.p + key }

func (x *prefixed) unk(i Info) Info {
	i.Key = strings.TrimPrefix(i.Key, x.p)
	return i
}

func (x *prefixed) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	rc, i, err := x.b.Get(ctx, x.k(key))
	return rc, x.unk(i), err
}

func (x *prefixed) Head(ctx context.Context, key string) (Info, error) {
	i, err := x.b.Head(ctx, x.k(key))
	return x.unk(i), err
}

func (x *prefixed) Put(ctx context.Context, key string, body io.Reader, size int64, opts PutOptions) (Info, error) {
	i, err := x.b.Put(ctx, x.k(key), body, size, opts)
	return x.unk(i), err
}

func (x *prefixed) Delete(ctx context.Context, key string, cond Condition) error {
	return x.b.Delete(ctx, x.k(key), cond)
}

func (x *prefixed) List(ctx context.Context, prefix, cursor string, opts ListOptions) (ListPage, error) {
	if opts.StartAfter != "" {
		opts.StartAfter = x.k(opts.StartAfter)
	}
	page, err := x.b.List(ctx, x.k(prefix), cursor, opts)
	for i := range page.Entries {
		page.Entries[i] = x.unk(page.Entries[i])
	}
	return page, err
}

func (x *prefixed) Copy(ctx context.Context, src, dst string, cond Condition) (Info, error) {
	i, err := x.b.Copy(ctx, x.k(src), x.k(dst), cond)
	return x.unk(i), err
}

func (x *prefixed) CreateMultipart(ctx context.Context, key string, opts PutOptions) (string, error) {
	return x.b.CreateMultipart(ctx, x.k(key), opts)
}

func (x *prefixed) UploadPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (Part, error) {
	return x.b.UploadPart(ctx, x.k(key), id, n, body, size)
}

func (x *prefixed) CompleteMultipart(ctx context.Context, key, id string, parts []Part, cond Condition) (Info, error) {
	i, err := x.b.CompleteMultipart(ctx, x.k(key), id, parts, cond)
	return x.unk(i), err
}

func (x *prefixed) AbortMultipart(ctx context.Context, key, id string) error {
	return x.b.AbortMultipart(ctx, x.k(key), id)
}

// Unwrap returns the backend under the prefix (Wrapper).
func (x *prefixed) Unwrap() Backend { return x.b }

func (x *prefixed) Capabilities() (Capabilities, bool) { return x.b.Capabilities() }
func (x *prefixed) MinPartSize() int64                 { return x.b.MinPartSize() }
func (x *prefixed) String() string {
	return fmt.Sprintf("%s/%s", strings.TrimSuffix(x.b.String(), "/"), x.p)
}
func (x *prefixed) Close() error { return x.b.Close() }
