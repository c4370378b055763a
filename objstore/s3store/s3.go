// Package s3store is the objstore backend for Amazon S3 and S3-compatible servers
// (MinIO, Ceph RGW, R2, …), on aws-sdk-go-v2.
//
// Credentials come from the standard AWS chain (environment, shared config and
// credentials files, SSO, web identity, instance roles). The endpoint comes from
// the URL's endpoint parameter, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else
// AWS itself.
//
// # Guarantees
//
//   - Conditional writes (PutObject and CompleteMultipartUpload with If-None-Match
//     or If-Match) are sent once: the SDK's automatic retries are disabled for
//     them, since a retry of a write that was applied would fail its own condition
//     and be reported as a false 412. Unconditional, idempotent requests keep the
//     SDK's retries.
//   - A write that fails without a definite answer (connection reset, timeout,
//     5xx, cancelled context after sending) is reported with objstore.ErrAmbiguous.
//   - The backend declares no capabilities: what an endpoint enforces is decided
//     by objstore.Probe (MinIO, for one, ignores If-Match on DELETE and destination
//     conditions on CopyObject).
//
// # Limits
//
//   - Copy is a single CopyObject request: objects up to 5 GiB.
//   - Multipart parts are at least 5 MiB (except the last), at most 10,000 parts.
package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cairn-s3/cairn/objstore"
)

// Options configure a Backend; a nil *Options means all defaults.
type Options struct {
	// Endpoint, e.g. "http://127.0.0.1:9000". Default: AWS_ENDPOINT_URL_S3 or
	// AWS_ENDPOINT_URL if set, else AWS.
	Endpoint string
	// Region. Default: AWS_REGION / the shared config, else "us-east-1".
	Region string
	// PathStyle addresses buckets as endpoint/bucket instead of bucket.endpoint
	// (MinIO and most self-hosted servers need it). Default: false.
	PathStyle bool
	// AccessKeyID and SecretAccessKey set static credentials. Default: the
	// standard AWS credential chain.
	AccessKeyID, SecretAccessKey string
	// Profile selects a shared-config profile. Default: AWS_PROFILE or "default".
	Profile string
	// HTTPClient overrides the SDK's HTTP client. Default: the SDK's.
	HTTPClient *http.Client
	// CreateBucket makes the URL opener create the bucket if it does not exist
	// (URL parameter create_bucket=true). Default: false.
	CreateBucket bool
}

// Backend is an objstore.Backend on one S3 bucket.
type Backend struct {
	c      *s3.Client
	bucket string
	where  string
}

func init() {
	objstore.Register("s3", func(ctx context.Context, u *url.URL) (objstore.Backend, error) {
		bucket, o, prefix, err := optionsFromURL(u)
		if err != nil {
			return nil, err
		}
		b, err := OpenBackend(ctx, bucket, &o)
		if err != nil {
			return nil, err
		}
		if o.CreateBucket {
			if err := b.EnsureBucket(ctx); err != nil {
				return nil, err
			}
		}
		return objstore.Prefixed(b, prefix)
	})
}

// optionsFromURL parses s3://bucket/prefix?… into the bucket, the options
// and the key prefix.
func optionsFromURL(u *url.URL) (bucket string, o Options, prefix string, err error) {
	bucket = u.Host
	if bucket == "" {
		return "", o, "", fmt.Errorf("%w: s3 URL without a bucket: use s3://bucket/prefix", objstore.ErrInvalidURL)
	}
	q := u.Query()
	for k := range q {
		v := q.Get(k)
		switch k {
		case "endpoint":
			eu, err := url.Parse(v)
			if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
				return "", o, "", fmt.Errorf("%w: endpoint=%q must be an http:// or https:// URL", objstore.ErrInvalidURL, v)
			}
			o.Endpoint = v
		case "region":
			o.Region = v
		case "profile":
			o.Profile = v
		case "path_style", "use_path_style", "s3ForcePathStyle", "create_bucket":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", o, "", fmt.Errorf("%w: %s=%q is not a boolean", objstore.ErrInvalidURL, k, v)
			}
			if k == "create_bucket" {
				o.CreateBucket = b
			} else {
				o.PathStyle = b
			}
		default:
			return "", o, "", fmt.Errorf("%w: unknown s3 URL parameter %q (known: endpoint, region, path_style, profile, create_bucket)", objstore.ErrInvalidURL, k)
		}
	}
	return bucket, o, strings.TrimPrefix(u.Path, "/"), nil
}

// Open returns a Store over the bucket (OpenBackend); opts may be nil (the
// defaults). It does not contact the server.
func Open(ctx context.Context, bucket string, opts *Options) (*objstore.Store, error) {
	b, err := OpenBackend(ctx, bucket, opts)
	if err != nil {
		return nil, err
	}
	return objstore.New(b, nil), nil
}

// OpenBackend returns the Backend for the bucket, for wrappers and the
// backend's own methods (Client, EnsureBucket); opts may be nil (the
// defaults). It does not contact the server.
func OpenBackend(ctx context.Context, bucket string, opts *Options) (*Backend, error) {
	if bucket == "" {
		return nil, fmt.Errorf("%w: no bucket given", objstore.ErrInvalidURL)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	var lo []func(*config.LoadOptions) error
	if o.Region != "" {
		lo = append(lo, config.WithRegion(o.Region))
	}
	if o.Profile != "" {
		lo = append(lo, config.WithSharedConfigProfile(o.Profile))
	}
	if o.AccessKeyID != "" {
		lo = append(lo, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	if o.HTTPClient != nil {
		lo = append(lo, config.WithHTTPClient(o.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("s3: loading AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		// Many S3-compatible servers reject the newer default checksum headers.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	where := "s3://" + bucket
	if o.Endpoint != "" {
		where += " at " + o.Endpoint
	}
	return &Backend{c: c, bucket: bucket, where: where}, nil
}

// Client returns the underlying SDK client.
func (b *Backend) Client() *s3.Client { return b.c }

// EnsureBucket creates the bucket if it does not exist.
func (b *Backend) EnsureBucket(ctx context.Context) error {
	_, err := b.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b.bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return b.mapErr(err, false)
	}
	return nil
}

func (b *Backend) String() string { return b.where }

// Close does nothing: the SDK client holds no resources that need releasing.
func (b *Backend) Close() error { return nil }

// Capabilities are unknown until probed.
func (b *Backend) Capabilities() (objstore.Capabilities, bool) { return objstore.Capabilities{}, false }

// MinPartSize is S3's 5 MiB.
func (b *Backend) MinPartSize() int64 { return 5 << 20 }

// once disables the SDK's retries for a request that must not be repeated.
func once(o *s3.Options) { o.RetryMaxAttempts = 1 }

func condOpts(cond objstore.Condition) []func(*s3.Options) {
	if cond.IsZero() {
		return nil
	}
	return []func(*s3.Options){once}
}

// condHeaders are the If-Match and If-None-Match headers of cond: the ETag
// quoted, as HTTP has it, or bare where cond.Unquoted says so (the only form
// Ceph RGW 16.2 honours; see objstore.Capabilities.IfMatchUnquoted).
func condHeaders(cond objstore.Condition) (ifMatch, ifNoneMatch *string) {
	if cond.Absent {
		ifNoneMatch = aws.String("*")
	}
	if cond.Match != "" {
		if cond.Unquoted {
			ifMatch = aws.String(cond.Match)
		} else {
			ifMatch = aws.String(`"` + cond.Match + `"`)
		}
	}
	return
}

// mapErr maps SDK errors to objstore sentinels, once, for every operation,
// and reduces the SDK's chain (operation, status, request and host ids, retry
// attempts) to one sentence that leads with what happened; the chain itself
// stays reachable with errors.As and through objstore.Detail.
func (b *Backend) mapErr(err error, write bool) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	var re *awshttp.ResponseError
	status, code := 0, ""
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	wrap := func(kind error, format string, a ...any) error {
		return &sdkError{kind: kind, msg: fmt.Sprintf(format, a...), raw: err}
	}
	what := summary(err, status, ae)
	var noKey *types.NoSuchKey
	var noBucket *types.NoSuchBucket
	var noUpload *types.NoSuchUpload
	switch {
	case errors.As(err, &noBucket) || code == "NoSuchBucket":
		return &sdkError{kind: objstore.ErrBucketNotFound, alone: true, raw: err,
			msg: fmt.Sprintf("bucket %q does not exist at %s; create it or fix the URL", b.bucket, b.where)}
	case errors.As(err, &noKey) || code == "NoSuchKey" || code == "NotFound" || errors.As(err, &noUpload):
		return wrap(objstore.ErrNotFound, "%s", what)
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return wrap(objstore.ErrPreconditionFailed, "%s", what)
	case code == "ExistingObjectIsDirectory" || code == "ObjectParentIsFile":
		// versitygw's posix backend keeps objects as files: "a/b" and
		// "a/b/c" cannot both exist. Not a race to retry: the key is invalid
		// on this store, as on the directory store.
		return wrap(objstore.ErrInvalidKey, "%s: this server stores objects as files, so a key cannot be both an object and a folder of others", what)
	case status == http.StatusConflict:
		return wrap(objstore.ErrConflict, "%s", what)
	case status == http.StatusNotFound:
		return wrap(objstore.ErrNotFound, "%s", what)
	case status == http.StatusNotImplemented || code == "NotImplemented":
		return wrap(objstore.ErrNotSupported, "%s", what)
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "ExpiredToken" || code == "InvalidToken":
		return wrap(nil, "%s rejected the credentials (%s); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile", b.where, what)
	case code == "AccessDenied" || status == http.StatusForbidden:
		return wrap(nil, "%s denied access (%s); check the bucket policy and the IAM permissions", b.where, what)
	case code == "KeyTooLongError" || code == "XMinioInvalidObjectName" || code == "InvalidObjectName":
		return wrap(objstore.ErrInvalidKey, "%s", what)
	case status == http.StatusInsufficientStorage || code == "XMinioStorageFull":
		// Refused, not applied: the server's disks are full.
		return wrap(objstore.ErrUnwritable, "%s has no room left (%s): free space on the server and retry", b.where, what)
	}
	// A write the SDK sent more than once (unconditional writes keep its
	// retries) may have been applied by an earlier attempt, whatever the last
	// one says; and a write answered 2xx whose response could not be read was
	// applied.
	var retried *retry.MaxAttemptsError
	if write && (errors.As(err, &retried) && retried.Attempt > 1 || status >= 200 && status < 300) {
		return wrap(objstore.ErrAmbiguous, "%s", what)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return wrap(nil, "cannot reach %s (is the server running and the endpoint right?): %v", b.where, oe)
	}
	if status == 0 && strings.Contains(err.Error(), "get identity") {
		return wrap(nil, "no usable AWS credentials for %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where an IAM role is available", b.where)
	}
	// A write is ambiguous only if it may have reached the server: a 5xx, or a
	// failure (or cancellation) while the request was being sent.
	var sendErr *smithyhttp.RequestSendError
	var canceled *smithy.CanceledError
	if write && (status >= 500 || errors.As(err, &sendErr) || errors.As(err, &canceled)) {
		return wrap(objstore.ErrAmbiguous, "%s", what)
	}
	return wrap(nil, "%s", what)
}

// summary is the SDK error in a few words: "PutObject: HTTP 412
// PreconditionFailed: At least one of the pre-conditions you specified did not
// hold", or the operation and the underlying cause for a transport failure.
func summary(err error, status int, ae smithy.APIError) string {
	var oe *smithy.OperationError
	op := ""
	if errors.As(err, &oe) {
		op = oe.Operation() + ": "
	}
	if ae != nil || status != 0 {
		var parts []string
		if status != 0 {
			parts = append(parts, fmt.Sprintf("HTTP %d", status))
		}
		if ae != nil && ae.ErrorCode() != "" {
			parts = append(parts, ae.ErrorCode())
		}
		out := op + strings.Join(parts, " ")
		if ae != nil && ae.ErrorMessage() != "" {
			out += ": " + ae.ErrorMessage()
		}
		return out
	}
	// Transport failures: the innermost cause says it best ("connection
	// reset by peer", "context deadline exceeded").
	cause := err
	for {
		next := errors.Unwrap(cause)
		if next == nil {
			break
		}
		cause = next
	}
	return op + cause.Error()
}

// sdkError is an S3 error in one readable sentence, matching its objstore
// sentinel (kind, when there is one) and, through the raw error, every SDK
// type errors.As looks for.
type sdkError struct {
	kind  error
	msg   string
	alone bool // msg says what kind says; do not prefix it
	raw   error
}

func (e *sdkError) Error() string {
	if e.kind == nil || e.alone {
		return e.msg
	}
	return e.kind.Error() + ": " + e.msg
}

func (e *sdkError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.raw}
	}
	return []error{e.kind, e.raw}
}

// Detail is the SDK's whole chain, for debug logs.
func (e *sdkError) Detail() string { return e.raw.Error() }

func infoFrom(key string, size *int64, etag *string, lm *time.Time, vid *string, ct *string, md map[string]string) objstore.Info {
	i := objstore.Info{Key: key, Size: aws.ToInt64(size), ETag: objstore.NormalizeETag(aws.ToString(etag)),
		VersionID: aws.ToString(vid), ContentType: aws.ToString(ct)}
	if lm != nil {
		i.LastModified = lm.UTC()
	}
	if vid != nil && *vid == "null" {
		i.VersionID = ""
	}
	if len(md) > 0 {
		i.Metadata = make(map[string]string, len(md))
		for k, v := range md {
			i.Metadata[strings.ToLower(k)] = v
		}
	}
	return i
}

// Get implements objstore.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	out, err := b.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return nil, objstore.Info{}, b.mapErr(err, false)
	}
	return out.Body, infoFrom(key, out.ContentLength, out.ETag, out.LastModified, out.VersionId, out.ContentType, out.Metadata), nil
}

// Head implements objstore.Backend.
func (b *Backend) Head(ctx context.Context, key string) (objstore.Info, error) {
	out, err := b.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return objstore.Info{}, b.mapErr(err, false)
	}
	return infoFrom(key, out.ContentLength, out.ETag, out.LastModified, out.VersionId, out.ContentType, out.Metadata), nil
}

// Put implements objstore.Backend. A body that is not an io.ReadSeeker is
// buffered in memory (the SDK needs a rewindable body to sign it).
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	rs, ok := body.(io.ReadSeeker)
	if !ok || size < 0 {
		data, err := io.ReadAll(body)
		if err != nil {
			return objstore.Info{}, fmt.Errorf("reading the body: %w", err)
		}
		rs, size = bytes.NewReader(data), int64(len(data))
	}
	ifMatch, ifNoneMatch := condHeaders(opts.If)
	out, err := b.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &b.bucket, Key: &key, Body: rs, ContentLength: aws.Int64(size),
		ContentType: aws.String(opts.ContentType), Metadata: opts.Metadata,
		IfMatch: ifMatch, IfNoneMatch: ifNoneMatch,
	}, condOpts(opts.If)...)
	if err != nil {
		return objstore.Info{}, b.mapErr(err, true)
	}
	return objstore.Info{Key: key, Size: size, ETag: objstore.NormalizeETag(aws.ToString(out.ETag)),
		VersionID: aws.ToString(out.VersionId), LastModified: time.Now().UTC(), ContentType: opts.ContentType,
		Metadata: opts.Metadata}, nil
}

// Delete implements objstore.Backend.
func (b *Backend) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	ifMatch, _ := condHeaders(cond)
	_, err := b.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: &key, IfMatch: ifMatch}, condOpts(cond)...)
	err = b.mapErr(err, true)
	if cond.Match != "" && errors.Is(err, objstore.ErrPreconditionFailed) {
		// SeaweedFS answers 412, not 404, to a conditional delete of a
		// missing key: the contract is ErrNotFound. Nothing was deleted
		// either way; a HEAD tells which.
		if _, herr := b.Head(ctx, key); errors.Is(herr, objstore.ErrNotFound) {
			return herr
		}
	}
	return err
}

// List implements objstore.Backend.
//
// Two server bugs are corrected here, as every caller would otherwise have to
// (found on gofakes3): a common prefix repeated on the next page, and a common
// prefix returned although it sorts before StartAfter (S3 and MinIO never
// return one, even with keys after StartAfter under it). The cursor carries
// the last entry yielded, and nothing at or before it, or at or before
// StartAfter, is yielded.
func (b *Backend) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: aws.String(prefix), MaxKeys: aws.Int32(int32(opts.PageSize)),
		EncodingType: types.EncodingTypeUrl}
	if opts.Delimiter != "" {
		in.Delimiter = aws.String(opts.Delimiter)
	}
	if opts.StartAfter != "" {
		in.StartAfter = aws.String(opts.StartAfter)
	}
	token, last := splitCursor(cursor)
	if token != "" {
		in.ContinuationToken = aws.String(token)
	}
	out, err := b.c.ListObjectsV2(ctx, in)
	var de *smithy.DeserializationError
	var se *xml.SyntaxError
	if errors.As(err, &de) && errors.As(err, &se) && strings.HasPrefix(se.Msg, "illegal character code") {
		// Ceph RGW 16.2 URL-encodes the keys but writes the continuation
		// token (the page's last key) and the start key raw: a control character in it is a
		// character reference XML 1.0 forbids, and no parser reads the page.
		return objstore.ListPage{}, fmt.Errorf("%w: list %q: the server's answer is not XML that can be read (%v): it writes a key holding a control character unencoded (Ceph RGW 16.2 does so in the continuation token of a page that ends on such a key, and in the start key); list with another page size or start key, or rename such keys with another client", objstore.ErrNotSupported, prefix, de)
	}
	if err != nil {
		return objstore.ListPage{}, b.mapErr(err, false)
	}
	keys, prefixes, err := listedNames(out)
	if err != nil {
		return objstore.ListPage{}, err
	}
	if err := b.checkReplaced(ctx, out.EncodingType, keys, prefixes); err != nil {
		return objstore.ListPage{}, err
	}
	// Merge objects and common prefixes, both sorted, into one ordered page.
	page := objstore.ListPage{Entries: make([]objstore.Info, 0, len(out.Contents)+len(out.CommonPrefixes))}
	ci, pi := 0, 0
	for ci < len(out.Contents) || pi < len(out.CommonPrefixes) {
		var e objstore.Info
		if pi < len(prefixes) && (ci == len(keys) || prefixes[pi] < keys[ci]) {
			e = objstore.Info{Key: prefixes[pi], IsPrefix: true}
			pi++
		} else {
			o := out.Contents[ci]
			e = infoFrom(keys[ci], o.Size, o.ETag, o.LastModified, nil, nil, nil)
			ci++
		}
		if e.Key <= last || e.Key <= opts.StartAfter && opts.StartAfter != "" {
			continue // repeated from an earlier page, or before StartAfter
		}
		page.Entries = append(page.Entries, e)
		last = e.Key
	}
	if aws.ToBool(out.IsTruncated) {
		page.Next = joinCursor(aws.ToString(out.NextContinuationToken), last)
	}
	return page, nil
}

// checkReplaced catches a server that ignores encoding-type=url and writes
// a key's control characters into its XML listing as U+FFFD (versitygw 1.8,
// gofakes3 1.2): a key with U+FFFD in such a listing is asked for by HEAD,
// and if it is not there the listing cannot name the real key. That is an
// error, never a silently wrong name (a caller would read, copy or audit a
// key that does not exist, and skip the one that does).
func (b *Backend) checkReplaced(ctx context.Context, enc types.EncodingType, keys, prefixes []string) error {
	if enc == types.EncodingTypeUrl {
		return nil
	}
	// A folder name (common prefix) is checked by listing one key under it.
	for _, p := range prefixes {
		if !strings.ContainsRune(p, utf8.RuneError) {
			continue
		}
		out, err := b.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: aws.String(p), MaxKeys: aws.Int32(1)})
		if err != nil {
			return b.mapErr(err, false)
		}
		if len(out.Contents) == 0 && len(out.CommonPrefixes) == 0 {
			return fmt.Errorf("%w: list: the server names folder %q, under which there is nothing: it ignores encoding-type=url and replaced characters XML cannot carry (control characters) with U+FFFD, so it cannot list such names; rename them with another client or use a server that URL-encodes listings (AWS S3, MinIO)", objstore.ErrNotSupported, p)
		}
	}
	for _, k := range keys {
		if !strings.ContainsRune(k, utf8.RuneError) {
			continue
		}
		if _, err := b.Head(ctx, k); errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("%w: list: the server names key %q, which does not exist: it ignores encoding-type=url and replaced characters XML cannot carry (control characters) with U+FFFD, so it cannot list such keys; rename them with another client or use a server that URL-encodes listings (AWS S3, MinIO)", objstore.ErrNotSupported, k)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// xmlSafe reports a string XML 1.0 can carry as text (tab, newline and CR
// are escaped by the SDK as character references, so they survive).
func xmlSafe(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
			return false
		}
	}
	return true
}

// listedNames returns the keys and common prefixes of a listing, decoded.
// Listings are asked for with encoding-type=url: XML 1.0 cannot carry most
// control characters (S3 and MinIO send them raw, making the body unreadable;
// others replace them with U+FFFD) and its parsers turn "\r" and "\r\n" into
// "\n", so only URL-encoded names come back byte-exact. A server that says
// it encoded (EncodingType "url" in the answer) is decoded; one that ignores
// the parameter sends names as they are.
func listedNames(out *s3.ListObjectsV2Output) (keys, prefixes []string, err error) {
	encoded := out.EncodingType == types.EncodingTypeUrl
	decode := func(s string) (string, error) {
		if !encoded {
			return s, nil
		}
		d, err := url.QueryUnescape(s)
		if err != nil {
			return "", fmt.Errorf("list: the server sent the URL-encoded name %q, which does not decode (%v); report it to the server's maintainers", s, err)
		}
		return d, nil
	}
	keys = make([]string, len(out.Contents))
	for i, o := range out.Contents {
		if keys[i], err = decode(aws.ToString(o.Key)); err != nil {
			return nil, nil, err
		}
	}
	prefixes = make([]string, len(out.CommonPrefixes))
	for i, p := range out.CommonPrefixes {
		if prefixes[i], err = decode(aws.ToString(p.Prefix)); err != nil {
			return nil, nil, err
		}
	}
	return keys, prefixes, nil
}

// A cursor is the server's continuation token, NUL, and the last key yielded
// (keys and tokens never contain NUL).
func joinCursor(token, last string) string { return token + "\x00" + last }

func splitCursor(c string) (token, last string) {
	token, last, _ = strings.Cut(c, "\x00")
	return token, last
}

// copySource URL-encodes bucket/key for x-amz-copy-source, escaping everything
// but unreserved characters and "/" (so "+" and "%" survive the server's decoding).
func copySource(bucket, key string) string {
	var sb strings.Builder
	sb.WriteString(bucket)
	sb.WriteByte('/')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '/' || c == '-' || c == '_' || c == '.' || c == '~' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	return sb.String()
}

// Copy implements objstore.Backend with one CopyObject request. The Info is
// its answer: the copy's ETag, Last-Modified and version; Size, ContentType
// and Metadata are not in it and are left zero. A server that answers
// without an ETag is asked with a HEAD.
func (b *Backend) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	ifMatch, ifNoneMatch := condHeaders(cond)
	out, err := b.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b.bucket, Key: &dst, CopySource: aws.String(copySource(b.bucket, src)),
		IfMatch: ifMatch, IfNoneMatch: ifNoneMatch}, condOpts(cond)...)
	if err != nil {
		return objstore.Info{}, b.mapErr(err, true)
	}
	if r := out.CopyObjectResult; r != nil && aws.ToString(r.ETag) != "" {
		return infoFrom(dst, nil, r.ETag, r.LastModified, out.VersionId, nil, nil), nil
	}
	return b.Head(ctx, dst)
}

// CreateMultipart implements objstore.Backend.
func (b *Backend) CreateMultipart(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	out, err := b.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &b.bucket, Key: &key,
		ContentType: aws.String(opts.ContentType), Metadata: opts.Metadata})
	if err != nil {
		return "", b.mapErr(err, false)
	}
	return aws.ToString(out.UploadId), nil
}

// UploadPart implements objstore.Backend.
func (b *Backend) UploadPart(ctx context.Context, key, id string, number int, body io.Reader, size int64) (objstore.Part, error) {
	rs, ok := body.(io.ReadSeeker)
	if !ok {
		data, err := io.ReadAll(body)
		if err != nil {
			return objstore.Part{}, err
		}
		rs, size = bytes.NewReader(data), int64(len(data))
	}
	out, err := b.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &b.bucket, Key: &key, UploadId: &id,
		PartNumber: aws.Int32(int32(number)), Body: rs, ContentLength: aws.Int64(size)})
	if err != nil {
		return objstore.Part{}, b.mapErr(err, false)
	}
	return objstore.Part{Number: number, ETag: objstore.NormalizeETag(aws.ToString(out.ETag)), Size: size}, nil
}

// CompleteMultipart implements objstore.Backend. It is never retried by the SDK:
// a repeated completion of an applied upload fails with NoSuchUpload.
func (b *Backend) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	cp := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cp[i] = types.CompletedPart{ETag: aws.String(`"` + p.ETag + `"`), PartNumber: aws.Int32(int32(p.Number))}
	}
	ifMatch, ifNoneMatch := condHeaders(cond)
	out, err := b.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &b.bucket, Key: &key, UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cp}, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch}, once)
	if err != nil {
		return objstore.Info{}, b.mapErr(err, true)
	}
	if aws.ToString(out.ETag) == "" {
		// Ceph RGW 16.2 answers without an ETag: ask, and take the answer
		// only if it is this upload's (S3's multipart ETag, computed from
		// the parts): a HEAD can show a later writer's object, or an older
		// one if the completion did not apply after all.
		want, ok := multipartETag(parts)
		h, herr := b.Head(ctx, key)
		if herr == nil && ok && h.ETag == want {
			return h, nil
		}
		what := "it shows another object"
		if herr != nil {
			what = herr.Error()
		}
		return objstore.Info{}, fmt.Errorf("%w: complete multipart upload of %q: answered without an ETag, and a HEAD cannot tell it is ours (%s)", objstore.ErrAmbiguous, key, what)
	}
	var size int64
	for _, p := range parts {
		size += p.Size
	}
	return objstore.Info{Key: key, Size: size, ETag: objstore.NormalizeETag(aws.ToString(out.ETag)),
		VersionID: aws.ToString(out.VersionId), LastModified: time.Now().UTC()}, nil
}

// AbortMultipart implements objstore.Backend.
func (b *Backend) AbortMultipart(ctx context.Context, key, id string) error {
	_, err := b.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &b.bucket, Key: &key, UploadId: &id})
	return b.mapErr(err, false)
}

// Uploads returns the number of multipart uploads in progress in the bucket.
func (b *Backend) Uploads(ctx context.Context) (int, error) {
	out, err := b.c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &b.bucket})
	if err != nil {
		return 0, b.mapErr(err, false)
	}
	return len(out.Uploads), nil
}

// DeleteBatch implements objstore.BatchDeleter with DeleteObjects (up to
// 1,000 keys a request, quiet mode: only failures come back).
//
// A key holding a character XML 1.0 cannot carry (a C0 control other than tab,
// newline and CR; U+FFFE, U+FFFF) is deleted by its own DeleteObject request:
// the SDK writes such a character into the DeleteObjects body as U+FFFD, so
// the server would be asked to delete another key, answer that it is not
// there, and the object would stay while DeleteBatch reported it gone. So is
// a key holding CR: the request carries it (as a character reference), but a
// server writes it raw into an error's key, which XML parsers read as LF, so
// a failure on "a\rb" would be pinned on "a\nb" and "a\rb" counted deleted.
// An error naming a key that was not in its request fails the whole request's
// keys: which of them failed cannot be told.
func (b *Backend) DeleteBatch(ctx context.Context, keys []string) (map[string]error, error) {
	failed := map[string]error{}
	var batch []string
	for _, k := range keys {
		if xmlSafe(k) && !strings.ContainsRune(k, '\r') {
			batch = append(batch, k)
			continue
		}
		if err := b.Delete(ctx, k, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			if ctx.Err() != nil {
				return nil, err
			}
			failed[k] = err
		}
	}
	keys = batch
	for start := 0; start < len(keys); start += 1000 {
		chunk := keys[start:min(start+1000, len(keys))]
		objs := make([]types.ObjectIdentifier, len(chunk))
		for i := range chunk {
			objs[i] = types.ObjectIdentifier{Key: &chunk[i]}
		}
		out, err := b.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &b.bucket, Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
		if err != nil {
			return nil, b.mapErr(err, true)
		}
		inChunk := make(map[string]bool, len(chunk))
		for _, k := range chunk {
			inChunk[k] = true
		}
		chunkFailed := map[string]error{}
		var stranger string
		for _, e := range out.Errors {
			k := aws.ToString(e.Key)
			if !inChunk[k] {
				stranger = k
				break
			}
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			chunkFailed[k] = fmt.Errorf("%s: %s", aws.ToString(e.Code), aws.ToString(e.Message))
		}
		if stranger != "" {
			err := fmt.Errorf("delete: the server reported a failure for key %q, which was not in the request, so which of the request's %d keys failed cannot be told; none is taken as deleted: delete them again", stranger, len(chunk))
			for _, k := range chunk {
				failed[k] = err
			}
			continue
		}
		maps.Copy(failed, chunkFailed)
	}
	return failed, nil
}

// multipartETag is S3's ETag for an upload of parts: the MD5 of the parts'
// binary MD5s, "-", their number; ok is false if a part's ETag is no MD5.
func multipartETag(parts []objstore.Part) (string, bool) {
	h := md5.New()
	for _, p := range parts {
		d, err := hex.DecodeString(p.ETag)
		if err != nil || len(d) != md5.Size {
			return "", false
		}
		h.Write(d)
	}
	return hex.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(parts)), true
}
