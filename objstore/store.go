package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/cairn-s3/cairn"
)

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// Capabilities, when set, are used instead of probing the endpoint. Set it only
	// from a Probe result of the same endpoint (e.g. saved by `cairn probe --json`).
	// Default: the backend's declaration, or a saved verdict, or a Probe on first
	// need.
	Capabilities *Capabilities
	// ProbePrefix is where Probe writes its scratch keys, and where (at the
	// bucket's root) it shares its verdict. Default: "cairn-probe/".
	ProbePrefix string
	// ProbeTTL is how long a saved probe verdict is reused instead of probing
	// again (see "Probe verdicts" in the package doc). Negative: verdicts are
	// neither saved nor reused; each Store probes on its first need. Default:
	// DefaultProbeTTL (24h).
	ProbeTTL time.Duration
	// ProbeCacheDir is the directory of the local verdict cache. Default:
	// <os.UserCacheDir()>/cairn/probe (no local cache if there is no user cache
	// directory).
	ProbeCacheDir string
	// Now is the clock that dates verdicts. Default: time.Now.
	Now func() time.Time
}

// Store is the user-facing handle on an object store. It is safe for concurrent use.
type Store struct {
	b    Backend
	opts Options

	ident ServerIdentifier // nil: verdicts are not saved

	capMu  sync.Mutex
	caps   *Capabilities
	probe  *ProbeReport
	server *string // what the server calls itself, once asked
}

// New returns a Store over b.
func New(b Backend, opts *Options) *Store {
	s := &Store{b: b}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.ProbePrefix == "" {
		s.opts.ProbePrefix = cairn.ProbePrefix
	}
	if s.opts.ProbeTTL == 0 {
		s.opts.ProbeTTL = DefaultProbeTTL
	}
	if s.opts.ProbeCacheDir == "" {
		s.opts.ProbeCacheDir = defaultProbeCacheDir()
	}
	if c := s.opts.Capabilities; c != nil {
		cc := *c
		s.setCaps(cc)
	} else if c, known := b.Capabilities(); known {
		s.setCaps(c)
	} else if id, ok := identityOf(b); ok {
		s.ident = id
	}
	return s
}

func (s *Store) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// Backend returns the backend under s (for wrappers and diagnostics).
func (s *Store) Backend() Backend { return s.b }

func (s *Store) String() string { return s.b.String() }

// Close releases the backend's resources.
func (s *Store) Close() error { return s.b.Close() }

// Capabilities returns what the store enforces: the Options override, the
// backend's declaration, a fresh saved verdict, or the result of a Probe run
// now (and saved). Only writes that carry a condition need it; reads never
// do, so a Store used only to read never probes and needs no write permission.
func (s *Store) Capabilities(ctx context.Context) (Capabilities, error) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.caps != nil {
		return *s.caps, nil
	}
	if v, ok := s.freshVerdict(ctx); ok {
		rep := v.Report
		s.probe = &rep
		return s.setCaps(v.Report.Capabilities), nil
	}
	rep, err := runProbe(ctx, s.b, s.opts.ProbePrefix, nil)
	if err != nil {
		return Capabilities{}, err
	}
	s.saveVerdict(ctx, &rep, false)
	s.probe = &rep
	return s.setCaps(rep.Capabilities), nil
}

// setCaps keeps c as what the store enforces (capMu held).
func (s *Store) setCaps(c Capabilities) Capabilities {
	s.caps = &c
	return c
}

// wire is cond as it is sent: with its ETag unquoted where the store
// enforces If-Match only in that form. Call it after requireCondition (the
// capabilities are known then).
func (s *Store) wire(cond Condition) Condition {
	if cond.Match == "" {
		return cond
	}
	if c, ok := s.KnownCapabilities(); ok {
		cond.Unquoted = c.IfMatchUnquoted
	}
	return cond
}

// KnownCapabilities returns what the store is known to enforce without a
// request: the Options override, the backend's declaration, or a verdict this
// Store already probed or loaded. ok is false if it would take a probe.
func (s *Store) KnownCapabilities() (c Capabilities, ok bool) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.caps == nil {
		return Capabilities{}, false
	}
	return *s.caps, true
}

// Probe runs the capability probe now (even if a result is cached or
// declared), keeps its result for this Store, saves it as the verdict for the
// server unless opts.NoCache, publishes it in the bucket if opts.Share (see
// "Probe verdicts" in the package doc) and returns the full report.
func (s *Store) Probe(ctx context.Context, opts *ProbeOptions) (ProbeReport, error) {
	rep, err := runProbe(ctx, s.b, s.opts.ProbePrefix, opts)
	if err != nil {
		return rep, err
	}
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if opts == nil || !opts.NoCache {
		s.saveVerdict(ctx, &rep, opts != nil && opts.Share)
	}
	s.probe = &rep
	s.setCaps(rep.Capabilities)
	return rep, nil
}

func (s *Store) requireCondition(ctx context.Context, op string, cond Condition, has func(Capabilities) (absent, match bool)) error {
	if cond.IsZero() {
		return nil
	}
	if cond.Absent && cond.Match != "" {
		return fmt.Errorf("%w: if-absent and if-match together can never both hold; pick one", ErrNotSupported)
	}
	caps, err := s.Capabilities(ctx)
	if err != nil {
		return fmt.Errorf("%w (the conditional %s was not sent)", err, op)
	}
	absent, match := has(caps)
	if (cond.Absent && !absent) || (cond.Match != "" && !match) {
		return fmt.Errorf("%w: %s does not enforce %s on %s (run `cairn probe` to see what it enforces)", ErrNotSupported, s.b, cond, op)
	}
	return nil
}

func putCaps(c Capabilities) (bool, bool)       { return c.PutIfAbsent, c.PutIfMatch }
func copyCaps(c Capabilities) (bool, bool)      { return c.CopyIfAbsent, c.CopyIfMatch }
func multipartCaps(c Capabilities) (bool, bool) { return c.MultipartIfAbsent, c.MultipartIfMatch }
func deleteCaps(c Capabilities) (bool, bool)    { return false, c.DeleteIfMatch }

func normPut(opts *PutOptions) (PutOptions, error) {
	var o PutOptions
	if opts != nil {
		o = *opts
	}
	if err := o.If.checkEmptyMatch(); err != nil {
		return o, err
	}
	o.If.Match = NormalizeETag(o.If.Match)
	if len(o.Metadata) > 0 {
		if err := ValidateMetadata(o.Metadata); err != nil {
			return o, fmt.Errorf("%w: %v", ErrNotSupported, err)
		}
		md := make(map[string]string, len(o.Metadata))
		for k, v := range o.Metadata {
			md[strings.ToLower(k)] = v
		}
		o.Metadata = md
	}
	if o.ContentType == "" {
		o.ContentType = "application/octet-stream"
	}
	return o, nil
}

// Get opens key for reading. The caller must close the reader. Info describes
// exactly the bytes the reader returns.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, wrapErr("get", key, err)
	}
	rc, info, err := s.b.Get(ctx, key)
	return rc, info, wrapErr("get", key, err)
}

// GetBytes reads a whole object into memory.
func (s *Store) GetBytes(ctx context.Context, key string) ([]byte, Info, error) {
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		return nil, info, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, info, wrapErr("get", key, err)
	}
	return data, info, nil
}

// Head returns the object's Info without its content.
func (s *Store) Head(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, wrapErr("head", key, err)
	}
	info, err := s.b.Head(ctx, key)
	return info, wrapErr("head", key, err)
}

// Put writes body in one request. For bodies of unknown or large size use Upload,
// which streams through a multipart upload; backends that need the length (s3)
// buffer a non-seekable body of a Put in memory.
func (s *Store) Put(ctx context.Context, key string, body io.Reader, opts *PutOptions) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, wrapErr("put", key, err)
	}
	o, err := normPut(opts)
	if err != nil {
		return Info{}, wrapErr("put", key, err)
	}
	if err := s.requireCondition(ctx, "put", o.If, putCaps); err != nil {
		return Info{}, wrapErr("put", key, err)
	}
	size := int64(-1)
	if l, ok := body.(interface{ Len() int }); ok {
		size = int64(l.Len())
	}
	o.If = s.wire(o.If)
	info, err := s.b.Put(ctx, key, body, size, o)
	return info, wrapErr("put", key, s.explainRefusal(ctx, key, o.If, err))
}

// explainRefusal turns the 412 answer to a write-once create (IfAbsent) of a
// key that a HEAD then finds absent into ErrCreateRefused. Every write-once
// create goes through here (documents, leases, tree locks, folder journals,
// ledger segments), so none of them reports a refusal nobody caused as
// contention ("gave up after repeated conflicting writes", "held by another
// holder"). It costs one HEAD, only after such a 412. A key created and
// deleted again between the two requests also reads as absent: callers that
// retry creates (docstore) retry this one a few times first.
func (s *Store) explainRefusal(ctx context.Context, key string, cond Condition, err error) error {
	if err == nil || !cond.Absent || !errors.Is(err, ErrPreconditionFailed) || ctx.Err() != nil {
		return err
	}
	if _, herr := s.b.Head(ctx, key); !errors.Is(herr, ErrNotFound) {
		return err
	}
	return &createRefusedError{key: key, cause: err}
}

// PutBytes writes data in one request.
func (s *Store) PutBytes(ctx context.Context, key string, data []byte, opts *PutOptions) (Info, error) {
	return s.Put(ctx, key, bytes.NewReader(data), opts)
}

// Delete removes key. Deleting a missing key is not an error. A condition is
// honoured only where the store enforces it (most S3-compatible servers, MinIO
// included, ignore If-Match on DELETE: such a Delete fails with ErrNotSupported;
// write a tombstone with a conditional Put instead).
func (s *Store) Delete(ctx context.Context, key string, cond Condition) error {
	if err := ValidateKey(key); err != nil {
		return wrapErr("delete", key, err)
	}
	if err := cond.checkEmptyMatch(); err != nil {
		return wrapErr("delete", key, err)
	}
	cond.Match = NormalizeETag(cond.Match)
	if cond.Absent {
		return wrapErr("delete", key, fmt.Errorf("%w: delete takes only an if-match condition", ErrNotSupported))
	}
	if err := s.requireCondition(ctx, "delete", cond, deleteCaps); err != nil {
		return wrapErr("delete", key, err)
	}
	return wrapErr("delete", key, s.b.Delete(ctx, key, s.wire(cond)))
}

// Copy copies src to dst on the server, keeping content, content type and user
// metadata. A condition applies to dst and is honoured only where the store
// enforces it (MinIO ignores destination conditions on CopyObject). The Info
// returned has the copy's ETag; its Size, ContentType and Metadata may be zero
// (s3 sends one CopyObject request, whose answer does not carry them): Head
// dst for them.
func (s *Store) Copy(ctx context.Context, src, dst string, cond Condition) (Info, error) {
	if err := ValidateKey(src); err != nil {
		return Info{}, wrapErr("copy", src, err)
	}
	if err := ValidateKey(dst); err != nil {
		return Info{}, wrapErr("copy", dst, err)
	}
	if err := cond.checkEmptyMatch(); err != nil {
		return Info{}, wrapErr("copy", dst, err)
	}
	cond.Match = NormalizeETag(cond.Match)
	if err := s.requireCondition(ctx, "copy", cond, copyCaps); err != nil {
		return Info{}, wrapErr("copy", dst, err)
	}
	cond = s.wire(cond)
	info, err := s.b.Copy(ctx, src, dst, cond)
	return info, wrapErr("copy", src+" -> "+dst, s.explainRefusal(ctx, dst, cond, err))
}

// List yields the objects whose keys start with prefix, in UTF-8 byte order,
// fetching pages lazily. Entries carry no Metadata or ContentType. Stop early by
// breaking out of the loop. An error ends the sequence.
func (s *Store) List(ctx context.Context, prefix string, opts *ListOptions) iter.Seq2[Info, error] {
	var o ListOptions
	if opts != nil {
		o = *opts
	}
	if o.PageSize <= 0 || o.PageSize > 1000 {
		o.PageSize = 1000
	}
	return func(yield func(Info, error) bool) {
		if err := ValidatePrefix(prefix); err != nil {
			yield(Info{}, wrapErr("list", prefix, err))
			return
		}
		cursor := ""
		for {
			page, err := s.b.List(ctx, prefix, cursor, o)
			if err != nil {
				yield(Info{}, wrapErr("list", prefix, err))
				return
			}
			for _, e := range page.Entries {
				if !yield(e, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			cursor = page.Next
		}
	}
}

// ListAll collects a listing into a slice. Use List for large prefixes.
func (s *Store) ListAll(ctx context.Context, prefix string, opts *ListOptions) ([]Info, error) {
	var out []Info
	for info, err := range s.List(ctx, prefix, opts) {
		if err != nil {
			return out, err
		}
		out = append(out, info)
	}
	return out, nil
}

// BatchDeleter is implemented by backends that delete many keys in one
// request (S3's DeleteObjects). DeleteBatch returns the keys that failed;
// missing keys are not failures.
type BatchDeleter interface {
	DeleteBatch(ctx context.Context, keys []string) (failed map[string]error, err error)
}

// DeleteMany deletes keys unconditionally: in batches where the backend can,
// else one by one, concurrency at a time. A missing key is not an error. It
// returns the keys that could not be deleted with their errors (nil if all
// went), or an error if the store could not be asked at all.
func (s *Store) DeleteMany(ctx context.Context, keys []string, concurrency int) (map[string]error, error) {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return nil, wrapErr("delete", k, err)
		}
	}
	if bd, ok := s.b.(BatchDeleter); ok {
		failed, err := bd.DeleteBatch(ctx, keys)
		if err != nil {
			return nil, wrapErr("delete", fmt.Sprintf("%d keys", len(keys)), err)
		}
		return failed, nil
	}
	var mu sync.Mutex
	failed := map[string]error{}
	sem := make(chan struct{}, max(concurrency, 1))
	var wg sync.WaitGroup
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.b.Delete(ctx, k, Condition{}); err != nil && !errors.Is(err, ErrNotFound) {
				mu.Lock()
				failed[k] = wrapErr("delete", k, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed, nil
}
