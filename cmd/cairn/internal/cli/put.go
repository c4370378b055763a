package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/progress"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/policy"
)

func putCmd(e *env) *cobra.Command {
	var ifAbsent, retryOnChange, unfenced bool
	var ifMatch, contentType, fenceToken string
	var partSize int64
	var concurrency, retries int
	var obj objectFlags
	cmd := &cobra.Command{
		Use:   "put FILE (URL | --store URL --key KEY)",
		Short: "Upload a file (- for stdin) with write-once or compare-and-swap semantics",
		Long: `put streams FILE to the object URL. Large files go through a multipart upload
whose completion carries the condition, so the whole upload is atomic; when the
condition fails the upload is aborted and nothing is left behind.

The object is a URL (s3://bucket/path/key?endpoint=…, file:///dir/key, a
path, mem://name/key), or --store URL --key KEY: the key taken byte for byte,
never parsed as a URL. Use --key for a key that comes from elsewhere (an
event's $CAIRN_KEY): in a URL, '#', '?', '%' and ".." would be refused or
change which object is meant.

  --if-absent         write only if no object exists (exit 3 if one does)
  --if-match ETAG     replace only the version with this ETag (exit 3 otherwise)
  --retry-on-change   replace whatever version is current, but never one written
                      during the upload: each attempt is conditional on the
                      version seen when it started, and starts over if another
                      writer got in first (up to --retries times)
  --fence-token N     write only if N is at least the highest fencing token the
                      object has seen, and record N with it (exit 3 if a higher
                      token has written it): give it "$CAIRN_FENCING_TOKEN" in a
                      command run by 'cairn lock run', 'cairn lock tree' or
                      'cairn serve', so a holder that lost its lock cannot
                      overwrite its successor's output (package fence)
  --unfenced          write without a token over an object that carries a
                      fencing mark, keeping the mark (conditional on the
                      version read; starts over if it changes), so holders
                      below it are still refused
With --fence-token or --unfenced, stdin is read into memory in full first
(the body may have to be sent more than once).

Without --fence-token or --unfenced, put refuses (exit 3) an object that
carries a fencing mark (written or deleted with --fence-token, or a document
updated with it): overwriting it would erase the mark and let a stale holder
in. Where the store is known to enforce conditional writes without a probe
(file://, mem://, or a store this command already probed), a plain put is
conditional on the version it judged, so a fenced write that lands meanwhile
is never overwritten: a file is sent again, up to --retries times, also when
an upload's response was lost; stdin cannot be (exit 3 if the object was
replaced, 1 if the outcome is unknown). Elsewhere (an S3 store) it checks the
mark with a HEAD and then writes unconditionally.`,
		Example: `  cairn put part-0001.parquet 's3://lake/datasets/orders/part-0001.parquet' --if-absent
  cairn put registry.json s3://lake/metastore/registry.json --if-match 9b2cf535f27731c974343645a3985328
  cairn put - --store file:///srv/mirror --key "$CAIRN_KEY" --fence-token "$CAIRN_FENCING_TOKEN"
  cairn lock run s3://lake/locks/daily -- sh -c 'build > out.csv && cairn put out.csv s3://lake/reports/daily.csv --fence-token "$CAIRN_FENCING_TOKEN"'`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := obj.args(args[1:]); err != nil {
				return err
			}
			n := 0
			for _, b := range []bool{ifAbsent, ifMatch != "", retryOnChange} {
				if b {
					n++
				}
			}
			if n > 1 {
				return usagef("--if-absent, --if-match and --retry-on-change exclude each other")
			}
			if cmd.Flags().Changed("fence-token") {
				if unfenced {
					return usagef("--fence-token and --unfenced exclude each other: pass the token your lock handed out, or --unfenced to write without one")
				}
				if n > 0 {
					return usagef("--fence-token decides by itself which version it may replace; drop --if-absent, --if-match and --retry-on-change")
				}
				token, err := parseFenceToken(fenceToken)
				if err != nil {
					return err
				}
				return putThroughFence(cmd, e, args[0], &obj, args[1:], contentType, partSize,
					func(ctx context.Context, s *objstore.Store, key string, body io.ReadSeeker, o *fence.Options) (objstore.Info, error) {
						return fence.Put(ctx, s, key, body, token, o) // fence.ErrStale exits 3
					})
			}
			if unfenced {
				if n > 0 {
					return usagef("--unfenced replaces the current version by itself (conditionally, starting over if it changes); drop --if-absent, --if-match and --retry-on-change")
				}
				return putThroughFence(cmd, e, args[0], &obj, args[1:], contentType, partSize, fence.PutKeepingMark)
			}
			ctx := cmd.Context()
			s, key, err := obj.open(ctx, args[1:])
			if err != nil {
				return err
			}
			defer s.Close()
			var size int64
			open := func() (io.Reader, func(), error) {
				if args[0] == "-" {
					return e.stdin, func() {}, nil
				}
				f, err := os.Open(args[0])
				if err != nil {
					return nil, nil, usagef("%v", err)
				}
				if fi, err := f.Stat(); err == nil {
					size = fi.Size()
				}
				return f, func() { f.Close() }, nil
			}
			if args[0] == "-" && retryOnChange {
				return usagef("--retry-on-change needs a file it can read again, not stdin")
			}
			if contentType == "" {
				contentType = detectContentType(key, args[0])
			}
			sent, lost := 0, 0 // uploads sent; guarded ones whose response was lost
			for attempt := 0; ; attempt++ {
				// A fenced object's mark must survive: refuse it, and write
				// conditionally on the version judged (guard).
				cur, herr := s.Head(ctx, key)
				// A HEAD refused for another reason (write-only or wrong
				// credentials) leaves the decision to the upload, which may
				// then only create the key (guard below).
				unreadable := herr != nil && !errors.Is(herr, objstore.ErrNotFound)
				if herr == nil {
					if err := fence.CheckUnfencedAt(ctx, s, key, cur); errors.Is(err, objstore.ErrPreconditionFailed) && attempt < retries {
						continue // it changed while its body was read
					} else if err != nil {
						return fencedRefusal(err)
					}
				}
				cond := objstore.Condition{Absent: ifAbsent, Match: ifMatch}
				guarded := false
				if retryOnChange {
					var err error
					if cond, err = objstore.Replacing(cur, herr); err != nil {
						return err
					}
				} else if err := precheck(ctx, s, key, cond); err != nil {
					return err
				} else if cond.IsZero() && canGuard(e, s) {
					cond, guarded = objstore.IfAbsent(), true
					if !unreadable {
						cond, _ = objstore.Replacing(cur, herr)
					}
				}
				if sent > 0 && args[0] == "-" {
					if lost > 0 {
						return fmt.Errorf("%w: the response to the upload of %s was lost, so whether it landed is not known, and stdin cannot be sent again: check the object (cairn stat), or run it again from a file", objstore.ErrAmbiguous, safetext.Escape(key))
					}
					return fmt.Errorf("%w: %s was replaced by another writer during the upload and stdin cannot be sent again; nothing was written: run it again", objstore.ErrPreconditionFailed, safetext.Escape(key))
				}
				r, closeFn, err := open()
				if err != nil {
					return err
				}
				bar := progress.New(e.stderr, key, size)
				sent++
				info, err := s.Upload(ctx, key, r, &objstore.UploadOptions{PutOptions: objstore.PutOptions{If: cond, ContentType: contentType},
					PartSize: partSize, Concurrency: concurrency, Progress: bar.Set})
				closeFn()
				bar.Done()
				if guarded && unreadable && errors.Is(err, objstore.ErrPreconditionFailed) {
					return fmt.Errorf("%w: %s exists, and reading it to tell whether it carries a fencing mark failed (%v); nothing was written", objstore.ErrPreconditionFailed, safetext.Escape(key), herr)
				}
				if guarded && errors.Is(err, objstore.ErrAmbiguous) && ctx.Err() == nil && (attempt < retries || args[0] == "-") {
					// The condition was ours, not the user's: a lost response
					// (a reset, a 503 the SDK may not retry under a condition)
					// is settled by sending the file again on what is there
					// now. At most one of the two can land on the version
					// judged; if the first landed, the second replaces it with
					// the same bytes.
					lost++
					e.log.Info("the upload's response was lost; reading the object and sending it again", "key", key, "attempt", attempt+1, "err", err)
					continue
				}
				changed := errors.Is(err, objstore.ErrPreconditionFailed) || guarded && errors.Is(err, objstore.ErrConflict) // 409: a racing write (AWS)
				if (retryOnChange || guarded) && changed {
					if attempt < retries || guarded && args[0] == "-" {
						e.log.Info("the object changed during the upload; starting over", "key", key, "attempt", attempt+1)
						continue
					}
					if guarded {
						return fmt.Errorf("%w: %s was replaced by other writers during each of %d uploads; nothing was written: run it again, or raise --retries", objstore.ErrPreconditionFailed, safetext.Escape(key), attempt+1)
					}
				}
				if err != nil {
					return err
				}
				if e.json {
					return e.writeJSON(info)
				}
				_, err = fmt.Fprintln(e.stdout, info.ETag)
				return err
			}
		},
	}
	cmd.Flags().BoolVar(&ifAbsent, "if-absent", false, "write only if the key is free (If-None-Match: *)")
	nonEmptyVar(cmd.Flags(), &ifMatch, "if-match", "", "replace only the object with this ETag",
		"an empty ETag would make the write unconditional").check = checkETag
	cmd.Flags().StringVar(&contentType, "content-type", "", "the object's Content-Type (default: from the key's or the file's extension, else application/octet-stream)")
	nonEmptyVar(cmd.Flags(), &fenceToken, "fence-token", "", "write only if this fencing token is at least the highest the object has seen (e.g. \"$CAIRN_FENCING_TOKEN\")", fenceTokenEmpty)
	cmd.Flags().BoolVar(&retryOnChange, "retry-on-change", false, "replace the current version; start over if it changes during the upload")
	cmd.Flags().BoolVar(&unfenced, "unfenced", false, "write without a fencing token over an object that carries a fencing mark, keeping the mark")
	cmd.Flags().IntVar(&retries, "retries", 5, "attempts for --retry-on-change (and for a plain put whose object changed during the upload)")
	cmd.Flags().Int64Var(&partSize, "part-size", 16<<20, "multipart part size in bytes")
	cmd.Flags().IntVar(&concurrency, "concurrency", 4, "parts uploaded at once")
	obj.register(cmd)
	return cmd
}

// parseFenceToken reads --fence-token; an empty value is most often an
// unset $CAIRN_FENCING_TOKEN.
func parseFenceToken(v string) (int64, error) {
	if strings.TrimSpace(v) == "" {
		return 0, usagef("--fence-token is empty: %s", fenceTokenEmpty)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, usagef("--fence-token %q is not a fencing token (a whole number, 0 or more)", v)
	}
	return n, nil
}

// fenceTokenEmpty is what to do about an empty --fence-token.
const fenceTokenEmpty = "pass the token your lock handed out (CAIRN_FENCING_TOKEN is set only in commands run by 'cairn lock run', 'cairn lock tree' and 'cairn serve')"

// checkETag refuses an --if-match that is an empty ETag once its quotes and
// spaces are dropped (`""`).
func checkETag(v string) error {
	if objstore.NormalizeETag(v) == "" {
		return fmt.Errorf("%q is an empty ETag, which would make the write unconditional", v)
	}
	return nil
}

// putThroughFence is put --fence-token (fence.Put) and put --unfenced
// (fence.PutKeepingMark): both read the object's mark and write conditionally
// on the version they judged, so they may send the body more than once.
func putThroughFence(cmd *cobra.Command, e *env, file string, obj *objectFlags, urls []string, contentType string, partSize int64,
	write func(context.Context, *objstore.Store, string, io.ReadSeeker, *fence.Options) (objstore.Info, error)) error {
	ctx := cmd.Context()
	s, key, err := obj.open(ctx, urls)
	if err != nil {
		return err
	}
	defer s.Close()
	var body io.ReadSeeker
	if file == "-" {
		data, err := io.ReadAll(e.stdin) // it may be sent more than once
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	} else {
		f, err := os.Open(file)
		if err != nil {
			return usagef("%v", err)
		}
		defer f.Close()
		body = f
	}
	if contentType == "" {
		contentType = detectContentType(key, file)
	}
	info, err := write(ctx, s, key, body, &fence.Options{ContentType: contentType, PartSize: partSize})
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(info)
	}
	_, err = fmt.Fprintln(e.stdout, info.ETag)
	return err
}

// fencedRefusal says, in the CLI's words, that a write without a token met a
// fenced key (a *fence.FencedError); it exits 3.
func fencedRefusal(err error) error {
	var fe *fence.FencedError
	if !errors.As(err, &fe) {
		return err
	}
	what := "is fenced"
	switch {
	case fe.Deleted:
		what = "was deleted by a fenced writer"
	case fe.Document:
		what = "is a fenced document"
	}
	return fencedCLIError(fmt.Sprintf("%s %s (highest token %d): pass --fence-token, or --unfenced to write without a token while keeping the mark; nothing was written", safetext.Escape(fe.Key), what, fe.Highest))
}

// fencedCLIError is a *fence.FencedError in the CLI's words; it is
// fence.ErrFenced (exit 3).
type fencedCLIError string

func (e fencedCLIError) Error() string        { return string(e) }
func (e fencedCLIError) Is(target error) bool { return target == fence.ErrFenced }

// canGuard reports whether a plain put may be made conditional on the
// version it judged unfenced: the store is known, without a request, to
// enforce conditional PUTs (a directory or memory store, capabilities given
// in the store's options, or a verdict this process already loaded). Neither
// a probe nor a saved verdict's check (both write scratch objects) runs for a
// plain put, and an S3 store that was not judged yet is written
// unconditionally after the HEAD that found no mark, as before marks were
// checked; there a fenced write landing between that HEAD and the upload is
// overwritten (see the README).
func canGuard(e *env, s *objstore.Store) bool {
	caps, ok := s.KnownCapabilities()
	if !ok {
		e.log.Debug("writing without a condition: the store's capabilities are not known without a probe")
		return false
	}
	return caps.ConditionalWrites()
}

func policyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Write policies that stop writers bypassing conditional writes",
	}
	var bucket, principal string
	var createOnly, cas []string
	gen := &cobra.Command{
		Use:   "generate --bucket B [--create-only PREFIX]… [--cas PREFIX]… [--principal ARN]",
		Short: "Print an AWS bucket policy that denies unconditional writes under prefixes",
		Long: `generate prints an S3 bucket policy denying PutObject under --create-only
prefixes unless it carries If-None-Match, and under --cas prefixes unless it
carries If-Match or If-None-Match (so the first version can be created). Multipart
part uploads stay allowed (s3:ObjectCreationOperation). Apply it with
'aws s3api put-bucket-policy --bucket B --policy file://policy.json'.

MinIO rejects these condition keys; there, wrap stores with the objstore/policy
package to enforce the same rules in every cairn client.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if bucket == "" {
				return usagef("--bucket is required")
			}
			data, err := policy.BucketPolicy(bucket, policy.Rules{CreateOnly: createOnly, CAS: cas}, principal)
			if err != nil {
				return usageError{err}
			}
			_, err = fmt.Fprintln(e.stdout, string(data))
			return err
		},
	}
	nonEmptyVar(gen.Flags(), &bucket, "bucket", "", "bucket name", "name the bucket")
	nonEmptyArrayVar(gen.Flags(), &createOnly, "create-only", "prefix where objects are write-once (repeatable)", "an empty prefix would cover the whole bucket; name a prefix")
	nonEmptyArrayVar(gen.Flags(), &cas, "cas", "prefix where writes must be compare-and-swap (repeatable)", "an empty prefix would cover the whole bucket; name a prefix")
	nonEmptyVar(gen.Flags(), &principal, "principal", "", "IAM principal ARN the policy applies to (default: everyone)", "an empty principal would mean everyone; drop --principal to mean that")
	cmd.AddCommand(gen)
	return cmd
}

// precheck refuses a conditional put whose condition already fails, before a
// byte is uploaded (a wrong --if-match used to upload all of a 100 MiB file
// first). The conditional completion still decides: the object may change
// between this HEAD and the end of the upload. A HEAD that fails for another
// reason leaves the decision to the upload.
func precheck(ctx context.Context, s *objstore.Store, key string, cond objstore.Condition) error {
	if !cond.Absent && cond.Match == "" {
		return nil
	}
	info, err := s.Head(ctx, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound) && cond.Match != "":
		return fmt.Errorf("%w: %s does not exist, so it has no ETag %s; nothing was uploaded (drop --if-match to create it, or use --if-absent)", objstore.ErrPreconditionFailed, safetext.Escape(key), cond.Match)
	case err != nil:
		return nil
	case cond.Absent:
		return fmt.Errorf("%w: %s already exists (ETag %s); nothing was uploaded (drop --if-absent to replace it, or use --if-match %s)", objstore.ErrPreconditionFailed, safetext.Escape(key), info.ETag, info.ETag)
	case info.ETag != objstore.NormalizeETag(cond.Match):
		return fmt.Errorf("%w: %s has ETag %s now, not %s: it changed since you read it; nothing was uploaded (read it again, then put with the new ETag)", objstore.ErrPreconditionFailed, safetext.Escape(key), info.ETag, objstore.NormalizeETag(cond.Match))
	}
	return nil
}

// detectContentType guesses the Content-Type from the key's extension, else
// the file's; "" (the store's default, application/octet-stream) if neither
// is known.
func detectContentType(key, file string) string {
	for _, name := range []string{key, file} {
		if ext := path.Ext(name); ext != "" {
			if t := mime.TypeByExtension(ext); t != "" {
				return t
			}
		}
	}
	return ""
}
