// Package fence makes a sink refuse writers whose fencing token is lower than
// one it has already accepted, so that a holder that lost its lock (a lease,
// a tree lock or a ledger claim, each of which hands out monotonically
// increasing tokens) cannot commit after its successor has. One call per kind
// of sink:
//
//   - objects: Put, Delete and Get keep the highest token a key has seen in
//     the object's user metadata ("cairn-fence") and change the object only by
//     compare-and-swap on the ETag that was judged;
//   - documents (package docstore): Update and Load keep the token in the
//     document's value, {"cairn_fence": N, "value": …}, and judge it inside
//     the document's own compare-and-swap;
//   - SQL rows: SQLUpsert builds the conditional statement
//     (… WHERE excluded.fence_token >= t.fence_token) for PostgreSQL and
//     SQLite, and SQLExec turns "no row changed" into ErrStale.
//
// `cairn put FILE URL --fence-token "$CAIRN_FENCING_TOKEN"` and
// `cairn doc update URL --set … --fence-token N` give exec handlers the same.
//
// # Guarantees
//
// A write with token t is accepted if and only if t >= the highest token the
// sink has recorded (its mark; an equal token is the same holder writing
// again), and every accepted write records t — with one exception for
// objects, stated plainly: two writes of identical bytes are
// indistinguishable to If-Match (see Limits), so a write judged on one
// version can replace a later one with the same bytes and record a lower
// mark. Tokens are non-negative int64s, as the locks hand them out. An object
// or document written without fencing has recorded no token: any token may
// replace it.
//
// A key's mark is wherever its last fenced write put it: an object's in its
// metadata, a document's in its body. Each kind of write also reads the other
// kind's: Put, Delete and PutKeepingMark over a fenced document are judged by
// its mark (and PutKeepingMark carries it into the object's metadata);
// Update and UpdateKeepingMark over a fenced object by the object's (and
// store it in the wrapper).
//
// Writers without a token. Once a key carries a mark (an object written or
// deleted by Put or Delete, a document written by Update), every write
// through this package or the cairn CLI keeps it, but for identical bytes
// (see Limits) and a plain `cairn put` on a store whose capabilities it does
// not know without a probe (S3): it checks the mark by a HEAD and then writes
// without a condition, so a fenced write landing between the two is
// overwritten:
//
//   - PutKeepingMark and UpdateKeepingMark write without a token and carry
//     the mark forward, judged on the version they replace and written
//     conditionally on it, so a fenced write that lands in between is never
//     overwritten and a holder below the mark is still refused afterwards.
//     They refuse no one: they are for writers that hold no lock.
//   - CheckUnfenced tells a writer that passes no token that the key it read
//     is fenced (a *FencedError, ErrFenced); it then writes conditionally on
//     what it read. It reads the object's metadata only; CheckUnfencedAt also
//     reads the body of a JSON object, where a fenced document keeps its mark. `cairn put` and `cairn doc update` without --fence-token
//     refuse a fenced key this way (exit 3) unless given --unfenced, which is
//     PutKeepingMark or UpdateKeepingMark. `cairn doc get` and Load give the
//     value, never the wrapper.
//   - A document's value may not hold "cairn_fence" at its top level unless it
//     is stored wrapped (UpdateKeepingMark refuses it, `cairn doc create` and
//     `doc update` too), so a write without a token cannot forge or lower a
//     mark.
//
// Folder operations (package folder, `cairn fs`) move and copy objects with
// their metadata, marks included, and do not judge them: a folder delete
// removes fenced objects and tombstones, a rename leaves no mark at the old
// keys, and an overwriting copy replaces a destination's mark with its
// source's.
//
// Writers that are not cairn. A plain S3 client (the AWS CLI, an SDK, a
// server-side copy, cairn's own objstore and docstore packages used directly)
// is not bound by any of this. It cannot make a fenced write land below a mark
// that is still there, nor make one land twice: fenced writes are conditional
// on the version they judged, so its write makes them re-read and judge again.
// But it can erase the mark: a PUT or a copy replaces the object's metadata
// (documents: their body), and a DELETE removes a tombstone. From then the key
// has recorded no token, exactly as if it had never been fenced: the next
// fenced write is accepted whatever its token and records it, so a stale
// holder that comes first wins once, and the rule holds again from the next
// accepted write on. It can also forge a mark (metadata "cairn-fence" set
// high), refusing every holder below it. The mark is kept with the object, not
// beside it, on purpose: a mark in a second object would survive a foreign
// PUT, but every fenced write would then be two conditional writes that can
// be interrupted between them, twice the requests, and a second object per key
// for listings, events and folder operations to carry; and the foreign writer
// would still have replaced the holder's output, which no mark can undo. Keep
// other writers out of fenced prefixes instead (bucket policy, IAM).
//
// Objects are judged by a HEAD and written with If-Match on the ETag judged
// (If-None-Match: * for a missing key), so the judgement holds at the moment
// of the write; Delete writes a tombstone that keeps the token. A write whose
// response was lost is resolved by reading its nonce back, or ends in
// objstore.ErrAmbiguous; documents inherit package docstore's resolution.
//
// # Limits
//
// Two writes of identical bytes are indistinguishable to If-Match. S3's ETag
// of a plain PUT is the MD5 of the body (a multipart upload's, of its parts):
// it does not change with metadata, so the mark cannot make it unique, and
// nothing in this package may change the caller's bytes to make it so. If,
// after a write read version A (bytes X, ETag E), another writer replaces A
// with bytes X again, the ETag is E again and the first write's If-Match
// still holds: it lands over the newer version. What can happen:
//
//   - Put with token 7 judged A (mark 6); token 9 rewrote X; Put lands and
//     records 7: the mark goes down from 9 to 7, and token 8 is accepted
//     afterwards.
//   - PutKeepingMark judged A (mark 6) and carries 6 on over token 9's X.
//   - A writer without a token that checked A with CheckUnfenced (unfenced)
//     replaces token 9's X and erases its mark (a plain `cairn put`).
//
// In each case the newer version is overwritten by a write judged on an
// older one, and the mark no longer says who wrote last, so a stale holder
// can get in afterwards too. It can happen only when the newer write's bytes
// equal the bytes of the version the older write read. It matters when a
// key's successive fenced writes can carry identical bytes (a status object
// rewritten with the same value, a re-run producing the same output) while a
// stalled writer is still pending on it. Where that can happen, give each
// fenced write distinct bytes (the token, a timestamp or a nonce in the body
// will do) or keep the state in a document (Update), whose every write
// carries a writer nonce in the body and so a new ETag (documents are not
// affected). Tombstones carry a unique body and are never affected. A
// versioned bucket does not help: S3 refuses If-Match with a version id on
// writes (501 on AWS), so a write cannot be made conditional on the version
// it judged rather than on its bytes. TestIdenticalBytesAreIndistinguishable
// pins this behaviour.
//
// # Errors
//
//   - ErrStale (a *StaleError naming the key and both tokens): a higher token
//     has already written; nothing was written. Stop: a newer holder owns the
//     work. It wraps no other sentinel: it is neither success nor a condition
//     to retry.
//   - ErrFenced (a *FencedError naming the key and its mark), from
//     CheckUnfenced and from an UpdateKeepingMark fn that refuses: a write
//     without a token met a fenced key; nothing was written.
//   - ErrInvalidArgument: the call itself is wrong (a negative token,
//     metadata under the reserved "cairn-fence" prefix, DocField at the top
//     level of a value written without a mark, a SQL name that is not a
//     plain identifier); nothing was sent. Fix the call.
//   - objstore.ErrNotSupported: the store does not enforce conditional PUTs
//     (see objstore.Store.Capabilities), so no write is fenced; nothing was sent.
//   - objstore.ErrAmbiguous: see above.
//   - objstore.ErrNotFound from Get and Load: no object, or a tombstone.
package fence
