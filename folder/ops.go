package folder

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/objstore"
)

// The operations a journal records.
const (
	opRename = "rename"
	opCopy   = "copy"
	opDelete = "delete"
)

// intent is the journal's head object.
type intent struct {
	ID        string    `json:"id"`
	Op        string    `json:"op"`
	Src       string    `json:"src"`
	Dst       string    `json:"dst,omitempty"`
	Created   time.Time `json:"created"`
	Complete  bool      `json:"manifest_complete"` // every chunk written
	Chunks    int       `json:"chunks"`
	Objects   int64     `json:"objects"`
	Bytes     int64     `json:"bytes"`
	Deleting  bool      `json:"deleting"` // the copy phase is done
	Done      bool      `json:"done"`     // every step is done: only the journal's removal is left
	Overwrite bool      `json:"overwrite,omitempty"`
	// LateCreate: the write that created this intent had an unknown outcome
	// at first, so a copy of it may still land (if-absent: only while the key
	// is absent). Its journal therefore ends in a tombstone, not a deletion.
	LateCreate bool `json:"late_create,omitempty"`
	// Finished marks a tombstone: the operation is over; the object stays
	// so that a late create of the intent cannot land, until Recover removes
	// it after Options.TombstoneGrace by the store's clock.
	Finished bool `json:"finished,omitempty"`
}

type entry struct {
	K string `json:"k"` // key relative to the source folder
	E string `json:"e"` // ETag
	S int64  `json:"s"` // size
}

func (in *intent) key() string { return JournalPrefix + in.ID + "/intent.json" }
func (in *intent) chunk(i int) string {
	return fmt.Sprintf("%s%s/m/%06d.jsonl", JournalPrefix, in.ID, i)
}

// locks are the read and write paths the operation needs.
func (in *intent) locks() (read, write []string) {
	switch in.Op {
	case opRename:
		return nil, []string{lockPath(in.Src), lockPath(in.Dst)}
	case opCopy:
		return []string{lockPath(in.Src)}, []string{lockPath(in.Dst)}
	default:
		return nil, []string{lockPath(in.Src)}
	}
}

// Result summarises an operation.
type Result struct {
	Op      string  `json:"op"`
	Src     string  `json:"src"`
	Dst     string  `json:"dst,omitempty"`
	Objects int64   `json:"objects"`
	Bytes   int64   `json:"bytes"`
	Skipped int64   `json:"skipped"` // already done (a roll-forward)
	Seconds float64 `json:"seconds"`
	// Recovered counts interrupted operations this one finished first.
	Recovered int `json:"recovered,omitempty"`
	// Abandoned, in a roll-forward, says why a journal's operation was
	// dropped instead: it had changed nothing yet, and the checks its caller
	// made before writing it no longer hold (its intent landed late, after
	// the caller gave up, or the folders changed since a crash).
	Abandoned string `json:"abandoned,omitempty"`
	// JournalSeconds is the time spent writing, reading and removing the
	// journal (the price of crash safety).
	JournalSeconds float64 `json:"journal_seconds"`
	// CopySeconds and DeleteSeconds are the time spent in the copy phase and
	// in the delete phase (journal reads in them included).
	CopySeconds   float64 `json:"copy_seconds,omitempty"`
	DeleteSeconds float64 `json:"delete_seconds,omitempty"`
	// Already: the same operation had been carried out before — an
	// interrupted run of it was finished by a roll-forward (this call's, a
	// Recover, or another operation's) — so this call changed nothing. Its
	// evidence is the roll-forward's tombstone, and the folders still holding
	// what it left.
	Already bool `json:"already_done,omitempty"`
}

// Rename moves every object under src to the same relative key under dst.
func (ops *Ops) Rename(ctx context.Context, src, dst string, overwrite bool) (Result, error) {
	return ops.start(ctx, opRename, src, dst, overwrite)
}

// Copy copies every object under src to dst.
func (ops *Ops) Copy(ctx context.Context, src, dst string, overwrite bool) (Result, error) {
	return ops.start(ctx, opCopy, src, dst, overwrite)
}

// Delete deletes every object under prefix.
func (ops *Ops) Delete(ctx context.Context, prefix string) (Result, error) {
	return ops.start(ctx, opDelete, prefix, "", false)
}

func (ops *Ops) start(ctx context.Context, op, src, dst string, overwrite bool) (_ Result, err error) {
	begin := time.Now()
	if src, err = Prefix(src); err != nil {
		return Result{}, err
	}
	if op != opDelete {
		if dst, err = Prefix(dst); err != nil {
			return Result{}, err
		}
		if nested(src, dst) {
			return Result{}, fmt.Errorf("%w: %q and %q overlap (one is inside the other)", ErrInvalid, src, dst)
		}
	}
	in := &intent{ID: newID(), Op: op, Src: src, Dst: dst, Created: time.Now().UTC(), Overwrite: overwrite}
	// An interruption before the intent is written changed nothing of this
	// operation (a roll-forward it ran first reports its own).
	phase := "lock"
	defer func() {
		var ie *InterruptedError
		if err != nil && ctx.Err() != nil && !errors.As(err, &ie) {
			err = &InterruptedError{Op: op, Src: src, Dst: dst, Phase: phase, Err: err}
		}
	}()
	recovered, err := ops.recoverOverlapping(ctx, in)
	if err != nil {
		return Result{}, err
	}
	read, write := in.locks()
	unlock, lost, err := ops.o.Locker.Lock(ctx, read, write)
	if err != nil {
		return Result{}, fmt.Errorf("folder: locking: %w", err)
	}
	defer unlock()
	phase = "check"
	// Checks, under the lock.
	if empty, err := ops.empty(ctx, src); err != nil {
		return Result{}, err
	} else if empty {
		if res, ok, err := ops.alreadyDone(ctx, in); err != nil || ok {
			res.Recovered, res.Seconds = recovered, time.Since(begin).Seconds()
			return res, err
		}
		return Result{}, fmt.Errorf("%w: %q", ErrNotFound, src)
	}
	if op != opDelete && !overwrite {
		if empty, err := ops.empty(ctx, dst); err != nil {
			return Result{}, err
		} else if !empty {
			return Result{}, fmt.Errorf("%w: %q", ErrNotEmpty, dst)
		}
	}
	// The intent first: from here on, a crash is finished by Recover.
	phase = "intent"
	data, _ := json.Marshal(in)
	t0 := time.Now()
	etag, retried, err := ops.putResolved(ctx, in.key(), data, objstore.IfAbsent())
	in.LateCreate = retried // recorded by the next save of the intent
	if errors.Is(err, objstore.ErrAmbiguous) {
		return Result{}, fmt.Errorf("folder: writing the intent: the outcome is unknown; if the write still lands, "+
			"the next Recover (or overlapping operation) carries the %s out, after checking again that it may: %w", op, err)
	}
	if err != nil {
		if ctx.Err() != nil {
			// A cancelled write may still have landed.
			return Result{}, &InterruptedError{Op: op, Src: src, Dst: dst, Phase: "intent", Journal: in.ID, Err: err}
		}
		// Refused (not ambiguous): the intent is not there, so nothing was
		// changed.
		return Result{}, &InterruptedError{Op: op, Src: src, Dst: dst, Phase: "intent", Failed: true,
			Err: fmt.Errorf("folder: writing the intent: %w", err)}
	}
	intentTime := time.Since(t0)
	res, err := ops.execute(ctx, in, etag, lost, true)
	res.JournalSeconds += intentTime.Seconds()
	res.Recovered = recovered
	res.Seconds = time.Since(begin).Seconds()
	return res, err
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%019d-%s", time.Now().UnixNano(), hex.EncodeToString(b[:]))
}

// mayRun checks, under the operation's locks, what start checked before
// writing the intent; it returns why the operation may not run, or "".
func (ops *Ops) mayRun(ctx context.Context, in *intent) (string, error) {
	if empty, err := ops.empty(ctx, in.Src); err != nil {
		return "", err
	} else if empty {
		return fmt.Sprintf("the source %q is empty", in.Src), nil
	}
	if in.Op != opDelete && !in.Overwrite {
		if empty, err := ops.empty(ctx, in.Dst); err != nil {
			return "", err
		} else if !empty {
			return fmt.Sprintf("the destination %q is not empty", in.Dst), nil
		}
	}
	return "", nil
}

func (ops *Ops) empty(ctx context.Context, prefix string) (bool, error) {
	for _, err := range ops.s.List(ctx, prefix, &objstore.ListOptions{PageSize: 1}) {
		if err != nil {
			return false, err
		}
		return false, nil
	}
	return true, nil
}

// saveIntent updates the intent with a compare-and-swap.
func (ops *Ops) saveIntent(ctx context.Context, in *intent, etag string) (string, error) {
	data, _ := json.Marshal(in)
	etag, _, err := ops.putResolved(ctx, in.key(), data, objstore.IfMatch(etag))
	if err != nil {
		return "", fmt.Errorf("folder: updating the intent: %w", err)
	}
	return etag, nil
}

// putResolved writes a journal object under cond (if-absent or if-match) and,
// when the outcome is unknown, asks again with the same bytes until it knows:
// the write succeeds, or it fails its condition and the key holds exactly
// these bytes (an earlier try landed). A try that failed ambiguously can
// land later only on the state it was conditional on, which a known outcome
// has moved past. It returns the object's ETag and whether a try had an
// unknown outcome, or an error wrapping objstore.ErrAmbiguous if it never
// found out.
func (ops *Ops) putResolved(ctx context.Context, key string, data []byte, cond objstore.Condition) (etag string, retried bool, err error) {
	etag, err = ops.putResolvedTries(ctx, key, data, cond, &retried)
	return etag, retried, err
}

func (ops *Ops) putResolvedTries(ctx context.Context, key string, data []byte, cond objstore.Condition, retried *bool) (string, error) {
	var lastErr error
	for attempt := range 8 {
		if attempt > 0 {
			if err := journalRetry.Wait(ctx, attempt-1); err != nil {
				return "", fmt.Errorf("%w (%w)", lastErr, err)
			}
		}
		info, err := ops.s.PutBytes(ctx, key, data, &objstore.PutOptions{If: cond, ContentType: "application/json"})
		switch {
		case err == nil:
			return info.ETag, nil
		case errors.Is(err, objstore.ErrPreconditionFailed) && lastErr != nil:
			cur, ci, gerr := ops.s.GetBytes(ctx, key)
			switch {
			case gerr == nil && bytes.Equal(cur, data):
				return ci.ETag, nil // an earlier try landed
			case gerr == nil, errors.Is(gerr, objstore.ErrNotFound), ctx.Err() != nil:
				return "", err // someone else's write
			}
			// Could not read: ask again.
		case errors.Is(err, objstore.ErrAmbiguous):
			lastErr, *retried = err, true
		default:
			if lastErr != nil && ctx.Err() != nil {
				return "", fmt.Errorf("%w (%w)", lastErr, err)
			}
			return "", err
		}
	}
	return "", lastErr
}

// saveTimed is saveIntent, counted as journal time.
func (ops *Ops) saveTimed(ctx context.Context, in *intent, etag string, jt *journalTimer) (string, error) {
	defer jt.start()()
	return ops.saveIntent(ctx, in, etag)
}

// execute runs (or finishes) the operation in the intent; the caller holds
// its locks. fresh: this process wrote the intent and checked, under the
// lock, that the destination was empty, so steps need not look before they
// act; a roll-forward (fresh false) checks every step.
func (ops *Ops) execute(ctx context.Context, in *intent, etag string, lost <-chan struct{}, fresh bool) (res Result, err error) {
	res = Result{Op: in.Op, Src: in.Src, Dst: in.Dst}
	jt := &journalTimer{}
	defer func() { res.JournalSeconds += jt.seconds() }()
	phase := "manifest"
	// copied and deleted count confirmed steps; tried counts the steps of
	// the current phase begun, so tried minus the phase's confirmed ones is
	// how many were under way when it stopped (a request the client gave
	// up on can still land).
	var copied, deleted, tried atomic.Int64
	// However it stops — its context ended, or a request failed (a full
	// disk, a store gone away) — an operation says what it left and what
	// finishes it: the journal is written, so a roll-forward will.
	defer func() {
		var ie *InterruptedError
		var ce *ConflictError
		if err != nil && !errors.Is(err, ErrLockLost) && !errors.As(err, &ie) && !errors.As(err, &ce) {
			err = &InterruptedError{Op: in.Op, Src: in.Src, Dst: in.Dst, Journal: in.ID, Phase: phase,
				Objects: in.Objects, Copied: copied.Load(), Deleted: deleted.Load(), Failed: ctx.Err() == nil, Err: err}
			switch phase {
			case "copy":
				err.(*InterruptedError).Unsure = max(0, tried.Load()-copied.Load())
			case "delete":
				err.(*InterruptedError).Unsure = max(0, tried.Load()-deleted.Load())
			}
			if !in.Complete {
				err.(*InterruptedError).Objects = 0
			}
		}
	}()
	check := func() error {
		select {
		case <-lost:
			return ErrLockLost
		default:
			return ctx.Err()
		}
	}
	if !in.Complete && !fresh {
		// Nothing has been changed yet. The intent's writer checked, under the
		// locks, that the operation may run; that write may have landed late,
		// after its operation gave up and others moved on, so check again.
		if why, err := ops.mayRun(ctx, in); err != nil {
			return res, err
		} else if why != "" {
			if err := ops.removeJournal(ctx, in, jt, false); err != nil {
				return res, err
			}
			res.Abandoned = why
			return res, nil
		}
	}
	if !in.Complete {
		if err = ops.manifest(ctx, in, jt); err != nil {
			return res, err
		}
		in.Complete = true
		if etag, err = ops.saveTimed(ctx, in, etag, jt); err != nil {
			return res, err
		}
	}
	res.Objects, res.Bytes = in.Objects, in.Bytes
	conflicts := &conflicts{op: in.Op}
	var skipped atomic.Int64
	if in.Done {
		phase = "cleanup"
		return res, ops.removeJournal(ctx, in, jt, !fresh)
	}
	if in.Op != opDelete && !in.Deleting {
		phase = "copy"
		t0 := time.Now()
		if err := ops.phase(ctx, in, "copy", check, jt, func(ctx context.Context, e entry) error {
			tried.Add(1)
			done, err := ops.copyOne(ctx, in, e, conflicts, fresh)
			if err != nil && !mayHaveLanded(err) {
				tried.Add(-1)
			}
			if done {
				skipped.Add(1)
			}
			if err == nil {
				copied.Add(1)
			}
			return err
		}); err != nil {
			return res, err
		}
		res.CopySeconds = time.Since(t0).Seconds()
	}
	if in.Op != opDelete {
		copied.Store(in.Objects)
	}
	if in.Op != opCopy {
		phase = "delete"
		tried.Store(deleted.Load())
		if !in.Deleting {
			in.Deleting = true
			if etag, err = ops.saveTimed(ctx, in, etag, jt); err != nil {
				return res, err
			}
		}
		t0 := time.Now()
		if err := ops.deletePhase(ctx, in, check, jt, conflicts, &deleted, &tried); err != nil {
			return res, err
		}
		res.DeleteSeconds = time.Since(t0).Seconds()
	}
	phase = "cleanup"
	if err := check(); err != nil {
		return res, err
	}
	// The journal goes last: marked done, then its chunks, then the intent —
	// so a crash in between leaves an intent that says what is left.
	in.Done = true
	if _, err = ops.saveTimed(ctx, in, etag, jt); err != nil {
		return res, err
	}
	if err := ops.removeJournal(ctx, in, jt, !fresh); err != nil {
		return res, err
	}
	res.Skipped = skipped.Load()
	if conflicts.n > 0 {
		return res, conflicts.err()
	}
	return res, nil
}

// manifest lists the source into journal chunks, streaming.
func (ops *Ops) manifest(ctx context.Context, in *intent, jt *journalTimer) error {
	in.Chunks, in.Objects, in.Bytes = 0, 0, 0
	var buf bytes.Buffer
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		in.Chunks++
		stop := jt.start()
		defer stop()
		if _, err := ops.s.PutBytes(ctx, in.chunk(in.Chunks), buf.Bytes(), &objstore.PutOptions{ContentType: "application/x-ndjson"}); err != nil {
			return fmt.Errorf("folder: writing the manifest: %w", err)
		}
		buf.Reset()
		n = 0
		return nil
	}
	enc := json.NewEncoder(&buf)
	for info, err := range ops.s.List(ctx, in.Src, nil) {
		if err != nil {
			return fmt.Errorf("folder: listing %q: %w", in.Src, err)
		}
		_ = enc.Encode(entry{K: strings.TrimPrefix(info.Key, in.Src), E: info.ETag, S: info.Size})
		in.Objects++
		in.Bytes += info.Size
		n++
		ops.report(Progress{Phase: "manifest", Done: in.Objects})
		if n == ops.o.ChunkSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (ops *Ops) report(p Progress) {
	if ops.o.Progress != nil {
		ops.o.Progress(p)
	}
}

// phase applies fn to every manifest entry with one bounded pool of workers
// across all the chunks: the next chunk is read while this one's entries
// run, so that no worker waits for a chunk's slowest entry or for a read.
// At most two chunks are in memory.
func (ops *Ops) phase(ctx context.Context, in *intent, name string, check func() error, jt *journalTimer, fn func(context.Context, entry) error) error {
	var done, nbytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(ops.o.Concurrency)
	type read struct {
		entries []entry
		err     error
	}
	fetch := func(i int) chan read {
		ch := make(chan read, 1)
		go func() {
			entries, err := ops.readChunk(gctx, in, i, jt)
			ch <- read{entries, err}
		}()
		return ch
	}
	var next chan read // the read ahead, until received
	if in.Chunks > 0 {
		next = fetch(1)
	}
	var err error
	for i := 1; i <= in.Chunks && err == nil && gctx.Err() == nil; i++ {
		r := <-next
		next = nil
		if err = firstErr(r.err, check()); err != nil {
			break
		}
		if i < in.Chunks {
			next = fetch(i + 1)
		}
		for _, e := range r.entries {
			if gctx.Err() != nil {
				break
			}
			g.Go(func() error {
				if err := fn(gctx, e); err != nil {
					return err
				}
				ops.report(Progress{Phase: name, Done: done.Add(1), Total: in.Objects, Bytes: nbytes.Add(e.S)})
				return nil
			})
		}
	}
	if err != nil {
		// Stop the workers; the first error in the group is the cause.
		g.Go(func() error { return err })
	}
	err = g.Wait()
	if next != nil {
		<-next // a read ahead left when a worker failed: ends with gctx
	}
	return err
}

// firstErr is a if set, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// journalTimer adds up the time spent on journal requests.
type journalTimer struct{ d atomic.Int64 }

func (j *journalTimer) start() func() {
	t := time.Now()
	return func() { j.d.Add(int64(time.Since(t))) }
}

func (j *journalTimer) seconds() float64 { return time.Duration(j.d.Load()).Seconds() }

// conflicts collects keys that changed after the manifest was taken.
type conflicts struct {
	op   string
	mu   sync.Mutex
	seen map[string]bool
	keys []string
	n    int
}

func (c *conflicts) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[key] {
		return // reported by the copy phase already
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[key] = true
	c.n++
	if len(c.keys) < 100 {
		c.keys = append(c.keys, key)
	}
}

func (c *conflicts) err() error {
	slices.Sort(c.keys)
	return &ConflictError{Op: c.op, Keys: c.keys, N: c.n}
}

// copyOne copies one entry unless its destination already holds it; it
// reports whether the copy had already been done.
func (ops *Ops) copyOne(ctx context.Context, in *intent, e entry, c *conflicts, fresh bool) (bool, error) {
	src, dst := in.Src+e.K, in.Dst+e.K
	if fresh && !in.Overwrite {
		return false, ops.copyChecked(ctx, src, dst, e, c)
	}
	d, err := ops.s.Head(ctx, dst)
	if err == nil && d.ETag == e.E && d.Size == e.S {
		return true, nil
	} else if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return false, err
	}
	// Where the store enforces it, the copy is conditional on the destination
	// as just seen, so that if it lands late it lands on that state or not at all.
	cond := objstore.Condition{}
	if caps, cerr := ops.s.Capabilities(ctx); cerr == nil {
		switch {
		case err != nil && caps.CopyIfAbsent:
			cond = objstore.IfAbsent()
		case err == nil && caps.CopyIfMatch:
			cond = objstore.IfMatch(d.ETag)
		}
	}
	s, err := ops.s.Head(ctx, src)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		c.add(src) // deleted by someone else since the manifest
		return false, nil
	case err != nil:
		return false, err
	case s.ETag != e.E:
		c.add(src) // overwritten since the manifest: not ours to move
		return false, nil
	}
	info, err := ops.s.Copy(ctx, src, dst, cond)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return false, fmt.Errorf("folder: %q changed while the operation held its lock (a writer bypassing cairn?); run Recover: %w", dst, err)
	}
	if err != nil {
		return false, err
	}
	if info.Size != e.S && info.Size != 0 {
		return false, fmt.Errorf("folder: copy of %q gave %d bytes, want %d", src, info.Size, e.S)
	}
	return false, nil
}

// copyChecked copies without looking first (one request): the copy's ETag
// says whether the source was still the manifest's version. If it was not, the
// copy is taken back (the destination was empty and is write-locked) and the
// key reported.
func (ops *Ops) copyChecked(ctx context.Context, src, dst string, e entry, c *conflicts) error {
	// If-absent where the store enforces it: a copy that lands late lands
	// only on an empty destination.
	cond, delCond := objstore.Condition{}, func(string) objstore.Condition { return objstore.Condition{} }
	if caps, err := ops.s.Capabilities(ctx); err == nil {
		if caps.CopyIfAbsent {
			cond = objstore.IfAbsent()
		}
		if caps.DeleteIfMatch {
			delCond = objstore.IfMatch
		}
	}
	info, err := ops.s.Copy(ctx, src, dst, cond)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return fmt.Errorf("folder: %q appeared while the operation held its lock (a writer bypassing cairn?); run Recover: %w", dst, err)
	}
	if errors.Is(err, objstore.ErrNotFound) {
		c.add(src) // deleted by someone else since the manifest
		return nil
	}
	if err != nil {
		return err
	}
	same := info.ETag == e.E
	if !same && strings.Contains(e.E, "-") {
		// A multipart source: its copy gets a new ETag; ask the source itself.
		s, err := ops.s.Head(ctx, src)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		same = err == nil && s.ETag == e.E
	}
	if !same {
		c.add(src)
		if err := ops.s.Delete(ctx, dst, delCond(info.ETag)); err != nil && !errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
	}
	return nil
}

// deletePhase deletes the sources that are still the manifest's versions,
// chunk by chunk. Where the store enforces conditional DELETE each key is
// deleted If-Match its manifest ETag; elsewhere (MinIO) one LIST per chunk
// reads the current ETags and batch requests of deleteBatch keys delete the
// matching ones, all under the folder's write lock. Up to Concurrency
// batches are in flight, and the next chunk is read and listed meanwhile.
func (ops *Ops) deletePhase(ctx context.Context, in *intent, check func() error, jt *journalTimer, c *conflicts, deleted, tried *atomic.Int64) error {
	caps, err := ops.s.Capabilities(ctx)
	if err != nil {
		return err
	}
	if caps.DeleteIfMatch {
		return ops.phase(ctx, in, "delete", check, jt, func(ctx context.Context, e entry) error {
			tried.Add(1)
			if err := ops.deleteOne(ctx, in, e, c); err != nil {
				if !mayHaveLanded(err) {
					tried.Add(-1)
				}
				return err
			}
			deleted.Add(1)
			return nil
		})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(ops.o.Concurrency)
	var nbytes atomic.Int64
	done := func(n int, b int64) {
		ops.report(Progress{Phase: "delete", Done: deleted.Add(int64(n)), Total: in.Objects, Bytes: nbytes.Add(b)})
	}
	after := ""
	err = func() error {
		for i := 1; i <= in.Chunks; i++ {
			if err := firstErr(check(), gctx.Err()); err != nil {
				return err
			}
			entries, err := ops.readChunk(gctx, in, i, jt)
			if err != nil {
				return err
			}
			if len(entries) == 0 {
				continue
			}
			last := in.Src + entries[len(entries)-1].K
			current := map[string]string{}
			for info, err := range ops.s.List(gctx, in.Src, &objstore.ListOptions{StartAfter: after}) {
				if err != nil {
					return err
				}
				if info.Key > last {
					break
				}
				current[info.Key] = info.ETag
			}
			after = last
			var doomed []string
			var doomedBytes, goneBytes int64
			for _, e := range entries {
				src := in.Src + e.K
				etag, ok := current[src]
				switch {
				case !ok: // already deleted (a roll-forward)
					goneBytes += e.S
				case etag != e.E:
					c.add(src)
					goneBytes += e.S
				default:
					doomed = append(doomed, src)
					doomedBytes += e.S
				}
			}
			tried.Add(int64(len(entries) - len(doomed)))
			done(len(entries)-len(doomed), goneBytes)
			for len(doomed) > 0 && gctx.Err() == nil {
				batch := doomed[:min(deleteBatch, len(doomed))]
				doomed = doomed[len(batch):]
				share := doomedBytes * int64(len(batch)) / int64(len(batch)+len(doomed))
				doomedBytes -= share
				g.Go(func() error {
					tried.Add(int64(len(batch)))
					failed, err := ops.s.DeleteMany(gctx, batch, 1)
					if err != nil {
						if !mayHaveLanded(err) {
							tried.Add(-int64(len(batch)))
						}
						return err
					}
					for k, err := range failed {
						return fmt.Errorf("folder: deleting %q (and %d more): %w", k, len(failed)-1, err)
					}
					done(len(batch), share)
					return nil
				})
			}
		}
		return nil
	}()
	if err != nil {
		g.Go(func() error { return err }) // stops the batches; the first error is the cause
	}
	return g.Wait()
}

// deleteBatch is how many keys one batch delete request of the delete phase
// carries: MinIO deletes several requests of 100 keys at once several times
// faster than one of 1,000 (measured: 1,000-5,000 against 8,000-9,000
// deletes/s).
const deleteBatch = 100

func (ops *Ops) readChunk(ctx context.Context, in *intent, i int, jt *journalTimer) ([]entry, error) {
	stop := jt.start()
	data, _, err := ops.s.GetBytes(ctx, in.chunk(i))
	stop()
	if err != nil {
		return nil, fmt.Errorf("folder: reading manifest chunk %d: %w", i, err)
	}
	var out []entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("folder: manifest chunk %d is corrupt: %w", i, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// deleteOne deletes one source entry if it is still the manifest's version,
// with one DELETE If-Match its manifest ETag: deletePhase uses it only where
// the store enforces that condition. A 412 is asked again with a HEAD, since
// some servers answer 412 (not 404) for a key that is already gone.
func (ops *Ops) deleteOne(ctx context.Context, in *intent, e entry, c *conflicts) error {
	src := in.Src + e.K
	err := ops.s.Delete(ctx, src, objstore.IfMatch(e.E))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil // already deleted (a roll-forward)
	case errors.Is(err, objstore.ErrPreconditionFailed):
		_, herr := ops.s.Head(ctx, src)
		switch {
		case errors.Is(herr, objstore.ErrNotFound):
			return nil
		case herr != nil:
			return herr
		}
		c.add(src) // changed since the manifest: not ours to delete
		return nil
	}
	return err
}

// removeJournal removes a done operation's chunks, then its intent. With
// evidence (a roll-forward finished an interrupted operation) the intent and
// the manifest stay as a tombstone, so that the interrupted command, run
// again, can tell that its operation was carried out (Result.Already).
func (ops *Ops) removeJournal(ctx context.Context, in *intent, jt *journalTimer, evidence bool) error {
	defer jt.start()()
	if evidence && in.Complete && in.Done {
		tomb := *in
		tomb.Finished = true
		data, _ := json.Marshal(&tomb)
		if _, err := ops.s.PutBytes(ctx, in.key(), data, &objstore.PutOptions{ContentType: "application/json"}); err != nil {
			return fmt.Errorf("folder: removing the journal: %w", err)
		}
		return nil
	}
	var chunks []string
	for info, err := range ops.s.List(ctx, JournalPrefix+in.ID+"/m/", nil) {
		if err != nil {
			return fmt.Errorf("folder: listing the journal: %w", err)
		}
		chunks = append(chunks, info.Key)
	}
	failed, err := ops.s.DeleteMany(ctx, chunks, ops.o.Concurrency)
	if err == nil {
		for k, ferr := range failed {
			err = fmt.Errorf("%s: %w", k, ferr)
		}
	}
	if err != nil {
		return fmt.Errorf("folder: removing the journal: %w", err)
	}
	if in.LateCreate {
		// A late copy of the intent's create could land once the key is
		// absent, and start the operation again: keep a tombstone instead.
		tomb := *in
		tomb.Finished = true
		data, _ := json.Marshal(&tomb)
		if _, err := ops.s.PutBytes(ctx, in.key(), data, &objstore.PutOptions{ContentType: "application/json"}); err != nil {
			return fmt.Errorf("folder: removing the journal: %w", err)
		}
		return nil
	}
	if err := ops.s.Delete(ctx, in.key(), objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("folder: removing the journal: %w", err)
	}
	return nil
}

func (ops *Ops) removeChunks(ctx context.Context, id string) {
	for info, err := range ops.s.List(ctx, JournalPrefix+id+"/", nil) {
		if err != nil {
			return
		}
		_ = ops.s.Delete(ctx, info.Key, objstore.Condition{})
	}
}

// tombstone is a finished journal's intent left in place.
type tombstone struct {
	id    string
	since time.Time // its Last-Modified, by the store's clock
	in    *intent
}

// intents lists the journals present: intents, and ids of orphan chunks.
func (ops *Ops) intents(ctx context.Context) ([]*intent, []string, error) {
	ins, orphans, _, err := ops.journals(ctx)
	return ins, orphans, err
}

// journals lists the journals present: live intents, ids of orphan chunks,
// and tombstones.
func (ops *Ops) journals(ctx context.Context) ([]*intent, []string, []tombstone, error) {
	var out []*intent
	var orphans []string
	var tombs []tombstone
	for info, err := range ops.s.List(ctx, JournalPrefix, &objstore.ListOptions{Delimiter: "/"}) {
		if err != nil {
			return nil, nil, nil, fmt.Errorf("folder: listing the journal: %w", err)
		}
		if !info.IsPrefix {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(info.Key, JournalPrefix), "/")
		in, ii, err := ops.readIntentInfo(ctx, id)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			orphans = append(orphans, id)
		case err != nil:
			return nil, nil, nil, err
		case in.Finished:
			tombs = append(tombs, tombstone{id: id, since: ii.LastModified, in: in})
		default:
			out = append(out, in)
		}
	}
	return out, orphans, tombs, nil
}

// readIntent reads a live intent; a tombstone reads as objstore.ErrNotFound.
func (ops *Ops) readIntent(ctx context.Context, id string) (*intent, string, error) {
	in, info, err := ops.readIntentInfo(ctx, id)
	if err == nil && in.Finished {
		return nil, "", fmt.Errorf("folder: journal %s is finished: %w", id, objstore.ErrNotFound)
	}
	return in, info.ETag, err
}

func (ops *Ops) readIntentInfo(ctx context.Context, id string) (*intent, objstore.Info, error) {
	data, info, err := ops.s.GetBytes(ctx, JournalPrefix+id+"/intent.json")
	if err != nil {
		return nil, info, err
	}
	var in intent
	if err := json.Unmarshal(data, &in); err != nil || in.ID != id {
		return nil, info, fmt.Errorf("folder: journal %s: corrupt intent: %v", id, err)
	}
	return &in, info, nil
}

// recoverOverlapping finishes interrupted operations on folders overlapping
// the new one's.
func (ops *Ops) recoverOverlapping(ctx context.Context, next *intent) (int, error) {
	ins, _, err := ops.intents(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, in := range ins {
		if !overlaps(in, next) {
			continue
		}
		_, err := ops.recoverOne(ctx, in.ID)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // its own process finished it since the listing
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func overlaps(a, b *intent) bool {
	for _, x := range []string{a.Src, a.Dst} {
		for _, y := range []string{b.Src, b.Dst} {
			if x != "" && y != "" && nested(x, y) {
				return true
			}
		}
	}
	return false
}

// recoverOne finishes one journal under its operation's locks.
func (ops *Ops) recoverOne(ctx context.Context, id string) (Result, error) {
	in, _, err := ops.readIntent(ctx, id)
	if err != nil {
		return Result{}, err
	}
	read, write := in.locks()
	unlock, lost, err := ops.o.Locker.Lock(ctx, read, write)
	if err != nil {
		return Result{}, fmt.Errorf("folder: locking to recover %s: %w", id, err)
	}
	defer unlock()
	op := in.Op
	in, etag, err := ops.readIntent(ctx, id) // someone may have finished it meanwhile
	if errors.Is(err, objstore.ErrNotFound) {
		return Result{Op: op}, nil
	}
	if err != nil {
		return Result{}, err
	}
	return ops.execute(ctx, in, etag, lost, false)
}

// RecoverReport says what Recover did.
type RecoverReport struct {
	Finished []Result `json:"finished"`
	// Conflicts of finished operations (objects left untouched).
	Conflicts []string `json:"conflicts,omitempty"`
	// Orphans: journal directories without an intent (removed).
	Orphans int `json:"orphans_removed"`
	// Tombstones: finished journals kept against a late-landing intent,
	// removed once past Options.TombstoneGrace.
	Tombstones int `json:"tombstones_removed,omitempty"`
}

// Recover finishes every interrupted operation in the store (rolling it
// forward) and removes journal chunks that belong to no intent. It is
// idempotent; an operation still running elsewhere is waited for through its
// locks.
func (ops *Ops) Recover(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	ins, orphans, tombs, err := ops.journals(ctx)
	if err != nil {
		return rep, err
	}
	for _, in := range ins {
		res, err := ops.recoverOne(ctx, in.ID)
		var ce *ConflictError
		switch {
		case errors.As(err, &ce):
			rep.Conflicts = append(rep.Conflicts, ce.Keys...)
		case errors.Is(err, objstore.ErrNotFound):
			continue
		case err != nil:
			return rep, err
		}
		rep.Finished = append(rep.Finished, res)
	}
	// An intent is written before its chunks and removed after them, so
	// chunks without an intent belong to no operation, live or dead.
	for _, id := range orphans {
		ops.removeChunks(ctx, id)
		rep.Orphans++
	}
	// Tombstones past their grace, by the store's own clock (the
	// Last-Modified of a write made now), never this machine's.
	if len(tombs) > 0 {
		info, err := ops.s.PutBytes(ctx, JournalPrefix+"clock", nil, nil)
		if err == nil && info.LastModified.IsZero() {
			info, err = ops.s.Head(ctx, JournalPrefix+"clock")
		}
		if err != nil {
			return rep, fmt.Errorf("folder: reading the store's clock: %w", err)
		}
		_ = ops.s.Delete(ctx, JournalPrefix+"clock", objstore.Condition{})
		for _, tb := range tombs {
			if info.LastModified.Sub(tb.since) >= ops.o.TombstoneGrace {
				ops.removeChunks(ctx, tb.id)
				rep.Tombstones++
			}
		}
	}
	return rep, nil
}

// Snapshot writes every object under prefix to w as a tar archive (names
// relative to the folder; ETag, content type and user metadata as
// SCHILY.xattr.user.cairn.* PAX records, which GNU tar --xattrs restores as
// extended attributes), under the
// folder's read lock, so it is one consistent view with respect to other cairn
// operations. Objects are streamed one at a time.
func (ops *Ops) Snapshot(ctx context.Context, prefix string, w io.Writer) (Result, error) {
	begin := time.Now()
	prefix, err := Prefix(prefix)
	if err != nil {
		return Result{}, err
	}
	probe := &intent{Op: "snapshot", Src: prefix}
	recovered, err := ops.recoverOverlapping(ctx, probe)
	if err != nil {
		return Result{}, err
	}
	unlock, lost, err := ops.o.Locker.Lock(ctx, []string{lockPath(prefix)}, nil)
	if err != nil {
		return Result{}, fmt.Errorf("folder: locking: %w", err)
	}
	defer unlock()
	res := Result{Op: "snapshot", Src: prefix, Recovered: recovered}
	tw := tar.NewWriter(w)
	for info, err := range ops.s.List(ctx, prefix, nil) {
		if err != nil {
			return res, err
		}
		select {
		case <-lost:
			return res, ErrLockLost
		default:
		}
		rc, full, err := ops.s.Get(ctx, info.Key)
		if err != nil {
			return res, err
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(info.Key, prefix), Mode: 0o644, Size: full.Size, ModTime: full.LastModified,
			Typeflag: tar.TypeReg, Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.user.cairn.etag": full.ETag}}
		if full.ContentType != "" {
			hdr.PAXRecords["SCHILY.xattr.user.cairn.content-type"] = full.ContentType
		}
		for k, v := range full.Metadata {
			hdr.PAXRecords["SCHILY.xattr.user.cairn.meta."+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			rc.Close()
			return res, err
		}
		n, err := io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return res, err
		}
		res.Objects++
		res.Bytes += n
		ops.report(Progress{Phase: "snapshot", Done: res.Objects, Bytes: res.Bytes})
	}
	if err := tw.Close(); err != nil {
		return res, err
	}
	res.Seconds = time.Since(begin).Seconds()
	return res, nil
}

// alreadyDone reports whether the rename or delete in next was carried out
// before: a roll-forward finished an interrupted run of exactly it (same
// folders and overwrite), left its tombstone, and the folders still hold what
// that run left — nothing at the source, and for a rename the manifest's
// every object at the destination, same size and (unless multipart) same
// ETag. The caller holds next's locks and has found the source empty.
func (ops *Ops) alreadyDone(ctx context.Context, next *intent) (Result, bool, error) {
	_, _, tombs, err := ops.journals(ctx)
	if err != nil {
		return Result{}, false, err
	}
	for _, tb := range tombs {
		in := tb.in
		if in.Op == opCopy || in.Op != next.Op || in.Src != next.Src || in.Dst != next.Dst || in.Overwrite != next.Overwrite || !in.Complete {
			continue
		}
		if empty, err := ops.empty(ctx, in.Src); err != nil || !empty {
			return Result{}, false, err
		}
		ok := true
		if in.Op != opDelete {
			if ok, err = ops.holdsManifest(ctx, in); err != nil {
				return Result{}, false, err
			}
		}
		if ok {
			return Result{Op: in.Op, Src: in.Src, Dst: in.Dst, Objects: in.Objects, Bytes: in.Bytes, Already: true}, true, nil
		}
	}
	return Result{}, false, nil
}

// holdsManifest reports whether the destination holds every object of the
// manifest (size, and ETag unless the source was multipart).
func (ops *Ops) holdsManifest(ctx context.Context, in *intent) (bool, error) {
	jt := &journalTimer{}
	after := ""
	for i := 1; i <= in.Chunks; i++ {
		entries, err := ops.readChunk(ctx, in, i, jt)
		if errors.Is(err, objstore.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if len(entries) == 0 {
			continue
		}
		have := map[string]objstore.Info{}
		last := in.Dst + entries[len(entries)-1].K
		for info, err := range ops.s.List(ctx, in.Dst, &objstore.ListOptions{StartAfter: after}) {
			if err != nil {
				return false, err
			}
			if info.Key > last {
				break
			}
			have[info.Key] = info
		}
		after = last
		for _, e := range entries {
			d, ok := have[in.Dst+e.K]
			if !ok || d.Size != e.S || (d.ETag != e.E && !strings.Contains(e.E, "-")) {
				return false, nil
			}
		}
	}
	return true, nil
}

// InterruptedError: an operation stopped before its end, because its
// context ended (Ctrl-C, a deadline) or, with Failed, because a request
// failed (a full disk, a store gone away; Err says which). It says what
// state was left:
//
//   - Journal == "": the intent was not written, so this operation changed
//     nothing (a roll-forward it ran first reports its own interruption).
//   - Journal != "": the operation is journaled; the next Recover or
//     operation on an overlapping folder finishes it (rolls it forward). In
//     phase "intent" the interrupted write of the intent may or may not have
//     landed: if it did, that roll-forward checks again that the operation
//     may run, as for any intent whose manifest is not complete.
type InterruptedError struct {
	Op, Src, Dst string
	// Journal is the journal's id under JournalPrefix, or "".
	Journal string
	// Phase: "lock", "check", "intent", "manifest", "copy", "delete" or
	// "cleanup" (every object done; only the journal's removal was left).
	Phase string
	// Objects in the operation (0 before the manifest was complete); Copied
	// and Deleted of them, by this run or an earlier one (a roll-forward
	// counts the copies it found done). They count only confirmed steps:
	// Unsure more (copies in phase "copy", deletes in phase "delete") were
	// under way when it stopped, and each may or may not have landed (a
	// request the client gave up on can still be applied by the store).
	Objects, Copied, Deleted, Unsure int64
	// Failed: a request failed (Err), the context had not ended.
	Failed bool
	// Err is the error the interruption caused (wraps the context's error),
	// or the failure that stopped the operation.
	Err error
}

func (e *InterruptedError) Error() string {
	if e.Failed {
		return "folder: " + e.Op + " " + e.Src + arrowTo(e.Dst) + " stopped: " + e.Err.Error() + ": " + e.State() + "; " + e.Next("Recover")
	}
	return "folder: " + e.Op + " " + e.Src + arrowTo(e.Dst) + " interrupted: " + e.State() + "; " + e.Next("Recover")
}

func (e *InterruptedError) Unwrap() error { return e.Err }

// State says what the interruption left, e.g. "141 of 3000 objects copied
// to dst/ (the source is untouched)".
func (e *InterruptedError) State() string {
	switch {
	case e.Journal == "":
		return "nothing was changed"
	case e.Phase == "intent":
		return "nothing was changed yet, but the journal's intent may have been written"
	case e.Phase == "manifest":
		return "nothing was changed yet (the journal's list of objects was being written)"
	case e.Phase == "copy":
		return fmt.Sprintf("%s of %d objects copied to %s (%sthe source is untouched)", e.atLeast(e.Copied), e.Objects, e.Dst, e.unsure("copies"))
	case e.Phase == "delete" && e.Op == opDelete:
		return fmt.Sprintf("%s of %d objects deleted from %s%s", e.atLeast(e.Deleted), e.Objects, e.Src, e.paren("deletes"))
	case e.Phase == "delete":
		return fmt.Sprintf("all %d objects copied to %s; %s of %d deleted from %s%s", e.Objects, e.Dst, e.atLeast(e.Deleted), e.Objects, e.Src, e.paren("deletes"))
	}
	return fmt.Sprintf("all %d objects done; only the journal's removal was left", e.Objects)
}

// mayHaveLanded: a request that failed with err may still have been
// applied (its outcome is unknown, or its context ended while it was on
// its way), rather than refused (a full disk).
func mayHaveLanded(err error) bool {
	return errors.Is(err, objstore.ErrAmbiguous) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// atLeast is n, preceded by "at least" when steps were under way.
func (e *InterruptedError) atLeast(n int64) string {
	if e.Unsure > 0 {
		return "at least " + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// unsure names the steps under way when the operation stopped, as a
// clause ending in "; " ("" if none).
func (e *InterruptedError) unsure(what string) string {
	if e.Unsure == 0 {
		return ""
	}
	return fmt.Sprintf("%d more %s were under way when it stopped and may have landed; ", e.Unsure, what)
}

// paren is unsure's clause in parentheses after a space, or "".
func (e *InterruptedError) paren(what string) string {
	if e.Unsure == 0 {
		return ""
	}
	return " (" + strings.TrimSuffix(e.unsure(what), "; ") + ")"
}

// Journaled reports whether a roll-forward will finish (or, if it may no
// longer run, drop) the operation.
func (e *InterruptedError) Journaled() bool { return e.Journal != "" }

// Next is the sentence that says what finishes the operation, with recover
// naming the command or call that does (e.g. "'cairn fs recover --store URL'").
func (e *InterruptedError) Next(recover string) string {
	if e.Journal == "" && e.Failed {
		return "run it again once the cause is fixed"
	}
	if e.Journal == "" {
		return "run it again to do it"
	}
	what := map[string]string{opRename: "the rename", opCopy: "the copy", opDelete: "the delete"}[e.Op]
	return fmt.Sprintf("%s is journaled (%s%s) and will be finished by %s or by the next operation on these folders", what, JournalPrefix, e.Journal, recover)
}

func arrowTo(dst string) string {
	if dst == "" {
		return ""
	}
	return " -> " + dst
}

// Pending is an operation whose journal is live: it is running now, or it
// was interrupted and waits for a roll-forward.
type Pending struct {
	Journal string    `json:"journal"`
	Op      string    `json:"op"`
	Src     string    `json:"src"`
	Dst     string    `json:"dst,omitempty"`
	Created time.Time `json:"created"` // by the writer's clock
	// Phase: "manifest" (nothing changed yet), "copy", "delete" or
	// "cleanup" (only the journal's removal is left).
	Phase   string `json:"phase"`
	Objects int64  `json:"objects,omitempty"`
}

// Touches reports whether the operation writes or reads key, or a key under
// it when key ends in "/" (a folder); "" is the whole bucket.
func (p Pending) Touches(key string) bool {
	for _, f := range []string{p.Src, p.Dst} {
		if f == "" {
			continue
		}
		if strings.HasPrefix(key, f) || (strings.HasSuffix(key, "/") || key == "") && strings.HasPrefix(f, key) {
			return true
		}
	}
	return false
}

// PendingOps lists the operations in s whose journals are live (running or
// interrupted), without locking and without finishing them. prefix limits
// the list to operations that touch it ("" for all).
func PendingOps(ctx context.Context, s *objstore.Store, prefix string) ([]Pending, error) {
	ops := New(s, &Options{Locker: LocalLocker{}})
	ins, _, err := ops.intents(ctx)
	if err != nil {
		return nil, err
	}
	var out []Pending
	for _, in := range ins {
		p := Pending{Journal: in.ID, Op: in.Op, Src: in.Src, Dst: in.Dst, Created: in.Created, Phase: "manifest"}
		switch {
		case in.Done:
			p.Phase = "cleanup"
		case in.Deleting || in.Complete && in.Op == opDelete:
			p.Phase = "delete"
		case in.Complete:
			p.Phase = "copy"
		}
		if in.Complete {
			p.Objects = in.Objects
		}
		if prefix == "" || p.Touches(prefix) {
			out = append(out, p)
		}
	}
	return out, nil
}

// journalRetry spaces the tries of a journal write whose outcome was
// unknown: full jitter from 5ms, doubling up to 40ms.
var journalRetry = backoff.Policy{Base: 5 * time.Millisecond, Max: 40 * time.Millisecond}
