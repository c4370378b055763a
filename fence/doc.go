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
// # The rule
//
// A write with token t is accepted if and only if t >= the highest token the
// sink has recorded (an equal token is the same holder writing again), and
// every accepted write records t. Tokens are non-negative int64s, as the locks
// hand them out. An object or document written without fencing has recorded
// no token: any token may replace it. Every writer of a fenced key must write
// through this package; a plain write erases the record (and a plain delete
// lets any token recreate the key).
//
// Objects: Put reads the object's Info (HEAD), judges its token and writes
// with If-Match on the ETag it read (If-None-Match: * when the key is missing).
// The condition is what makes the judgement hold at the moment of the write:
// two writers can never both pass, and a writer that read token 3 cannot land
// after a writer with token 5 has replaced what it read (but see Limits). A 412
// or 409 re-reads and judges again. Delete does not
// remove the object, which would forget the token and let a stale writer
// recreate it: it writes a tombstone conditionally, a short body that is unique
// per write with metadata "cairn-fence-deleted", which Get reads as not found
// and Token still reads the token of.
//
// # Faults: lost responses and requests that land late
//
// A conditional write whose response was lost (objstore.ErrAmbiguous) may have
// been applied, may never be, or may land later, after the client has given
// up. For fencing this is harmless in one direction and must be resolved in the
// other. Harmless: a write conditional on ETag X can land only while the
// object's ETag is X; a write with a higher token that was accepted after it
// changed the ETag, so the late write can never overwrite a higher token's
// write — it fails 412 on arrival. To be resolved: whether our own write landed.
// Every fenced write carries a fresh nonce in its metadata ("cairn-fence-nonce");
// after an ambiguous write Put reads back: its nonce means it landed (success);
// the object still at the ETag it was conditional on means it may yet land, so
// Put sends the same write on the same condition again (at most one of the two
// can land); anything else means it was replaced or never will land, and Put
// returns objstore.ErrAmbiguous (run the effect again: the token still decides).
// Documents inherit the docstore package's resolution of ambiguous writes.
//
// # Limits
//
// S3's ETag of a plain PUT is the MD5 of the body: it does not change with
// metadata. If a higher token writes bytes identical to a version that a
// stalled lower-token writer read, that version's ETag comes back and the
// stalled writer's condition holds again (ABA): its write can land over the
// higher token's. Tombstones carry a unique body and are never affected; for
// objects whose bytes may repeat, put something unique in the body (the token
// itself will do) or keep the state in a document (Update), whose every write
// carries a nonce in the body.
//
// # Errors
//
//   - ErrStale (a *StaleError naming the key and both tokens): a higher token
//     has already written; nothing was written. Stop: a newer holder owns the
//     work. It wraps no other sentinel: it is neither success nor a condition
//     to retry.
//   - objstore.ErrNotSupported: the store does not enforce conditional PUTs
//     (see objstore.Store.Capabilities), so no write is fenced; nothing was sent.
//   - objstore.ErrAmbiguous: see above.
//   - objstore.ErrNotFound from Get and Load: no object, or a tombstone.
package fence
