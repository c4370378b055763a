package ledger

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cairn-s3/cairn/internal/registry"
	"github.com/cairn-s3/cairn/internal/safetext"
)

// ErrInvalidURL: a ledger URL names no known backend.
var ErrInvalidURL = errors.New("invalid ledger URL")

// ErrNoLedger: Options.MustExist was set and there is no ledger where the URL
// points (no SQLite file or one without the ledger's tables, a PostgreSQL
// database without them, an object store without the ledger's descriptor).
var ErrNoLedger = errors.New("no ledger")

// An Opener opens a ledger's backend from a URL; backends register one per
// scheme, and Open wraps what it returns with New.
type Opener func(ctx context.Context, url string, opts *Options) (Backend, error)

var openers registry.Registry[Opener]

// Register makes a backend available to Open under scheme.
func Register(scheme string, o Opener) { openers.Register("ledger", scheme, o) }

// DefaultURL is the embedded default: a SQLite file under ./cairn-data.
const DefaultURL = "cairn-data/ledger.db"

// Open opens a ledger: sqlite:///abs/path.db, a plain path (SQLite), or
// postgres://… (postgresql:// too), or an object store: s3://bucket/prefix,
// file:///dir (package objledger), or a DynamoDB table:
// dynamodb://TABLE?region=… (package dynamoledger). The backend packages
// must be linked in.
//
// A string that is neither a URL of a known scheme nor a plausible path is
// refused (ErrInvalidURL) before anything is created: a libpq keyword/value
// string (host=… password=…), a URL missing its // (postgres:…), a path with
// control characters. Errors never show a password the URL carries.
//
// Open creates the ledger if it does not exist (a SQLite file and its
// directories, the PostgreSQL tables, the object store's descriptor), except
// with opts.MustExist: then nothing at all is created, and a missing ledger is
// ErrNoLedger. Commands that only read a ledger, or change records it already
// holds, open it so.
func Open(ctx context.Context, url string, opts *Options) (*Ledger, error) {
	scheme, _, ok := strings.Cut(url, "://")
	if !ok {
		if url == "" {
			url = DefaultURL
		}
		if err := checkPath(url); err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(url)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
		}
		// Escaped: a '?' or '#' in a file name is part of the name.
		scheme, url = "sqlite", (&neturl.URL{Scheme: "sqlite", Path: abs}).String()
	}
	if scheme == "postgresql" {
		scheme = "postgres"
	}
	o, found := openers.Get(scheme)
	if !found {
		if keywordValue(url) {
			return nil, errKeywordValue(url)
		}
		return nil, fmt.Errorf("%w: unknown scheme %q in %q; known: %s (or a plain path for SQLite)", ErrInvalidURL,
			safetext.Redact(scheme), safetext.Redact(url), strings.Join(openers.Schemes(), ", "))
	}
	b, err := o(ctx, url, opts)
	if err != nil {
		return nil, redactError(err)
	}
	return New(b), nil
}

// libpqKeywords are connection keywords that, alone before an '=', mark a
// libpq keyword/value string rather than a file name.
var libpqKeywords = map[string]bool{"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true,
	"password": true, "sslmode": true, "sslpassword": true, "connect_timeout": true, "service": true, "passfile": true}

// kvPair is a keyword and '=' at the start or after a space.
var kvPair = regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)\s*=`)

// keywordValue reports whether s has the shape of a libpq keyword/value
// string: key=value pairs separated by spaces, or one libpq keyword.
func keywordValue(s string) bool {
	m := kvPair.FindStringSubmatch(s)
	return m != nil && (strings.ContainsAny(s, " \t\n\r\v\f") || libpqKeywords[strings.ToLower(m[1])])
}

func errKeywordValue(s string) error {
	return fmt.Errorf("%w: %q looks like a libpq keyword/value string, which cairn does not take; use postgres://user:pass@host/db (a plain path would be a SQLite file)",
		ErrInvalidURL, safetext.Redact(s))
}

// builtinSchemes are the schemes of cairn's own backends, linked in or not.
var builtinSchemes = map[string]bool{"sqlite": true, "postgres": true, "postgresql": true, "s3": true, "file": true, "dynamodb": true}

// schemeColon is a URL scheme and ':' with the // missing.
var schemeColon = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]+):`)

// checkPath refuses a string without "://" that would not be a sensible
// SQLite file name but is a connection string or URL typed wrong.
func checkPath(s string) error {
	if keywordValue(s) {
		return errKeywordValue(s)
	}
	if m := schemeColon.FindStringSubmatch(s); m != nil {
		scheme := strings.ToLower(m[1])
		if _, known := openers.Get(scheme); known || builtinSchemes[scheme] {
			// Not shown: where its password is cannot be told.
			return fmt.Errorf("%w: it looks like a %s URL without its //: write %s://… (a plain path would be a SQLite file)",
				ErrInvalidURL, scheme, strings.TrimSuffix(scheme, "ql"))
		}
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return fmt.Errorf("%w: %s holds control characters: give a SQLite file path or a URL", ErrInvalidURL, safetext.URL(s))
		}
	}
	return nil
}

// redactError hides any password an opener's error repeats from its URL,
// keeping the error chain (errors.Is) intact.
func redactError(err error) error {
	msg := err.Error()
	if red := safetext.Redact(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
