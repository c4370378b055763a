// Package objstore is cairn's narrow, honest interface to object stores: Amazon S3
// and S3-compatible servers (package s3store), a local directory (package fsstore) and memory
// (package mem).
//
// A [Store] is the concrete type users call. It validates keys, turns paged listings
// into iterators, streams large uploads through multipart uploads, and refuses to
// send a conditional request that the endpoint is not known to enforce. Backends
// implement the small [Backend] interface; wrappers (a key prefix, metrics, a
// write policy, fault injection) are Backends too, so every layer passes the same
// conformance suite (package objstoretest). A wrapper that leaves what the server
// enforces unchanged is a [Wrapper]: a Store looks through it (Unwrap) for what
// the backend beneath offers, such as the identity that lets a probe verdict be
// saved and reused.
//
// # Conditions
//
// Writes take a [Condition]: [IfAbsent] (If-None-Match: *) creates an object only if
// the key is free; [IfMatch] replaces it only if its current ETag is the one given
// (compare-and-swap); an empty ETag (IfMatch("") after a lookup that failed) is
// never "unconditional": it matches no object, and the write fails with
// [ErrPreconditionFailed]. Many "S3-compatible" servers accept these headers and ignore
// them; MinIO itself ignores If-Match on DeleteObject and destination conditions on
// CopyObject. So a Store never trusts a header: backends that implement conditions
// themselves (mem, fs) declare what they enforce, and for the others (s3) [Probe]
// proves by experiment, on scratch keys, what the endpoint enforces. The result is
// cached per Store; a conditional call the endpoint does not enforce fails with
// [ErrNotSupported] instead of silently becoming unconditional.
//
// # Probe verdicts
//
// Only a write that carries a condition needs the capabilities. Reads (Get,
// Head, List) never probe, so read-only credentials are enough to read. A
// Store whose backend identifies its server ([ServerIdentifier]: package s3store)
// finds its capabilities, on first need, in this order:
//
//  1. [Options].Capabilities, or the backend's own declaration;
//  2. the local verdict cache, a JSON file per endpoint and bucket under
//     [Options].ProbeCacheDir (default <os.UserCacheDir()>/cairn/probe/, private
//     to the user) holding the report, the endpoint, the bucket, the server's
//     Server response header and the time of the probe; it is used only if it
//     is younger than [Options].ProbeTTL (default 24h), names the same endpoint
//     and bucket, the server, asked once with a HeadBucket, still identifies
//     itself the same way (its Server header, or else its vendor headers; a
//     server that gives neither is never vouched for by a saved verdict), and
//     it still refuses, on one scratch key, a create of an existing key and a
//     write (and a delete, if claimed) with a wrong If-Match, as the verdict
//     says (a few requests; other software behind the same address, or a
//     proxy that drops conditions, means a new probe);
//  3. a probe, whose verdict is then saved locally.
//
// [Store.Probe] always probes and refreshes the local verdict; with
// [ProbeOptions].Share (`cairn probe` sets it) it also publishes the verdict
// in the bucket at "<ProbePrefix>verdict.json" from the bucket's root (default
// cairn-probe/verdict.json); nothing else leaves an object behind. A ProbeTTL
// <0 turns saving and reuse off. A probe that cannot finish fails with
// [ErrProbeFailed] ("probe of X failed: …; nothing is known about its
// conditions"), never with [ErrAmbiguous]: the writes whose outcome is unknown
// were scratch writes, and the caller's conditional write was not sent.
//
// The verdict in the bucket is never trusted: it is a record for people and
// tools, not an input (why: probecache.go). Each new probe compares itself
// with it ([ProbeReport].PreviousShared) before replacing it.
//
// # Guarantees
//
//   - A conditional write that returns nil was applied under its condition; one that
//     returns [ErrPreconditionFailed] or [ErrCreateRefused] was not applied.
//   - Of N concurrent [IfAbsent] writes of one key, exactly one succeeds (tested with
//     goroutines and, for stores reachable by URL, with OS processes).
//   - A write that fails with [ErrAmbiguous] may or may not have been applied: the
//     response was lost after the request may have reached the server. Conditional
//     writes are never retried blindly (a retry of an applied write would report a
//     false 412); callers resolve the outcome by reading back (package docstore does
//     this with writer nonces).
//   - ETags are normalised (no quotes, no W/ prefix). For single-part objects the
//     ETag is the hex MD5 of the content on every backend; multipart objects get the
//     S3 form md5(part md5s)-N.
//   - List yields keys in UTF-8 byte order, as S3 does, on every backend.
//
// # Keys
//
// Keys are UTF-8, 1 to 1024 bytes, with no NUL, no leading "/", no empty segment
// ("a//b") and no "." or ".." segment. These rules are the intersection of what AWS
// S3, MinIO and a local directory accept, so a key that works on one backend works
// on all. Spaces, "+", "%", control characters (newline, tab, ESC, DEL, C1) and any
// other Unicode are fine and kept byte-exact: the S3 backend lists with
// encoding-type=url so that XML never has to carry them. NUL is refused because
// S3's XML listings, MinIO, PostgreSQL text and a process environment cannot carry
// it. Text output of the CLI escapes control characters; --json keeps them exact.
//
// Store URLs ([Open], [ParseURL], [SplitObjectURL]) never reach outside what they
// name: a ".." segment in any encoding, a fragment ("#") and a second "?" are
// refused with [ErrInvalidURL] before anything is cleaned. A key from elsewhere
// (an event) is passed to the Store's methods, never built into a URL.
//
// # Errors
//
// Errors wrap a few sentinels usable with [errors.Is]: [ErrNotFound],
// [ErrPreconditionFailed] (HTTP 412: the condition did not hold; re-read and decide),
// [ErrConflict] (HTTP 409: a concurrent conditional write was in flight; retry),
// [ErrNotSupported] (the store cannot do this, or does not enforce this condition),
// [ErrInvalidKey], [ErrAmbiguous], [ErrBucketNotFound], [ErrUnwritable] (a full
// disk, a used-up quota, a read-only store: not transient), and [ErrCreateRefused]
// (a write-once create answered 412 although a HEAD right after finds the key
// absent: not a writer that came first, so not ErrPreconditionFailed; SeaweedFS
// answers so for a key whose name is, or was, also a folder). Backends map their raw
// errors to these once; messages name the operation and key and say what to do next.
package objstore
