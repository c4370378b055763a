// Package folder renames, copies, deletes and snapshots key prefixes
// ("folders") of an object store under hierarchical locks, with an intent
// journal so that an operation interrupted by a crash is finished — rolled
// forward — by the next one that touches an overlapping folder, or by Recover.
//
// # How an operation runs
//
//  1. Lock: rename writes both folders, copy reads the source and writes the
//     destination, delete writes, snapshot reads (package lock/treelock across
//     processes and machines by default; lock/pathlock when one process owns
//     the bucket).
//  2. Roll forward any journal left by a crashed operation on an overlapping
//     folder.
//  3. Journal (rename, copy, delete): write the intent object if-absent,
//     then the manifest — every source key with its ETag and size, in chunks of
//     1,000 so that a folder of any size is streamed, never held in memory —
//     then mark the intent complete with a compare-and-swap.
//  4. Steps, each idempotent, with a bounded pool of workers: copy each object
//     (server-side), skipping those whose destination already holds it, and
//     verify; only when every copy is done, delete the sources.
//  5. Delete the journal last.
//
// A crash at any point leaves either no intent (nothing was changed) or an
// intent from which Recover finishes the operation: a manifest that was not
// complete is taken again from the (unchanged) source, and every step checks
// before it acts. An object that changed after the manifest was taken is never
// overwritten or deleted: the operation finishes the rest and returns a
// *ConflictError naming the keys.
//
// # Interruptions, and running an operation again
//
// An operation whose context ends (Ctrl-C, a deadline), or that a failed
// request stops (a full disk, a store gone away: InterruptedError.Failed),
// returns an *InterruptedError saying what it left: nothing (it had not
// written its intent), or how many objects it had copied or deleted, with the
// journal that the next Recover or overlapping operation finishes. PendingOps lists the
// operations whose journals are live (running, or interrupted), for a listing
// to warn about.
//
// A roll-forward that finishes an interrupted operation keeps its journal's
// intent and manifest as a tombstone (removed by Recover after
// Options.TombstoneGrace). The same rename or delete started again — same
// folders and overwrite — that finds its source empty then succeeds with
// Result.Already, provided the folders still hold what the finished operation
// left: nothing at the source and, for a rename, every manifest object at the
// destination with its size (and ETag, unless multipart). Otherwise, and for
// an operation that ran to the end without interruption (it leaves no
// tombstone), it is refused as before (ErrNotFound). A copy run again is
// refused as before (ErrNotEmpty): its source may have changed since.
//
// # Guarantees and limits
//
//   - Atomic with respect to other cairn users of the same locks: none sees a
//     half-renamed folder (a snapshot takes the read lock). Writers that bypass
//     cairn are not stopped; they are detected by ETag where it matters.
//   - Crash-safe by roll-forward, not by rollback: once started, a rename ends
//     fully renamed.
//   - Not a metadata service: a rename costs one copy and one delete per
//     object, plus ~3 requests per 1,000 objects of journal.
//   - The journal lives under "cairn-journal/" and the locks under
//     "cairn-locks/"; folders may not contain them.
//
// # Late-landing writes
//
// A write the client gave up on (a reset, a timeout, a 502/504) may be applied
// by the store later, after the operation has returned — even after its locks
// are released. What each kind can and cannot do:
//
//   - The intent (written if-absent) and its updates (if-match): an operation
//     whose write had an unknown outcome asks again with the same bytes until
//     it knows (created, or found to hold exactly its bytes), so it neither
//     fails for nothing nor forgets a write that landed. A journal whose
//     intent create had an unknown outcome ends in a tombstone instead of a
//     deletion, so that the late create finds its key taken; Recover removes
//     tombstones after Options.TombstoneGrace, judged by the store's clock. An
//     update conditional on an ETag lands only on that ETag: never after the
//     journal moved on or was removed (no "mark done" resurrects a journal).
//   - An intent that still lands after its operation gave up (the caller got
//     an error wrapping objstore.ErrAmbiguous) is run by the next Recover or
//     overlapping operation only if, under its locks, the checks the caller
//     made still hold (source not empty, destination empty unless
//     overwriting); else it is dropped (Result.Abandoned). The same holds for
//     any journal whose manifest was not complete: nothing was changed yet.
//   - Copies into the destination are conditional on the destination as seen
//     (if-absent, or if-match its ETag) where the probe shows the store
//     enforces conditional copy destinations (AWS, not MinIO): a late copy
//     lands on that state or not at all. Elsewhere a late copy can overwrite
//     whatever the destination key holds when it lands; after a rename it
//     finds no source and fails, after a copy it rewrites the same source
//     version unless the source changed.
//   - Deletes of sources are conditional on the manifest's ETag where
//     conditional DELETE is enforced; elsewhere (MinIO) a late delete removes
//     whatever the key holds when it lands — including an object written at
//     the old key after the operation finished. Use a store that enforces
//     conditional DELETE where that matters.
//   - Manifest chunks are written unconditionally: a late one lands on its own
//     journal's keys only; if it lands after the journal was removed it is an
//     orphan chunk, which Recover removes.
//
// # Errors
//
// Check these with errors.Is (and *ConflictError, *InterruptedError with
// errors.As):
//
//   - ErrInvalid: the folder is the whole bucket, is not a valid key, or the
//     source and destination overlap (one inside the other). Nothing was done.
//   - ErrReserved: the folder overlaps cairn's reserved prefixes
//     (JournalPrefix, LockPrefix). Nothing was done.
//   - ErrNotFound (also cairn.ErrNotFound): the source folder is empty or
//     missing (for a rename or delete started again, see Result.Already
//     above). Nothing was done.
//   - ErrNotEmpty: the destination holds objects and overwrite was not asked
//     for. Nothing was done.
//   - ErrLockLost (also cairn.ErrLost): the operation's lock was lost while
//     it ran; it stopped, and its journal is left for Recover (or the next
//     overlapping operation).
//   - objstore.ErrAmbiguous (wrapped): the intent's write had an unknown
//     outcome; if it still lands, the next Recover checks again and runs it.
//   - *InterruptedError: the context ended, or (Failed) a request failed
//     once the operation had begun; it wraps the context's error
//     (errors.Is(err, context.Canceled)) or the failure
//     (errors.Is(err, objstore.ErrUnwritable) for a full disk) and says what
//     state was left.
//   - *ConflictError: objects changed after the manifest was taken; they were
//     left untouched and the rest of the operation was finished.
package folder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

// Errors (use errors.Is / errors.As).
var (
	ErrInvalid  = errors.New("folder: invalid operation")
	ErrNotFound = cairn.Sentinel(cairn.ErrNotFound, "folder: source folder is empty or missing")
	ErrNotEmpty = errors.New("folder: destination folder is not empty; to merge into it, ask for overwrite (cairn fs: --overwrite)")
	ErrLockLost = cairn.Sentinel(cairn.ErrLost, "folder: lock lost while the operation ran; run Recover")
	ErrReserved = errors.New("folder: folder overlaps cairn's reserved prefixes")
)

// ConflictError: objects that changed after the manifest was taken; they
// were left as they are.
type ConflictError struct {
	Op   string
	Keys []string // at most 100
	N    int      // how many
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("folder: %s: %d objects changed after the operation began and were left untouched: %s",
		e.Op, e.N, strings.Join(e.Keys, ", "))
}

// JournalPrefix and LockPrefix are reserved.
const (
	JournalPrefix = cairn.JournalPrefix
	LockPrefix    = cairn.LockPrefix
)

// Locker takes hierarchical locks on folder paths ("/a/b").
type Locker interface {
	Lock(ctx context.Context, read, write []string) (unlock func(), lost <-chan struct{}, err error)
}

// TreeLocker adapts a treelock.Manager (locks across processes and machines).
type TreeLocker struct {
	M *treelock.Manager
	// Waiting, if set (with Store, the store M locks on), is called before a
	// request waits for others, with the entries in its way (TreeHolders):
	// the request is first tried without waiting. Default: nil (wait
	// silently).
	Waiting func(Wait)
	Store   *objstore.Store
}

// Lock acquires through the tree lock.
func (t TreeLocker) Lock(ctx context.Context, read, write []string) (func(), <-chan struct{}, error) {
	h, err := t.acquire(ctx, read, write)
	if err != nil {
		return nil, nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h.Release(ctx)
	}, h.Done(), nil
}

// LocalLocker adapts a pathlock.Locker: for one process that owns the bucket.
type LocalLocker struct{ L *pathlock.Locker }

// Lock acquires in process.
func (l LocalLocker) Lock(ctx context.Context, read, write []string) (func(), <-chan struct{}, error) {
	h, err := l.L.Acquire(ctx, pathlock.Request{Read: read, Write: write})
	if err != nil {
		return nil, nil, err
	}
	return h.Release, nil, nil
}

// Progress reports an operation's progress.
type Progress struct {
	Phase string // "manifest", "copy", "delete", "snapshot"
	Done  int64  // objects done in this phase
	Total int64  // objects in the operation (0 while the manifest is taken)
	Bytes int64  // bytes copied or archived so far
}

// Options configure Ops.
type Options struct {
	// Locker; default: a treelock.Manager on the same store (Close the Ops).
	Locker Locker
	// Concurrency is how many copies or deletes run at once. Default
	// DefaultConcurrency.
	Concurrency int
	// Progress, if set, is called as objects are done (from several goroutines).
	Progress func(Progress)
	// ChunkSize is manifest entries per journal object. Default 1000.
	ChunkSize int
	// TombstoneGrace is how long, by the store's clock, the tombstone of a
	// finished journal whose intent write had an unknown outcome is kept
	// (against a late copy of that write) before Recover removes it.
	// Default: one hour.
	TombstoneGrace time.Duration
}

// DefaultConcurrency is Options.Concurrency's default.
const DefaultConcurrency = 16

// Ops runs folder operations on one store.
type Ops struct {
	s     *objstore.Store
	o     Options
	owned *treelock.Manager
}

// New returns Ops on s.
func New(s *objstore.Store, opts *Options) *Ops {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 1000
	}
	if o.TombstoneGrace <= 0 {
		o.TombstoneGrace = time.Hour
	}
	ops := &Ops{s: s, o: o}
	if o.Locker == nil {
		ops.owned = treelock.New(s, nil)
		ops.o.Locker = TreeLocker{M: ops.owned}
	}
	return ops
}

// Store is the store the Ops work on.
func (ops *Ops) Store() *objstore.Store { return ops.s }

// Close ends the Ops' own lock session, if it made one.
func (ops *Ops) Close() {
	if ops.owned != nil {
		ops.owned.Close()
	}
}

// Prefix normalises a folder: no leading "/", one trailing "/". "" and "/"
// (the whole bucket) are refused.
func Prefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", fmt.Errorf("%w: the whole bucket is not a folder", ErrInvalid)
	}
	if err := objstore.ValidateKey(p); err != nil {
		return "", fmt.Errorf("%w: folder %q: %v", ErrInvalid, p, err)
	}
	p += "/"
	for _, r := range []string{JournalPrefix, LockPrefix} {
		if strings.HasPrefix(p, r) || strings.HasPrefix(r, p) {
			return "", fmt.Errorf("%w: %q", ErrReserved, p)
		}
	}
	return p, nil
}

// lockPath is a folder's lock path: "a/b/" → "/a/b".
func lockPath(prefix string) string { return "/" + strings.TrimSuffix(prefix, "/") }

// nested reports whether one folder is inside the other (or they are equal).
func nested(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
