package docstore

import (
	"bytes"
	"context"
	"crypto/md5"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/objstore"
)

// ErrContention: the attempts ran out while other writers kept changing the
// document. It wraps objstore.ErrPreconditionFailed.
var ErrContention = fmt.Errorf("docstore: gave up after repeated conflicting writes; retry later or raise Options.MaxAttempts: %w", objstore.ErrPreconditionFailed)

// UnsafeUpdateError: Create or Update on a store that does not enforce
// conditional writes, without Options.LastWriterWins. It matches
// objstore.ErrNotSupported. Its message names the option, for programs; a
// command-line tool, which has no such option to give, names its own remedy.
type UnsafeUpdateError struct {
	Key   string // the document
	Store string // the store, as objstore.Store.String gives it
}

func (e *UnsafeUpdateError) Error() string {
	return fmt.Sprintf("docstore: %q: %s does not enforce conditional writes, so concurrent updates could be lost; only a program that accepts last-writer-wins may write there (docstore.Options.LastWriterWins): %v",
		e.Key, e.Store, objstore.ErrNotSupported)
}

// Is makes it match objstore.ErrNotSupported.
func (e *UnsafeUpdateError) Is(target error) bool { return target == objstore.ErrNotSupported }

// Strategy chooses how documents are stored.
type Strategy int

const (
	// Auto: compare-and-swap where the store enforces conditional writes (probed),
	// the register otherwise.
	Auto Strategy = iota
	// CAS forces compare-and-swap; operations fail with ErrNotSupported on a
	// store that does not enforce conditions.
	CAS
	// Register forces the last-writer-wins register (for tests and for stores
	// whose probe you do not want to run).
	Register
)

// Options configure a Store. A nil *Options means all defaults.
type Options struct {
	// MaxAttempts bounds the writes tried per Update (redrives after 412 and
	// retries after 409 or transient errors). Default: 100.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the full-jitter exponential backoff after
	// conflicts. Defaults: 2ms and 200ms.
	BaseBackoff, MaxBackoff time.Duration
	// HistoryLen is how many earlier writes each document remembers, which is
	// how far back a lost response can be resolved. Default: 32.
	HistoryLen int
	// NoGroupCommit sends every Update as its own write (the naive loop with the
	// nonce safety kept). Default: false.
	NoGroupCommit bool
	// MaxBatch caps how many updates one group commit applies. Default: 1024.
	MaxBatch int
	// Strategy: Auto (default), CAS or Register.
	Strategy Strategy
	// LastWriterWins allows Create and Update on a register (a store without
	// conditional writes), accepting that concurrent updates can be lost.
	// Default: false (they fail with objstore.ErrNotSupported).
	LastWriterWins bool
	// RegisterGrace is how long superseded register versions are kept before
	// cleanup deletes them (readers that listed just before a write can still
	// fetch what they saw). Default: 5 minutes.
	RegisterGrace time.Duration
	// WriterID names this writer in nonces and register keys. Default: random.
	WriterID string
	// CommitTimeout bounds one group commit (it runs detached from any single
	// caller's context). Default: 1 minute.
	CommitTimeout time.Duration
}

// Meta describes a committed document version.
type Meta struct {
	Key          string    `json:"key"`
	ETag         string    `json:"etag"`
	Rev          int64     `json:"rev"`
	Exists       bool      `json:"exists"`
	LastModified time.Time `json:"last_modified,omitzero"`
}

// Store keeps documents in an objstore.Store. It is safe for concurrent use;
// use one per process and store so group commit can combine updates.
type Store struct {
	s     *objstore.Store
	opts  Options
	retry backoff.Policy // BaseBackoff, MaxBackoff

	counter atomic.Uint64

	mu       sync.Mutex
	batchers map[string]*batcher
	// written is, per document, the state this Store's last group commit
	// wrote (a stale one costs a write one 412 and a read).
	written map[string]*current
	// level is, per document written lately with 412s, how contended its
	// writes are (see contended; at most maxWritten documents).
	level    map[string]level
	strategy Strategy // resolved from Auto on first use
	stats    Stats

	// base is the context of every group commit: Close cancels it and waits
	// for the committers (wg), so no commit outlives the Store, not even one
	// whose callers gave up on it.
	base   context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed bool // d.mu
}

// ErrClosed is the error of an update made on, or still queued in, a Store
// that Close has closed.
var ErrClosed = errors.New("docstore: the store was closed")

// Close ends the Store's group commits: a commit still running (one whose
// callers gave up at their deadline, say) is cancelled, so its write may or
// may not land, and queued updates fail with ErrClosed; Close returns once
// no committer runs. Updates made after Close fail with ErrClosed. It does
// not close the objstore.Store. Closing is optional: a Store whose callers
// always wait for their answers leaves nothing running.
func (d *Store) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.stop()
	d.wg.Wait()
	return nil
}

// Stats count what a Store did (for tests and benchmarks).
type Stats struct {
	Updates    int // Update calls that returned
	Writes     int // conditional writes sent
	Redrives   int // 412s that led to re-reading and re-applying
	Retries    int // 409s and transient failures retried after a backoff
	Resolved   int // lost responses resolved by reading back
	Ambiguous  int // lost responses that could not be resolved
	NoopWrites int // updates that changed nothing and so wrote nothing
}

// New returns a document Store on s.
func New(s *objstore.Store, opts *Options) *Store {
	d := &Store{s: s, batchers: map[string]*batcher{}, written: map[string]*current{}, level: map[string]level{}}
	d.base, d.stop = context.WithCancel(context.Background())
	if opts != nil {
		d.opts = *opts
	}
	o := &d.opts
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 100
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = 2 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 200 * time.Millisecond
	}
	if o.HistoryLen <= 0 {
		o.HistoryLen = 32
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1024
	}
	if o.RegisterGrace <= 0 {
		o.RegisterGrace = 5 * time.Minute
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = time.Minute
	}
	if o.WriterID == "" {
		var b [6]byte
		_, _ = crand.Read(b[:])
		o.WriterID = hex.EncodeToString(b[:])
	}
	if o.Strategy != Auto {
		d.strategy = o.Strategy
	}
	d.retry = backoff.Policy{Base: o.BaseBackoff, Max: o.MaxBackoff}
	return d
}

// Objects returns the underlying object store.
func (d *Store) Objects() *objstore.Store { return d.s }

// Stats returns counters of what the Store did.
func (d *Store) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Store) count(f func(*Stats)) {
	d.mu.Lock()
	f(&d.stats)
	d.mu.Unlock()
}

func (d *Store) nonce() string {
	return fmt.Sprintf("%s-%d", d.opts.WriterID, d.counter.Add(1))
}

// resolve decides, once, whether this store gets compare-and-swap or the register.
func (d *Store) resolve(ctx context.Context) (Strategy, error) {
	d.mu.Lock()
	st := d.strategy
	d.mu.Unlock()
	if st != Auto {
		return st, nil
	}
	caps, err := d.s.Capabilities(ctx)
	if err != nil {
		return Auto, err
	}
	st = Register
	if caps.ConditionalWrites() {
		st = CAS
	}
	d.mu.Lock()
	d.strategy = st
	d.mu.Unlock()
	return st, nil
}

// current is a document as read, with what is needed to write it back.
type current struct {
	env    envelope
	etag   string
	exists bool
	lm     time.Time
	seq    int64 // register strategy: the newest version's sequence
}

func (c current) meta(key string) Meta {
	return Meta{Key: key, ETag: c.etag, Rev: c.env.Rev, Exists: c.exists, LastModified: c.lm}
}

func (d *Store) read(ctx context.Context, key string) (current, error) {
	data, info, err := d.s.GetBytes(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return current{env: envelope{Format: formatVersion}}, nil
	}
	if err != nil {
		return current{}, err
	}
	env, err := decode(data)
	if err != nil {
		return current{}, fmt.Errorf("%s: %w", key, err)
	}
	return current{env: env, etag: info.ETag, exists: true, lm: info.LastModified}, nil
}

// knownStrategy is the strategy if it is known without a request: forced,
// resolved already, or from capabilities the store knows without probing.
func (d *Store) knownStrategy() (Strategy, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.strategy != Auto {
		return d.strategy, true
	}
	caps, ok := d.s.KnownCapabilities()
	if !ok {
		return Auto, false
	}
	d.strategy = Register
	if caps.ConditionalWrites() {
		d.strategy = CAS
	}
	return d.strategy, true
}

// LoadBytes reads a document's value. A missing document is objstore.ErrNotFound.
// A read never probes the store (it needs no write permission): when the
// strategy is not known yet, it reads "<key>" and, only if that is missing,
// the register's "<key>/" versions.
func (d *Store) LoadBytes(ctx context.Context, key string) ([]byte, Meta, error) {
	st, known := d.knownStrategy()
	var c current
	var err error
	switch {
	case st == Register:
		c, err = d.registerRead(ctx, key)
	case known:
		c, err = d.read(ctx, key)
	default:
		c, err = d.read(ctx, key)
		if err == nil && !c.exists {
			c, err = d.registerRead(ctx, key)
		}
	}
	if err != nil {
		return nil, Meta{}, err
	}
	if !c.exists {
		return nil, c.meta(key), fmt.Errorf("docstore: %q: %w", key, objstore.ErrNotFound)
	}
	return c.env.payload(), c.meta(key), nil
}

// CreateBytes writes a new document; it fails with objstore.ErrPreconditionFailed
// if one exists.
func (d *Store) CreateBytes(ctx context.Context, key string, value []byte) (Meta, error) {
	return d.create(ctx, key, value, true)
}

func (d *Store) create(ctx context.Context, key string, value []byte, raw bool) (Meta, error) {
	exists := fmt.Errorf("docstore: %q already exists: %w", key, objstore.ErrPreconditionFailed)
	_, m, err := d.update(ctx, key, raw, func(_ []byte, m Meta) ([]byte, error) {
		if m.Exists {
			return nil, exists
		}
		return value, nil
	})
	return m, err
}

// UpdateFunc computes a document's next value from its current one. m.Exists
// is false for a missing document (cur is nil); return the value to create it,
// or an error to abort. It may be called more than once.
type UpdateFunc func(cur []byte, m Meta) ([]byte, error)

// UpdateBytes applies fn to the document's current value and commits the result
// with compare-and-swap, redriving on conflicts. It returns the value after fn.
func (d *Store) UpdateBytes(ctx context.Context, key string, fn UpdateFunc) ([]byte, Meta, error) {
	return d.update(ctx, key, true, fn)
}

// UpdateJSON is UpdateBytes for a value that is JSON: it is stored as JSON in
// the envelope (readable by other tools), not as base64 bytes. fn must return
// valid JSON.
func (d *Store) UpdateJSON(ctx context.Context, key string, fn UpdateFunc) ([]byte, Meta, error) {
	return d.update(ctx, key, false, fn)
}

func (d *Store) update(ctx context.Context, key string, raw bool, fn UpdateFunc) ([]byte, Meta, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, Meta{}, err
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, Meta{}, fmt.Errorf("%q: %w", key, ErrClosed)
	}
	st, err := d.resolve(ctx)
	if err != nil {
		return nil, Meta{}, err
	}
	defer d.count(func(s *Stats) { s.Updates++ })
	r := &request{ctx: ctx, fn: fn, raw: raw, done: make(chan result, 1)}
	if st == Register {
		if !d.opts.LastWriterWins {
			return nil, Meta{}, &UnsafeUpdateError{Key: key, Store: d.s.String()}
		}
		d.registerUpdate(ctx, key, []*request{r})
	} else if d.opts.NoGroupCommit {
		d.commit(ctx, key, []*request{r}, nil)
	} else {
		return d.enqueue(ctx, key, r)
	}
	res := <-r.done
	return res.value, res.meta, res.err
}

type result struct {
	value []byte
	meta  Meta
	err   error
}

type request struct {
	ctx  context.Context
	fn   UpdateFunc
	raw  bool
	done chan result
	// until: the request lingers (WithLinger) until then; zero: urgent.
	until time.Time

	// set by the committer while applying
	value []byte
	err   error
}

// maxRefusedCreates is how many creates of one document refused although it
// read as absent (objstore.ErrCreateRefused) an update tries before it
// returns that error.
const maxRefusedCreates = 3

// permanent reports errors that retrying cannot fix: among them a store that
// takes no writes (a full disk), which would otherwise be retried
// MaxAttempts times, for seconds, before the same error.
func permanent(err error) bool {
	return errors.Is(err, objstore.ErrNotSupported) || errors.Is(err, objstore.ErrInvalidKey) ||
		errors.Is(err, objstore.ErrBucketNotFound) || errors.Is(err, objstore.ErrUnwritable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// apply runs the live requests' functions in order on c, returning the new
// envelope payload and whether anything succeeded.
func apply(key string, c current, reqs []*request) (next []byte, raw, any bool) {
	state, exists, raw := c.env.payload(), c.exists, c.env.IsRaw
	for _, r := range reqs {
		if r.ctx.Err() != nil {
			r.value, r.err = nil, r.ctx.Err() // cancelled before it was applied
			continue
		}
		m := Meta{Key: key, ETag: c.etag, Rev: c.env.Rev, Exists: exists, LastModified: c.lm}
		v, err := r.fn(bytes.Clone(state), m)
		r.value, r.err = v, err
		if err != nil {
			continue
		}
		state, exists, raw, any = v, true, r.raw, true
	}
	return state, raw, any
}

// inflight is a write this commit sent without learning its outcome (the
// request or its response was lost, or the client gave up while the server
// may still apply it later). It lands, if ever, only while the document is in
// the state it was conditional on: the ETag it matched, or absent.
//
// A write that failed without an answer (a timeout, a reset, a 5xx or a
// 502/504 from a proxy) may have been applied, may never be, or may still be
// applied later, after the client has given up: milliseconds or seconds after
// the error. "My nonce is not in the document" therefore proves nothing by
// itself. What does: a write conditional on ETag X lands only while the
// document's ETag is X (an If-None-Match create only while it is absent), and
// because every write carries a fresh nonce an ETag never comes back. So
// commit keeps every write it has sent without learning its outcome, and on
// every read checks each of them (judge): its nonce in the document or its
// history means it landed, and the update's result is that write's (its
// functions are not applied again); a document whose ETag has moved on
// without it means it can never land and is forgotten; a document still at
// its ETag means it may yet land, so commit writes against that same ETag (of
// the two, at most one can land, and the next read tells which). If the
// history has moved past a write's revision, or the attempts or ctx run out
// while a write may still land, the commit ends in objstore.ErrAmbiguous.
type inflight struct {
	env     envelope // what it writes: its revision and nonce
	etag    string   // If-Match ETag, or "" for If-None-Match
	body    []byte
	results []result // each request's outcome had this write been the one
}

// verdict is what a read of the document says about the writes in flight.
type verdict int

const (
	noneLanded  verdict = iota // none has landed; those still possible are kept
	landed                     // one landed (its nonce is in the document)
	undecidable                // one may have landed and left the history window
)

// judge checks every write in flight against c, the document as just read. A
// write whose nonce c holds (as its own or in its history) landed. One that
// did not and whose condition no longer holds can never land (an ETag never
// returns: every write has a fresh nonce) and is dropped. One whose condition
// still holds may yet land and is kept. One that c's history is too short to
// rule out makes the commit undecidable.
func judge(c current, sent []*inflight) (verdict, *inflight, []*inflight) {
	open := sent[:0:0]
	for _, w := range sent {
		if c.exists {
			found, decisive := c.env.has(w.env.Nonce, w.env.Rev)
			if found {
				return landed, w, nil
			}
			if c.etag == w.etag {
				open = append(open, w) // its condition still holds
				continue
			}
			if !decisive {
				return undecidable, nil, nil
			}
			continue // the ETag moved on without it: it can never land
		}
		if w.etag == "" {
			open = append(open, w) // a create, and the document is still absent
		}
		// A document that existed when w was sent and is gone now: w's ETag
		// can never come back, so w can never land.
	}
	return noneLanded, nil, open
}

// commit applies reqs to one read of key and writes the result with one
// conditional write, redriving on 412. It delivers every request's result.
// cached, if not nil, is the document as this Store last wrote it: the first
// attempt compares-and-swaps against it without reading (a stale cache costs
// one 412 and a read). It returns the document as written, for the next batch.
//
// commit reasons about every write it has sent, not only the last: a write
// whose outcome it did not learn may land at any later time while its
// condition holds, so every read is checked for every such write's nonce
// (see judge), a no-op is never taken while one may still land, and the call
// ends in ErrAmbiguous, not a plain error, if one still might.
//
// Each attempt is six steps, each a method of committer: read the document
// or take the cache; judge the writes in flight; apply the requests'
// functions; decide whether the write is a no-op; write; classify the
// write's answer. A step that delivered every request's result ends the
// commit; one that retries starts the next attempt.
func (d *Store) commit(ctx context.Context, key string, reqs []*request, cached *current) *current {
	k := &committer{d: d, key: key, reqs: reqs}
	for attempt := 0; attempt < d.opts.MaxAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return k.fail(err)
		}
		c, fromCache, err := k.readOrTakeCache(ctx, &cached)
		if err != nil {
			if k.readFailed(ctx, attempt, err) {
				return nil
			}
			continue
		}
		inFlight := len(k.sent)
		if k.judgeInFlight(c) {
			return nil
		}
		if k.settle(ctx, c, attempt, inFlight-len(k.sent)) {
			if ctx.Err() != nil {
				return k.fail(ctx.Err())
			}
			attempt-- // a wait and a read: no write tried
			continue
		}
		next, raw, any := apply(key, c, reqs)
		if !any {
			return k.nothingApplied(c)
		}
		// Nothing changed: linearize at the read and skip the write. Not for a
		// cached state, which may be stale: read it and apply again (a read
		// costs less than a write). Not while a write of ours may still land
		// either: then a write is what decides, against it, which one takes
		// effect.
		if unchanged(c, next, raw) {
			if fromCache {
				attempt-- // the cache cost no request
				continue
			}
			if len(k.sent) == 0 {
				return k.noop(c)
			}
		}
		k.onCache = fromCache
		w, info, err := k.write(ctx, c, next, raw)
		if w == nil {
			return k.fail(err) // not encoded: nothing was sent
		}
		if done, written := k.classify(ctx, attempt, w, info, err); done {
			return written
		}
	}
	return k.giveUp()
}

// committer is one commit's state from one attempt to the next.
type committer struct {
	d    *Store
	key  string
	reqs []*request
	// sent are the writes whose outcome is unknown and that may still land.
	sent []*inflight
	// lastErr is the last attempt's error, for giveUp.
	lastErr error
	// refusedCreates counts creates refused although the document read as
	// absent (see classify).
	refusedCreates int
	// unsettled: the last write's outcome is unknown and the attempt
	// before it was not the first; its backoff is still owed (settle).
	unsettled bool
	// onCache: the write being classified was made on the cached state,
	// not on a read (its 412 says the cache was stale, not contention).
	onCache bool
}

// readOrTakeCache is the document the attempt applies to: *cached, taken
// (only the first attempt has one), or a read of the store. fromCache tells
// which: a cached state may be stale.
func (k *committer) readOrTakeCache(ctx context.Context, cached **current) (c current, fromCache bool, err error) {
	if *cached != nil {
		c, *cached = **cached, nil
		return c, true, nil
	}
	c, err = k.d.read(ctx, k.key)
	return c, false, err
}

// settle takes the backoff owed after a write of unknown outcome, once the
// read c has judged the writes in flight (dropped: how many it found can
// never land, the document having moved on without them). It reports that
// the attempt should read again after a wait:
//   - if writes were dropped, they lost a race as a refused write does: the
//     document's contention level goes up and the redrive waits for it
//     (the writes are settled, so the history may move on);
//   - if two or more writes may still land on c (the store keeps failing
//     writes on a document nobody else changes), after the usual backoff.
//
// Otherwise (one write may still land on c: the next write, on the same
// state, decides between them, as at most one can land) the attempt goes
// on with c. A wait before the read would let other writers move the
// history past the writes in flight, which then no read could settle.
func (k *committer) settle(ctx context.Context, c current, attempt, dropped int) (again bool) {
	if !k.unsettled {
		return false
	}
	k.unsettled = false
	if dropped > 0 && len(k.sent) == 0 {
		_ = k.d.retry.Wait(ctx, k.d.contended(k.key, true)-1)
		return true
	}
	if len(k.sent) < 2 {
		return false
	}
	_ = k.d.retry.Wait(ctx, attempt-1)
	return true
}

// readFailed handles a failed read: a permanent error ends the commit, any
// other is retried after a backoff (it reports whether the commit ended).
func (k *committer) readFailed(ctx context.Context, attempt int, err error) (done bool) {
	if permanent(err) {
		k.fail(err)
		return true
	}
	k.lastErr = err
	if k.d.retry.Wait(ctx, attempt) != nil {
		k.fail(err)
		return true
	}
	return false
}

// judgeInFlight checks the writes in flight against c, the document as just
// read (see judge). One that landed ends the commit with its results; one
// that may have landed out of the history's sight ends it in ErrAmbiguous;
// those that can never land any more are dropped (it reports whether the
// commit ended).
func (k *committer) judgeInFlight(c current) (done bool) {
	if len(k.sent) == 0 {
		return false
	}
	v, w, open := judge(c, k.sent)
	switch v {
	case landed:
		k.d.count(func(s *Stats) { s.Resolved++ })
		for i, r := range k.reqs {
			r.value, r.err = w.results[i].value, w.results[i].err
		}
		m := Meta{Key: k.key, ETag: md5hex(w.body), Rev: w.env.Rev, Exists: true}
		if c.env.Nonce == w.env.Nonce { // still the current version: its real ETag (SSE changes it)
			m.ETag, m.LastModified = c.etag, c.lm
		}
		deliver(k.reqs, m, nil)
		return true
	case undecidable:
		k.fail(fmt.Errorf("docstore: %q: a write's response was lost and the document's history no longer shows whether it landed: %w", k.key, objstore.ErrAmbiguous))
		return true
	}
	if len(open) < len(k.sent) {
		k.d.count(func(s *Stats) { s.Resolved += len(k.sent) - len(open) })
		if len(open) == 0 && errors.Is(k.lastErr, objstore.ErrAmbiguous) {
			// The document moved on without them: they lost a race. If
			// the attempts run out now, that is contention, not an
			// unknown outcome.
			k.lastErr = objstore.ErrPreconditionFailed
		}
	}
	k.sent = open
	return false
}

// nothingApplied ends a commit in which every function failed: each request
// hears its own error, and nothing is written. If a write in flight applied
// them, it may still land: the commit is ambiguous.
func (k *committer) nothingApplied(c current) *current {
	k.d.contended(k.key, false) // decided on a read, not refused
	if len(k.sent) > 0 {        // they succeeded before: one of those writes may still land
		return k.fail(fmt.Errorf("docstore: %q: the update functions now fail where they succeeded before", k.key))
	}
	deliver(k.reqs, c.meta(k.key), nil) // every function failed: nothing to write
	return nil
}

// unchanged tells whether next (raw) is the payload c holds already: a
// write would change nothing but the revision and the nonce.
func unchanged(c current, next []byte, raw bool) bool {
	return c.exists && c.env.Rev > 0 && raw == c.env.IsRaw && bytes.Equal(next, c.env.payload())
}

// noop ends a commit that changed nothing, linearized at the read c.
func (k *committer) noop(c current) *current {
	k.d.contended(k.key, false) // decided on a read, not refused
	k.d.count(func(s *Stats) { s.NoopWrites++ })
	deliver(k.reqs, c.meta(k.key), nil)
	return nil
}

// write sends the envelope that succeeds c with next (raw), conditional on
// c: If-Match its ETag, or If-None-Match if c is absent. w is what it sent
// (nil if the envelope could not be encoded: nothing was sent, err says
// why); info and err are the store's answer.
func (k *committer) write(ctx context.Context, c current, next []byte, raw bool) (w *inflight, info objstore.Info, err error) {
	env := k.d.next(c, next, raw)
	body, err := encode(&env)
	if err != nil {
		return nil, objstore.Info{}, err
	}
	w = &inflight{env: env, body: body}
	cond := objstore.IfAbsent()
	if c.exists {
		cond = objstore.IfMatch(c.etag)
		w.etag = c.etag
	}
	k.d.count(func(s *Stats) { s.Writes++ })
	info, err = k.d.s.PutBytes(ctx, k.key, body, &objstore.PutOptions{If: cond, ContentType: "application/json"})
	return w, info, err
}

// classify acts on the answer to the write w: success delivers and returns
// the document as written; an answer that says the write never landed
// (412, a refused create, 409 or a transient failure) retries, after a
// backoff where contention calls for it; an ambiguous one keeps w among the
// writes in flight; a permanent one ends the commit. done reports whether
// the commit ended (written: the document as written, or nil).
func (k *committer) classify(ctx context.Context, attempt int, w *inflight, info objstore.Info, err error) (done bool, written *current) {
	switch {
	case err == nil:
		k.d.contended(k.key, false)
		// Every other write in flight was conditional on a state that
		// this one has just replaced: none of them can land now.
		deliver(k.reqs, Meta{Key: k.key, ETag: info.ETag, Rev: w.env.Rev, Exists: true, LastModified: info.LastModified}, nil)
		if info.ETag == "" {
			return true, nil
		}
		return true, &current{env: w.env, etag: info.ETag, exists: true, lm: info.LastModified}
	case errors.Is(err, objstore.ErrCreateRefused):
		// A create refused although the document reads as absent: not
		// contention, unless someone created and deleted it in between.
		// Read again a few times; then say what happened (redriving for
		// MaxAttempts would end in a false ErrContention).
		k.refusedCreates++
		if k.refusedCreates >= maxRefusedCreates {
			return true, k.fail(fmt.Errorf("docstore: %q: %w", k.key, err))
		}
		k.lastErr = err
	case errors.Is(err, objstore.ErrPreconditionFailed):
		// The server refused this write: it will never land. Redrive.
		k.d.count(func(s *Stats) { s.Redrives++ })
		k.lastErr = err
		if k.onCache {
			// The cache was stale: another writer wrote since this Store
			// did, which is not yet a collision. Read and write at once.
			break
		}
		if len(k.sent) > 0 {
			// A write of unknown outcome is still open, and this 412 says
			// the document has moved: read it back at once, before the
			// history moves past that write (see settle). The 412 still
			// counts as contention.
			k.d.contended(k.key, true)
			break
		}
		if k.d.retry.Wait(ctx, k.d.contended(k.key, true)-1) != nil {
			return true, k.fail(ctx.Err())
		}
	case errors.Is(err, objstore.ErrAmbiguous):
		// Applied, lost, or still on its way: the next read decides, and
		// so does every read after it until its condition no longer holds.
		w.results = make([]result, len(k.reqs))
		for i, r := range k.reqs {
			w.results[i] = result{value: r.value, err: r.err}
		}
		k.sent = append(k.sent, w)
		k.lastErr = err
		// Read back at once: while other writers go on, the document's
		// history soon moves past this write's revision, and then no read
		// can tell whether it landed. The backoff comes after the read, if
		// the document has not moved (see settle).
		k.unsettled = attempt >= 1
	case permanent(err):
		return true, k.fail(err)
	default: // 409 or a transient failure before the write was applied: back off and retry
		k.d.count(func(s *Stats) { s.Retries++ })
		k.lastErr = err
		if k.d.retry.Wait(ctx, attempt) != nil {
			return true, k.fail(ctx.Err())
		}
	}
	return false, nil
}

// giveUp ends a commit that ran out of attempts: ErrContention if the
// writes kept being refused, else the last error.
func (k *committer) giveUp() *current {
	if errors.Is(k.lastErr, objstore.ErrPreconditionFailed) || k.lastErr == nil {
		return k.fail(ErrContention)
	}
	return k.fail(fmt.Errorf("docstore: %q: giving up after %d attempts: %w", k.key, k.d.opts.MaxAttempts, k.lastErr))
}

// fail ends the commit with err, delivered to every request whose function
// did not fail: ErrAmbiguous, wrapping err, while a write may still land. It
// returns nil (no document as written).
func (k *committer) fail(err error) *current {
	if len(k.sent) > 0 {
		// A request applied in a write that may still land must hear
		// "ambiguous", not its later error (a cancellation, say).
		for i, r := range k.reqs {
			for _, w := range k.sent {
				if w.results[i].err == nil {
					r.err = nil
				}
			}
		}
		if !errors.Is(err, objstore.ErrAmbiguous) {
			// Only ErrAmbiguous is wrapped: the last error (a 412, a
			// cancellation) must not make callers take it for "not applied".
			err = fmt.Errorf("docstore: %q: a write may still land (%w); last error: %v", k.key, objstore.ErrAmbiguous, err)
		}
		k.d.count(func(s *Stats) { s.Ambiguous++ })
	}
	deliver(k.reqs, Meta{}, err)
	return nil
}

// deliver sends every request its result: its own error if its function
// failed, else err, else its value with the committed meta.
func deliver(reqs []*request, m Meta, err error) {
	for _, r := range reqs {
		switch {
		case r.err != nil:
			r.done <- result{err: r.err}
		case err != nil:
			r.done <- result{err: err}
		default:
			r.done <- result{value: r.value, meta: m}
		}
	}
}

// next is the envelope that succeeds c with value: one revision up, a fresh
// nonce, and c's write added to the history.
func (d *Store) next(c current, value []byte, raw bool) envelope {
	env := envelope{Format: formatVersion, Rev: c.env.Rev + 1, Nonce: d.nonce(), IsRaw: raw}
	if raw {
		env.Raw = value
	} else {
		env.Value = value
	}
	if c.env.Nonce != "" {
		env.Recent = append([]stamp{{c.env.Rev, c.env.Nonce}}, c.env.Recent...)
	}
	if len(env.Recent) > d.opts.HistoryLen-1 {
		env.Recent = env.Recent[:d.opts.HistoryLen-1]
	}
	return env
}

// contended records an attempt of key's that was refused (a 412 on a state
// read) or that ended without one (written, or decided on a read: nothing to
// write, or every function failed), and returns the document's contention
// level: one up per 412, one down per attempt that ended without one,
// between 0 and 12, and back to 0 once no 412 has come for levelMemory.
// Every redrive after a 412 on a state read waits a random time under
// BaseBackoff·2^(level-1) (at most MaxBackoff); a 412 on the cached state
// this Store last wrote only says another writer came in between, and is
// redriven at once without changing the level.
//
// The level belongs to the document, not to one update: writers in other
// processes, which cannot share a commit, collide on it until each
// process's redrives are spread over about the time the others need to
// write, and a process that has just committed starts its next update's
// redrives at that spread, not from scratch against all the others (which
// is what a backoff kept per update did: at 64 processes of one writer on
// versitygw, about 20 writes an update, most of them refused). It settles
// where about half the attempts are refused. d.mu is taken.
func (d *Store) contended(key string, refused bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	e, known := d.level[key]
	if known && now.Sub(e.at) > levelMemory {
		e.n = 0
	}
	switch {
	case refused:
		e.n = min(e.n+1, 12)
		e.at = now
	case e.n > 0:
		e.n--
	}
	switch {
	case e.n == 0:
		delete(d.level, key)
	case !known && len(d.level) >= maxWritten:
		for k := range d.level { // evict one at random: it starts again at 0
			delete(d.level, k)
			break
		}
		fallthrough
	default:
		d.level[key] = e
	}
	return e.n
}

// levelMemory is how long a document's contention level lasts without a
// 412: contention it measured that long ago says nothing of now.
const levelMemory = time.Second

// level is a document's contention level and when a 412 last raised it.
type level struct {
	n  int
	at time.Time
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}
