// Package objledger is the intake ledger kept in an object store (S3, MinIO or
// a directory), on conditional writes alone: no database to run. Open it with
// ledger.Open("s3://bucket/prefix?…") or ledger.Open("file:///dir"), or on a
// store you hold with Open (OpenBackend for the Backend's own methods, such as
// Compact); it passes
// the same conformance suite (package ledgertest) as the SQLite and PostgreSQL
// backends, including the tests with several OS processes.
//
// # Layout
//
// Under the URL's prefix (cairn-ledger/ if the URL names a bare bucket):
//
//	cairn-ledger.json          format and shard count, written once (if absent)
//	meta/NAME.json             a note (ledger.NoteKeeper: the last audit's
//	                           summary), replaced by each write
//	work.json                  the work index: per shard, a lower bound of when
//	                           its earliest work is due
//	shards/NNN/head.json       a shard's head: the records changed since its
//	                           segments, tombstones of purged records, and
//	                           the keys of its segments (the shard's active
//	                           work, id → due time, is derived from the
//	                           records when a head is read: format 3)
//	shards/NNN/base-….json     an immutable segment: the oldest (the base)
//	                           holds every record of the shard as of a
//	                           compaction, newer ones the records changed
//	                           since (and tombstones)
//
// A record lives in shard fnv32a(bucket, key) mod N (all versions of a key in
// one shard, so per-key ordering is decided in one place). Every head and the
// index are documents of package docstore: each write is a compare-and-swap
// (If-Match on the ETag read) with a nonce in the body, concurrent updates of
// one document in one process are group-committed into one write, and a write
// whose response was lost is resolved by reading the nonce back — so a Record
// is applied once even when the store applied it and the client saw an error.
//
// Decisions are Decide of package ledger/driver, the same function the SQL backends run, applied
// inside the shard's compare-and-swap: two processes deciding the same key
// serialise on the head's ETag; the loser re-reads and decides again.
//
// Claim finds due work through the work index (work.json: per shard, a time
// no later than its earliest due work) instead of reading every shard, and
// heads stay small: past CompactAt changed records (default 128) a shard is
// compacted in the background into immutable segments. Each ledger instance
// sweeps every shard on its first Claim and every Options.SweepEvery (default
// one minute) after, which repairs an index entry a killed writer left too
// high.
//
// # Costs
//
//   - Requests: a Record batch costs one conditional PUT per shard it touches
//     (a GET first only when another process wrote the shard since this one
//     did: each process remembers the heads it wrote) and, after it returned,
//     a share of one GET of the index (a PUT when an entry must be lowered or
//     a claimer's mark removed), shared by the Records of the next 50 ms. A
//     small batch touches most shards, so the shard count (default 2) is what
//     a batch costs in writes. A Claim with work due costs one head write per
//     shard visited (in parallel) between a read of the index and, when it
//     empties shards, two index writes (mark before, set after); with nothing
//     due it costs one GET of the index (an idle `cairn serve` polls once a
//     second). CompleteBatch costs
//     one head write per shard (group-committed with the shard's other
//     writes; made with ledger.WithLinger, as the daemon's completions are,
//     it waits for the shard's next urgent write, a Record's, and rides in
//     it). The ledger bench prints the measured requests per 1,000
//     events.
//   - Bytes: a record is about 250–350 bytes of JSON (its key, ETag, sequencer,
//     result and error dominate). A head write rewrites the head: up to
//     CompactAt records, whatever the shard's backlog.
//     Compaction writes each record into a segment about log2(records /
//     CompactAt) times in all.
//   - Memory: each process holds the decoded segments of the shards it touched,
//     and their active work (~60 bytes per pending record): roughly 500 bytes
//     per record. Millions of keys want PostgreSQL.
//   - AWS S3 limits request rates per prefix (3,500 writes and 5,500 reads per
//     second, per partitioned prefix). Every write of one shard goes to one key,
//     and S3 also serialises conditional writes of one key: the ceiling of
//     head writes scales with the number of shards (URL parameter shards=N
//     when the ledger is created), and batching (group commit) is what makes
//     a few writes per second per shard carry thousands of events. The
//     default, 2, was chosen on local MinIO, where a write takes milliseconds
//     and each one costs CPU; many processes writing one ledger on AWS S3,
//     where a write takes tens of milliseconds, may want 4–8.
//
// # Guarantees and limits
//
// The guarantees of package ledger hold, with these differences:
//
//   - Leases are judged by each process's own clock (PostgreSQL uses the
//     server's): keep clocks in sync (NTP); a skew of d shortens or lengthens
//     leases by d.
//   - A Record batch is atomic per shard, not as a whole: if it returns an
//     error, some of its events may have been recorded (delivering the batch
//     again reports them as duplicates; their work is pending either way).
//   - The store must enforce conditional writes: Open runs the capability probe
//     and refuses a store that accepts If-Match / If-None-Match and ignores them
//     (it names the check that failed).
//   - List, Counts, Replay and Purge read every shard (one GET each, bases from
//     cache): fine for operations, not for a hot path.
//
// # Late-landing writes
//
// A write the client gave up on (a reset, a timeout, a 502/504) may be applied
// by the store later. Heads, the index and the descriptor are documents
// (package docstore): a late write of one lands only while the ETag it was
// conditional on is current, so it can never undo a newer state; a marked
// shard's entry is raised only by a write conditional on the state that still
// held the mark. A Record (or Claim, Complete…) that returned an error may
// still be applied later, but only if no other write of that shard came
// first: delivering the batch again moves the head on, after which the late
// write can no longer land (the retry then decides the events itself). A late
// Claim leaves its records claimed under a token nobody holds: they are
// claimed again when that lease ends, as after a crashed worker. What a late
// write can still do here:
//
//   - A compaction's swap of its new base into the head, after the compaction
//     gave up: so a base whose swap failed is deleted at once only when the
//     head had provably moved on (another compaction won); after any other
//     failure it stays, and the same process's next swap of the shard deletes
//     it if the head does not name it then (after that swap no earlier one can
//     land). A process that stops first leaves it behind: storage, not harm.
//   - A new base's if-absent put, after the compaction gave up: an unused
//     base (storage only, deleted on a best-effort basis as above).
//   - A delete of a replaced base past its grace: bases are immutable and
//     never named again once replaced, so it is harmless whenever it lands.
package objledger
