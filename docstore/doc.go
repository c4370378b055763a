// Package docstore keeps shared state in one object — a registry, a manifest, a job's
// state file — safe for many concurrent writers on any objstore.Store.
//
// Update is a read-modify-write loop done right: it reads the document, applies
// the caller's function, and writes back with If-Match on the ETag it read. A
// 412 (someone else wrote first) re-reads and re-applies the function (redrive);
// a 409 (a concurrent write in flight) or a transient error backs off with full
// jitter and retries; attempts and ctx bound it all.
//
// A redrive waits a random time whose bound doubles with the document's
// contention level, which a Store keeps per document across updates: one up
// per 412 on a state read, one down per attempt that ends without one, back
// to 0 after a second without a 412 (a 412 on the state this Store last
// wrote is redriven at once: see Group commit). Writers in other processes cannot
// share a commit; with the level, their redrives spread until about half
// their writes succeed, instead of each update starting with immediate
// redrives against all the others (64 processes of one writer on
// versitygw: 4.5–6× the naive loop's updates/s, where a backoff kept per
// update gave 1.0×).
//
// # The envelope
//
// Every write is an envelope {"cairn_doc":1,"rev":N,"nonce":…,"recent":[…],
// "value":…} holding the caller's value, a revision that grows by one per
// write, a fresh writer nonce (so every write's ETag is unique: no ABA), and
// the (rev, nonce) of the last HistoryLen writes, with which a write whose
// outcome was lost, or that lands late, is resolved by reading it back (see
// Guarantees).
//
// Plain JSON files written by other tools are read as revision 0; the first
// Update wraps them in an envelope. Other readers of the object see the envelope.
//
// # Group commit
//
// Concurrent Updates of one key in one process are combined: a single writer
// goroutine per key takes every pending update, applies the functions in arrival
// order to one read of the document, and commits them with one conditional
// write. Each caller gets the value after its own function; a function that
// returns an error fails only its own caller. Under contention this turns N
// round trips into one. Writers that update a document in a loop come back
// microseconds after their answer, so after a batch of more than one the
// committer waits for them (until as many urgent updates are queued as it
// just answered, for at most a quarter of its last write's time and 2ms;
// lingering updates are not waited for): otherwise the
// first back would be written alone and batches would alternate between one
// update and the rest. The Store remembers the state it last wrote of each
// document (the most recent 256): the next update of it is applied to that
// state and written with If-Match on its ETag, without a read first; if
// another writer came between, the write costs a 412 and the update is
// applied again to a fresh read. An update that changes nothing is never
// written on a remembered state: it is checked against a read. An update
// made with WithLinger is not urgent: while no write of its document is in
// flight, it waits (up to its linger) for an urgent update to share a write
// with, so a stream of low-priority updates rides in the writes of a stream
// of urgent ones instead of alternating with them.
//
// # Stores without conditional writes
//
// On a store whose probe shows that conditional PUTs are not enforced, documents
// fall back to a register (seed 000, done right): every write creates a new key
// under "<key>/" named by a fixed-width sequence (max of the newest sequence + 1
// and the local clock in nanoseconds) plus the writer id; a read LISTs "<key>/"
// and takes the newest; a cleanup after each write deletes versions older than
// the newest by more than a grace period (judged by the store's own
// Last-Modified), never the newest. This gives read-after-update and
// last-writer-wins, and NO compare-and-swap: concurrent updates can be lost. So
// Create and Update on a register fail with objstore.ErrNotSupported unless
// Options.LastWriterWins opts in. A register write whose outcome is unknown is
// sent again to the same version key with the same bytes, never as a new
// version, so a first request that lands late changes nothing; if it stays
// unknown, Update returns objstore.ErrAmbiguous.
//
// Reads never probe: Load needs no write permission. Create and Update decide
// the strategy from the store's capabilities (a probe, or a saved verdict: see
// package objstore); a Load that comes before any of that reads "<key>" and,
// only if it is missing, the register's "<key>/" versions.
//
// # Guarantees
//
//   - On a store that enforces conditional writes, Load and Update are
//     linearizable (checked with porcupine under injected faults and on MinIO).
//   - An Update that returns nil was applied exactly once, even if requests or
//     responses were lost along the way or a request landed late; one that
//     returns objstore.ErrAmbiguous was applied at most once (it may still
//     land after the call returns, but never after another write of the
//     document has succeeded); one that returns any other error was not
//     applied. Tested with lost requests, lost responses and late-landing
//     requests mixed (package objstore/faulty, and a network proxy in front of
//     MinIO that drops the client's connection and forwards the request later).
//   - Every write changes the ETag, so no ABA.
//   - Functions passed to Update may run more than once (on redrive) and must
//     not have side effects beyond computing the new value.
//   - All writers of a document must go through cairn (or at least write
//     envelopes). A writer that bypasses it and overwrites the object breaks the
//     history; use the write policy (package objstore/policy) to keep others out.
//     So does deleting a document while an Update of it is in flight: the
//     reasoning above rests on ETags never coming back, and on a document's
//     history only growing, so a create whose outcome is unknown could land
//     after the delete, and a write that landed before it could no longer be
//     seen. Delete documents only when no writer is active.
//
// # Errors
//
// Load returns objstore.ErrNotFound for a missing document; Create returns
// objstore.ErrPreconditionFailed if it exists. Update returns the caller's own
// error unchanged when its function fails, ErrContention (which wraps
// objstore.ErrPreconditionFailed) when the attempts ran out, and
// objstore.ErrAmbiguous when a lost response could not be resolved. A create
// the store refuses although the document reads as absent (SeaweedFS, for a
// key that is also a folder) is objstore.ErrCreateRefused, never
// ErrContention. On a store without conditional writes, Create and Update fail
// with *UnsafeUpdateError (objstore.ErrNotSupported) unless
// Options.LastWriterWins.
package docstore
