package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairn-s3/cairn/internal/registry"
)

// ErrInvalidURL: a store URL could not be parsed or names an unknown scheme.
var ErrInvalidURL = errors.New("invalid store URL")

// An Opener opens a backend from a parsed URL. Backend packages register one for
// their scheme in init, as database/sql drivers do.
type Opener func(ctx context.Context, u *url.URL) (Backend, error)

var openers registry.Registry[Opener]

// Register makes a backend available to Open under scheme. It panics if the
// scheme is registered twice (a programming error caught at start-up).
func Register(scheme string, o Opener) { openers.Register("objstore", scheme, o) }

// Schemes lists the registered URL schemes.
func Schemes() []string { return openers.Schemes() }

// ParseURL parses a store URL. A string without "://" is a local path and becomes
// a file:// URL (relative paths are made absolute), unless it starts with a URL
// scheme ("s3:", "mem:"; a single letter is a Windows drive): that is a
// mistyped URL, never a path. A URL other than file:// must name its bucket
// (or store name): "s3:///reports/" is what an unset $BUCKET leaves, and is
// refused rather than read as anything else.
//
// No store URL reaches outside what it names: a ".." path segment is refused
// (ErrInvalidURL) in every form, before anything is cleaned or resolved —
// written out, percent-encoded in any case ("%2E%2E", ".%2e"), ended by an
// encoded slash ("..%2F") or a backslash. So is a fragment ("#…"), which a key
// holding '#' would become, and a second '?' in the query, which a key holding
// '?' leaves. Keys holding '#', '?', '%' or spaces are passed apart from the
// URL (the Store methods take keys; the CLI has --store URL --key KEY).
func ParseURL(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("%w: empty; use s3://bucket/prefix, file:///dir, a directory path or mem://name", ErrInvalidURL)
	}
	if scheme, ok := schemePrefix(raw); ok && !strings.Contains(raw, "://") {
		return nil, fmt.Errorf("%w: %q starts with the URL scheme %q but has no \"://\": write %s://… (or ./%s if it really is a local path)", ErrInvalidURL, raw, scheme+":", scheme, raw)
	}
	if !strings.Contains(raw, "://") {
		// A local path: its ".." segments are refused before filepath.Abs
		// cleans them away.
		if hasDotDot(raw) {
			return nil, fmt.Errorf("%w: %q has a \"..\" segment: a store path never climbs out of what it names; give the directory without \"..\" (e.g. its absolute path), and a key apart with --store DIR --key KEY", ErrInvalidURL, raw)
		}
		abs, err := filepath.Abs(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, raw, err)
		}
		return &url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}, nil
	}
	if strings.Contains(raw, "#") {
		return nil, fmt.Errorf("%w: %q has a '#': a URL's fragment is no part of a store or key, so what follows it would be dropped; a key holding '#' goes apart from the URL (cairn: --store URL --key KEY)", ErrInvalidURL, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme; use s3://, file://, mem:// or a plain directory path", ErrInvalidURL, raw)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	// url.Parse has decoded the path: "%2E%2E" and "..%2F" are ".." now.
	if hasDotDot(u.Host) || hasDotDot(u.Path) || hasDotDot(u.Opaque) {
		return nil, fmt.Errorf("%w: %q has a \"..\" segment (perhaps percent-encoded): a store URL never climbs out of what it names; a key from elsewhere goes apart from the URL (cairn: --store URL --key KEY)", ErrInvalidURL, raw)
	}
	if strings.Contains(u.RawQuery, "?") {
		return nil, fmt.Errorf("%w: %q has a second '?': a key holding '?' makes the rest of it parameters; pass such a key apart from the URL (cairn: --store URL --key KEY)", ErrInvalidURL, raw)
	}
	if u.Host == "" && u.Scheme != "file" {
		part, example := "store name", u.Scheme+"://NAME"
		if u.Scheme == "s3" {
			part, example = "bucket", "s3://BUCKET"
		}
		return nil, fmt.Errorf("%w: %q has no %s: it goes right after %s:// (%s%s); is the variable that should hold it unset?", ErrInvalidURL, raw, part, u.Scheme, example, u.EscapedPath())
	}
	return u, nil
}

// hasDotDot reports whether p has a ".." segment, with '/' or '\\' as the
// separator (Windows and some S3-compatible servers take a backslash for a
// slash).
func hasDotDot(p string) bool {
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return true
		}
	}
	return false
}

// schemePrefix reports whether raw starts with "scheme:" (RFC 3986 scheme
// characters, at least two of them so "C:" stays a Windows drive).
func schemePrefix(raw string) (string, bool) {
	i := strings.IndexByte(raw, ':')
	if i < 2 {
		return "", false
	}
	for j, c := range raw[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return raw[:i], true
}

// Open opens the store a URL names: s3://bucket/prefix?endpoint=…&region=…&path_style=true,
// file:///abs/dir, a plain directory path, or mem://name. The backend packages
// must be linked in (import them, e.g. for side effects) for their schemes to work.
func Open(ctx context.Context, raw string, opts *Options) (*Store, error) {
	u, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	o, ok := openers.Get(u.Scheme)
	if !ok {
		return nil, fmt.Errorf("%w: unknown scheme %q in %q; known schemes: %s (a program links a backend by importing it, e.g. _ \"github.com/cairn-s3/cairn/objstore/s3store\")", ErrInvalidURL, u.Scheme, raw, strings.Join(Schemes(), ", "))
	}
	b, err := o(ctx, u)
	if err != nil {
		return nil, err
	}
	return New(b, opts), nil
}

// SplitObjectURL splits the URL of one object into its store's URL and its key:
//
//	s3://bucket/path/to/key?endpoint=…  ->  s3://bucket?endpoint=…  +  path/to/key
//	mem://name/path/to/key              ->  mem://name              +  path/to/key
//	file:///dir/path/to/key (or a path) ->  the nearest ancestor directory that is
//	    already a cairn directory store (holds .cairn/), else the file's parent,
//	    + the rest of the path
func SplitObjectURL(raw string) (storeURL, key string, err error) {
	u, err := ParseURL(raw)
	if err != nil {
		return "", "", err
	}
	switch u.Scheme {
	case "file":
		p := filepath.Clean(filepath.FromSlash(u.Path))
		if p == string(filepath.Separator) || p == "." {
			return "", "", fmt.Errorf("%w: %q names a directory, not an object", ErrInvalidURL, raw)
		}
		// Cleaning drops these, and would name another object than the
		// key the URL was built from ("dir/./k", "dir//k" and "dir/k/" would
		// all be "dir/k"). ".." never gets here (ParseURL refuses it).
		if strings.Contains(raw, "://") { // not a local path, which ParseURL made a clean URL
			for _, seg := range strings.Split(strings.TrimPrefix(u.Path, "/"), "/") {
				if seg == "" || seg == "." {
					return "", "", fmt.Errorf("%w: %q has an empty or \".\" path segment (or ends with \"/\"), which would be dropped and name another object; pass a key from elsewhere apart from the URL (cairn: --store URL --key KEY)", ErrInvalidURL, raw)
				}
			}
		}
		root := filepath.Dir(p)
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			if fi, err := os.Stat(filepath.Join(d, ".cairn")); err == nil && fi.IsDir() {
				root = d
				break
			}
			if d == filepath.Dir(d) {
				break
			}
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return "", "", fmt.Errorf("%w: %v", ErrInvalidURL, err)
		}
		su := url.URL{Scheme: "file", Path: filepath.ToSlash(root), RawQuery: u.RawQuery}
		return su.String(), filepath.ToSlash(rel), nil
	default:
		key = strings.TrimPrefix(u.Path, "/")
		if key == "" {
			return "", "", fmt.Errorf("%w: %q names a bucket, not an object: add the key, e.g. %s://%s/path/to/key", ErrInvalidURL, raw, u.Scheme, u.Host)
		}
		su := url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: u.RawQuery}
		return su.String(), key, nil
	}
}

// OpenObject opens the store holding the object an object URL names (see
// SplitObjectURL) and returns it with the object's key.
func OpenObject(ctx context.Context, raw string, opts *Options) (*Store, string, error) {
	su, key, err := SplitObjectURL(raw)
	if err != nil {
		return nil, "", err
	}
	if err := ValidateKey(key); err != nil {
		return nil, "", err
	}
	s, err := Open(ctx, su, opts)
	if err != nil {
		return nil, "", err
	}
	return s, key, nil
}
