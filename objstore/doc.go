// Package objstore is cairn's narrow, honest interface to object stores: Amazon S3
// and S3-compatible servers (package s3), a local directory (package fs) and memory
// (package mem).
//
// A [Store] is the concrete type users call. It validates keys, turns paged listings
// into iterators, streams large uploads through multipart uploads, and refuses to
// send a conditional request that the endpoint is not known to enforce. Backends
// implement the small [Backend] interface; wrappers (a key prefix, fault injection)
// are Backends too, so every layer passes the same conformance suite
// (package objstoretest).
//
// # Conditions
//
// Writes take a [Condition]: [IfAbsent] (If-None-Match: *) creates an object only if
// the key is free; [IfMatch] replaces it only if its current ETag is the one given
// (compare-and-swap). Many "S3-compatible" servers accept these headers and ignore
// them; MinIO itself ignores If-Match on DeleteObject and destination conditions on
// CopyObject. So a Store never trusts a header: backends that implement conditions
// themselves (mem, fs) declare what they enforce, and for the others (s3) [Probe]
// proves by experiment, on scratch keys, what the endpoint enforces. The result is
// cached per Store; a conditional call the endpoint does not enforce fails with
// [ErrNotSupported] instead of silently becoming unconditional.
//
// # Guarantees
//
//   - A conditional write that returns nil was applied under its condition; one that
//     returns [ErrPreconditionFailed] was not applied.
//   - Of N concurrent [IfAbsent] writes of one key, exactly one succeeds (tested with
//     goroutines and, for stores reachable by URL, with OS processes).
//   - A write that fails with [ErrAmbiguous] may or may not have been applied: the
//     response was lost after the request may have reached the server. Conditional
//     writes are never retried blindly (a retry of an applied write would report a
//     false 412); callers resolve the outcome by reading back (package docs does
//     this with writer nonces).
//   - ETags are normalised (no quotes, no W/ prefix). For single-part objects the
//     ETag is the hex MD5 of the content on every backend; multipart objects get the
//     S3 form md5(part md5s)-N.
//   - List yields keys in UTF-8 byte order, as S3 does, on every backend.
//
// # Keys
//
// Keys are UTF-8, 1 to 1024 bytes, with no NUL or other control characters, no
// leading "/", no empty segment ("a//b") and no "." or ".." segment. These rules are
// the intersection of what AWS S3, MinIO and a local directory accept, so a key that
// works on one backend works on all. Spaces, "+", "%", and any other Unicode are fine.
//
// # Errors
//
// Errors wrap a few sentinels usable with [errors.Is]: [ErrNotFound],
// [ErrPreconditionFailed] (HTTP 412: the condition did not hold; re-read and decide),
// [ErrConflict] (HTTP 409: a concurrent conditional write was in flight; retry),
// [ErrNotSupported] (the store cannot do this, or does not enforce this condition),
// [ErrInvalidKey], [ErrAmbiguous], and [ErrBucketNotFound]. Backends map their raw
// errors to these once; messages name the operation and key and say what to do next.
package objstore
