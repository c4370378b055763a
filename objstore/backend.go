package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Info describes an object.
type Info struct {
	Key          string            `json:"key"`
	Size         int64             `json:"size"`
	ETag         string            `json:"etag"` // normalised: no quotes, no W/ prefix
	LastModified time.Time         `json:"last_modified,omitzero"`
	VersionID    string            `json:"version_id,omitempty"`   // empty unless the bucket is versioned
	ContentType  string            `json:"content_type,omitempty"` // empty in listings
	Metadata     map[string]string `json:"metadata,omitempty"`     // user metadata, keys lowercase; nil in listings
	// IsPrefix is set on listing entries that stand for a common prefix (a
	// "folder") when ListOptions.Delimiter is used; only Key is meaningful then.
	IsPrefix bool `json:"is_prefix,omitempty"`
}

// Condition is the precondition of a write. The zero value means unconditional.
type Condition struct {
	// Absent: write only if no object exists at the key (If-None-Match: *).
	Absent bool
	// Match: write only if the current object's ETag equals Match (If-Match).
	// A Match that is only quotes, "W/" or spaces (`""`) is an empty ETag,
	// not "no condition": Store refuses it (see IfMatch).
	Match string
	// Unquoted: send Match bare (If-Match: 0123…), not quoted as HTTP has it
	// (If-Match: "0123…"). Ceph's RADOS Gateway (Pacific, 16.2) compares the
	// header with the bare ETag, so it refuses the quoted form even when it
	// matches. A Store sets it on the conditions it sends where the probe
	// found that only this form is enforced (Capabilities.IfMatchUnquoted);
	// backends that do not speak HTTP ignore it.
	Unquoted bool

	// emptyMatch: made by IfMatch with an empty ETag.
	emptyMatch bool
}

// IfAbsent is the write-once condition (If-None-Match: *).
func IfAbsent() Condition { return Condition{Absent: true} }

// IfMatch is the compare-and-swap condition (If-Match: etag). An empty etag
// (most often a lookup that failed) is never "unconditional": no object has
// an empty ETag, so every Store operation given IfMatch("") fails with
// ErrPreconditionFailed and writes nothing.
func IfMatch(etag string) Condition {
	m := NormalizeETag(etag)
	return Condition{Match: m, emptyMatch: m == ""}
}

// checkEmptyMatch refuses a condition whose ETag is empty: IfMatch(""), or a
// Match that normalizes to "" (`""`, "W/\"\"", " ").
func (c Condition) checkEmptyMatch() error {
	if c.emptyMatch || (c.Match != "" && NormalizeETag(c.Match) == "") {
		return fmt.Errorf("%w: if-match with an empty ETag, which no object has (an empty ETag is most often a lookup that failed); nothing was written", ErrPreconditionFailed)
	}
	return nil
}

// Replacing is the condition for replacing exactly what a read saw: if-match
// its ETag, or if-absent when the read found nothing (err is ErrNotFound). Any
// other read error is returned.
func Replacing(info Info, err error) (Condition, error) {
	switch {
	case errors.Is(err, ErrNotFound):
		return IfAbsent(), nil
	case err != nil:
		return Condition{}, err
	}
	return IfMatch(info.ETag), nil
}

// IsZero reports whether c is unconditional.
func (c Condition) IsZero() bool { return !c.Absent && c.Match == "" && !c.emptyMatch }

func (c Condition) String() string {
	switch {
	case c.emptyMatch || (c.Match != "" && NormalizeETag(c.Match) == ""):
		return "invalid(if-match with an empty ETag)"
	case c.Absent && c.Match != "":
		return "invalid(if-absent and if-match)"
	case c.Absent:
		return "if-absent"
	case c.Match != "":
		return "if-match " + c.Match
	default:
		return "unconditional"
	}
}

// PutOptions are the options of a write. A nil *PutOptions means all defaults.
type PutOptions struct {
	// If is the write's precondition. Default: unconditional.
	If Condition
	// ContentType of the object. Default: application/octet-stream.
	ContentType string
	// Metadata is user metadata (x-amz-meta-*). Keys are case-insensitive and
	// stored lowercase; keys and values must be printable ASCII. Default: none.
	Metadata map[string]string
}

// ListOptions select what List yields. A nil *ListOptions lists everything.
type ListOptions struct {
	// StartAfter: yield only keys strictly greater than this. Default: "".
	StartAfter string
	// Delimiter: roll keys that contain it after the prefix up into one entry with
	// IsPrefix set (S3's CommonPrefixes). Default: "" (no roll-up).
	Delimiter string
	// PageSize is how many entries each backend request returns. Default: 1000.
	PageSize int
}

// ListPage is one page of a listing, as returned by a Backend.
type ListPage struct {
	Entries []Info // objects and common prefixes, in key order
	// Next is the cursor for the following page; "" means this was the last page.
	Next string
}

// Part is a completed part of a multipart upload.
type Part struct {
	Number int
	ETag   string
	Size   int64
}

// Backend is the small interface a storage system implements. Users call Store,
// which validates keys and options before a Backend sees them. Backends map their
// errors to the package's sentinels and must never retry a conditional write on
// their own.
type Backend interface {
	// Get opens the object for reading. Info describes exactly the bytes returned.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	Head(ctx context.Context, key string) (Info, error)
	// Put writes size bytes from body (size -1: until EOF) under the condition.
	Put(ctx context.Context, key string, body io.Reader, size int64, opts PutOptions) (Info, error)
	// Delete removes the object; deleting a missing key without a condition is not
	// an error. With a condition it fails with ErrNotFound for a missing key.
	Delete(ctx context.Context, key string, cond Condition) error
	// List returns the page of entries with the prefix that follows cursor ("" for
	// the first page). Cursors are opaque to callers.
	List(ctx context.Context, prefix, cursor string, opts ListOptions) (ListPage, error)
	// Copy copies src to dst on the server, with a condition on the destination.
	// The Info has at least the copy's ETag; a backend that would need another
	// request to know Size, ContentType or Metadata (s3) leaves them zero.
	Copy(ctx context.Context, src, dst string, cond Condition) (Info, error)

	CreateMultipart(ctx context.Context, key string, opts PutOptions) (uploadID string, err error)
	UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (Part, error)
	// CompleteMultipart assembles the parts; the condition applies to the key at
	// completion time.
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part, cond Condition) (Info, error)
	AbortMultipart(ctx context.Context, key, uploadID string) error

	// Capabilities returns the conditions the backend enforces, and whether that
	// is known without probing (true for backends that implement conditions
	// themselves). Stores whose answer is false are probed on first need.
	Capabilities() (Capabilities, bool)
	// MinPartSize is the smallest part a multipart upload accepts (except the last).
	MinPartSize() int64
	// String names the backend and its location for messages, e.g. "s3://bucket".
	String() string
	Close() error
}

// A Wrapper is a Backend over another (Prefixed, objstore/metrics,
// objstore/policy) that does not change what the server under it enforces:
// it forwards conditional requests as they are, and refuses no request by
// answering as the server would (a refusal of its own is its own error, never
// ErrPreconditionFailed or ErrConflict). Unwrap returns the backend under it.
// A Store looks through Wrappers for the optional interfaces of the backend
// beneath (ServerIdentifier: its probe verdict is saved and reused). A
// wrapper that changes what the server seems to enforce (objstore/faulty)
// must not implement it: a verdict measured through it would be saved for the
// server.
type Wrapper interface {
	Backend
	Unwrap() Backend
}

// NormalizeETag strips the quotes and weak-validator prefix servers put around ETags.
func NormalizeETag(etag string) string {
	etag = strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	return strings.Trim(etag, `"`)
}
