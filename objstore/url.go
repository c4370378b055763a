package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ErrInvalidURL: a store URL could not be parsed or names an unknown scheme.
var ErrInvalidURL = errors.New("invalid store URL")

// An Opener opens a backend from a parsed URL. Backend packages register one for
// their scheme in init, as database/sql drivers do.
type Opener func(ctx context.Context, u *url.URL) (Backend, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes a backend available to Open under scheme. It panics if the
// scheme is registered twice (a programming error caught at start-up).
func Register(scheme string, o Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("objstore: Register called twice for scheme " + scheme)
	}
	openers[scheme] = o
}

// Schemes lists the registered URL schemes.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	var s []string
	for k := range openers {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// ParseURL parses a store URL. A string without "://" is a local path and becomes
// a file:// URL (relative paths are made absolute).
func ParseURL(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("%w: empty; use s3://bucket/prefix, file:///dir, a directory path or mem://name", ErrInvalidURL)
	}
	if !strings.Contains(raw, "://") {
		abs, err := filepath.Abs(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, raw, err)
		}
		return &url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme; use s3://, file://, mem:// or a plain directory path", ErrInvalidURL, raw)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	return u, nil
}

// Open opens the store a URL names: s3://bucket/prefix?endpoint=…&region=…&path_style=true,
// file:///abs/dir, a plain directory path, or mem://name. The backend packages
// must be linked in (import them, e.g. for side effects) for their schemes to work.
func Open(ctx context.Context, raw string, opts *Options) (*Store, error) {
	u, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	openersMu.RLock()
	o, ok := openers[u.Scheme]
	openersMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: unknown scheme %q in %q; known schemes: %s", ErrInvalidURL, u.Scheme, raw, strings.Join(Schemes(), ", "))
	}
	b, err := o(ctx, u)
	if err != nil {
		return nil, err
	}
	return New(b, opts), nil
}
