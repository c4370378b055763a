package treelock

// This file holds the design notes of package treelock: how it keeps the
// guarantees its package doc states.
//
// ## Design
//
// Every path a request touches has a node document (package docstore, so every
// change is a compare-and-swap) holding the entries that hold it and a FIFO
// queue of entries waiting. An entry names a session: one document per process,
// renewed every TTL/3, that all of the process's entries reference, so a
// process renews one object however many nodes it holds. A request is granted
// on a node when its mode is compatible with every live holder and no live
// entry is ahead of it in the queue; it takes its nodes one at a time in the
// global order, so no two requests wait on each other in a cycle.
//
// A session is dead when an observer has watched its document keep one
// revision for a whole TTL on the observer's own monotonic clock, or — for an
// observer that has not watched it that long, such as a process started after
// a kill -9 — when the store's own clock says it was last written more than
// twice its TTL plus 2s ago (the Last-Modified of the session document against
// the Last-Modified of a write of the observer's own session, plus the time
// elapsed here since; two timestamps of one server, never two machines'
// clocks). Its entries are then pruned by whoever next updates their nodes.
// Its owner, for its part, stops at its own deadline (TTL after the start of
// its last renewal confirmed before that deadline) and never renews again:
// Done closes on every Held, and Err says the session was lost. A renewal
// that finds its session's document deleted (others judged it dead) ends the
// session at once too. So a crashed holder's locks are released after one
// TTL. (Package lease renews its leases and judges them by the same
// primitive and the same rule.)
//
// An observer keeps its watch of another session only while it can matter:
// it forgets one whose document it found gone or deleted, and one it has not
// been asked about for two of that session's TTLs (starting a watch again
// only delays a judgement of death, never hastens it). So a long-lived
// process that meets ever new sessions keeps a bounded set of observations.
//
// Durations (TTLs, renewals, polls) are measured on Options.Clock: the real
// clock by default; tests can pass a clockwork.FakeClock.
//
// ## Where documents live, and cleanup
//
// Under Options.Prefix: "sessions/<random id>" (one per session) and
// "paths/<escaped path>/<epoch>" (one per node; the root "/" is
// "paths/%2F", with no epoch). A node's key names its parent's epoch, a
// random id the parent's document carries: a request reads it from the
// parent, which it holds, before it touches the child.
//
// Locks clean up after themselves; objects are deleted only where no one can
// be using them, and never in a way that a late-landing or lost request, or a
// kill -9, turns into two holders or a token that goes backwards:
//
//   - Sessions. Close deletes the session's document after stopping its
//     renewals, and an owner that finds its deadline passed deletes it too
//     (others then prune its entries at once; that is what its death means).
//     Close also deletes other sessions' documents that are dead by the rule
//     above. Session ids are random and never reused, so a delete that lands
//     late can only remove a session that is already dead, and a renewal
//     that lands after the delete fails its If-Match on the absent key. A
//     session create that lands late (its Acquire failed) leaves a document
//     no entry names; it looks alive for a while, then dead, and is deleted.
//   - Nodes. When a release (or a withdrawal) leaves a node P with no entry
//     of a live session, and a request has used paths below it, the releaser
//     sweeps P's subtree while it still holds P's parent (so P's key is the
//     current one): it lists every node document below P's path (of every
//     epoch), reads each one's counter and floor, then writes P by
//     compare-and-swap only if P's revision is still the one the release
//     saw empty: Floor raised to every counter read, a new random Epoch.
//     Only once that write is confirmed does it delete the listed documents.
//     The unchanged revision proves that no request held P from before the
//     listing to the write, and every legitimate user of a node below P holds
//     P first; so nothing it deletes is in use, no grant below P was missed
//     by the fold, and after the write every request derives new keys below
//     P. A delete that lands late — MinIO ignores If-Match on DELETE, so every
//     delete here is unconditional — can only remove a key of a retired
//     epoch, which no request will use again. A late write of a retired node
//     (a step or withdrawal of a request that gave up) recreates an orphan
//     document at a retired key; the next sweep of P or of an ancestor
//     removes it. A compare-and-swap of P whose outcome is unknown deletes
//     nothing (if it lands later, it lands on the same unchanged P). When P's
//     parent will probably be emptied by this same release, P is left to the
//     parent's sweep. The root's document is never deleted: it keeps the
//     floor of the whole tree.
//   - Tokens stay monotonic: a grant on a node takes one more than the
//     largest of the node's counter and the floors of all its ancestors as
//     the request read them while holding them, and a sweep folds every
//     counter and floor it deletes into the floor of the node it sweeps from,
//     before deleting.
//   - A killed holder's nodes are pruned of its entries once its session is
//     dead (above), and swept by the next release that empties their parent;
//     its session document is deleted by the next Close that finds it dead.
//     Under constant load a busy parent is never empty, so nodes below it
//     stay until a quiet moment; a whole quiet tree shrinks to the root's
//     document.
//
// All processes that share a store's tree locks must run a cairn with this
// layout: an older cairn kept nodes under "nodes/" (left in place; delete
// them once no older cairn runs) and would not see these locks.
//
// ## Late-landing writes
//
// A write the client gave up on (a reset, a timeout, a 502/504) may still be
// applied by the store later. Every write of a node or session here is a
// compare-and-swap of a document (package docstore), so a late one lands only
// while the ETag it was conditional on is current, and never once the
// document has moved on (deletes: see cleanup above):
//
//   - A late step (joining a node's holders or queue) could land after the
//     request gave up and withdrew. So a withdrawal always writes the node —
//     creating it if absent — which moves the ETag past every earlier write
//     of the request; one that cannot be confirmed is retried on every
//     renewal while the session lives (after that, others prune the
//     session's entries anyway). A step whose write failed ambiguously is
//     asked again (it finds its own entry if the first landed) a few times
//     before the request gives up.
//   - A late session renewal can only make a session look alive for up to
//     one more TTL (its owner's deadline counts only renewals confirmed
//     before that deadline), so it delays others and never lets two
//     conflicting holders act.
//   - A late session create whose Acquire failed leaves an unused session
//     document: no entry names it, and Close deletes it once it is dead.
