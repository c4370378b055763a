package objledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
	"github.com/cairn-s3/cairn/objstore"
)

// Options tune the object-store ledger (its own settings; the behaviour every
// ledger shares is ledger.Options). A nil *Options means all defaults.
type Options struct {
	// Shards is the number of shards of a new ledger (an existing ledger keeps
	// the count it was created with). Default: 2 (defaultShards). URL
	// parameter shards=N.
	Shards int
	// CompactAt is how many changed records a head holds before it is compacted
	// into a new segment. Default: 128. URL parameter compact_at=N.
	CompactAt int
	// SweepEvery is how often a Claim looks at every shard, whatever the work
	// index says (it repairs an index entry left too high by a writer killed
	// between its two writes). Default: 1 minute.
	SweepEvery time.Duration
	// Grace is how long a replaced base is kept for readers that read the head
	// before the compaction. Default: 10 minutes.
	Grace time.Duration
	// Logger receives warnings of background work (a failed compaction).
	// Default: slog.Default().
	Logger *slog.Logger
}

func (c *Options) withDefaults() Options {
	var o Options
	if c != nil {
		o = *c
	}
	if o.Shards <= 0 {
		o.Shards = defaultShards
	}
	if o.CompactAt <= 0 {
		o.CompactAt = 128
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = time.Minute
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

const (
	metaKey  = "cairn-ledger.json"
	indexKey = "work.json"
	// maxShards bounds the shard count (one goroutine and one write per shard a
	// batch touches).
	maxShards = 1024
	// defaultShards is the shard count of a new ledger. A small batch touches
	// every shard, and each shard it touches costs a conditional write, so fewer
	// shards make small batches cheaper; one shard serialises the decoding and
	// compaction of everything. Two was chosen on MinIO: against four, more
	// events/s for one daemon, for several instances sharing a ledger and for
	// bulk decisions; against one, a little less for one daemon but a fifth
	// more for bulk decisions and claims. On AWS S3 (slower writes, each serialised
	// per key) many processes may want more: see the package doc's Costs.
	defaultShards = 2
)

func headKey(s int) string { return "shards/" + shardName(s) + "/head.json" }

// Backend is the intake ledger in an object store (a ledger.Backend). It is
// safe for concurrent use; use one per process so group commit can combine
// writes.
type Backend struct {
	s      *objstore.Store
	d      *docstore.Store
	opts   ledger.Options
	cfg    Options
	shards int
	owned  bool // Close closes s

	ctx    context.Context // background work (compaction), cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	rows rowCache // the JSON of the rows of the heads this process wrote last

	mu         sync.Mutex
	heads      []cachedHead
	segWork    map[int]segWork // shard → the work of its last decoded segments
	bases      map[string]*segment
	compacting []bool
	// unsure are, per shard, new bases whose put or swap failed ambiguously:
	// a late swap may still name them. The next swap of the shard by this
	// process settles them (see compact).
	unsure map[int][]string
	swept  time.Time

	// hints are index entries a Record still has to lower (shard → due),
	// written by the hinter goroutine; Claim visits their shards meanwhile.
	hints    map[int]hint
	hintGen  uint64
	hintWake chan struct{}
	// hintWait is how long the hinter waits after a wake before it writes
	// (nanoseconds; hintLinger by default, changed by tests).
	hintWait atomic.Int64
}

// hint is an index entry to lower: the shard's earliest due work after a
// write, and which hintLater call asked for it.
type hint struct {
	due int64
	gen uint64
}

// segWork is the work of one set of a shard's segments (keys joined), as
// the head with change counter seq named them.
type segWork struct {
	key  string
	keys []string
	seq  int64
	work workSet // never changed once cached: cloned under mu
}

// succeeds reports whether keys, the segments of a head with change counter
// seq, are c's with their newest ones replaced by one segment, the last of
// keys, that merged them (or with one segment added): the work of keys is then
// c's with that segment's rows laid over it. The head is then later than c's
// (a larger seq: every compaction's swap moves it on); between the two, the
// segments after the common prefix were only merged (never dropped: a merge
// keeps every row and tombstone unless it makes a new base, which would have
// replaced the prefix too) and added to, so the last segment holds every row
// of c's segments it replaced, newer. Without a common prefix (a new base),
// nothing is known: tombstones may have been dropped.
func (c segWork) succeeds(keys []string, seq int64) bool {
	n := len(keys) - 1
	return seq > c.seq && n >= 1 && len(c.keys) >= n && slices.Equal(keys[:n], c.keys[:n]) && !slices.Contains(c.keys, keys[n])
}

// cachedHead is a decoded head and the hash of the bytes it was decoded from.
type cachedHead struct {
	sum uint64
	n   int
	h   *head
}

func init() {
	for _, scheme := range []string{"s3", "file", "mem"} {
		ledger.Register(scheme, openURL)
	}
}

// openURL opens the ledger a URL names (see ParseURL).
func openURL(ctx context.Context, raw string, opts *ledger.Options) (ledger.Backend, error) {
	storeURL, cfg, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if opts != nil && opts.MustExist {
		// A directory store must not be created to look for a ledger in it.
		if u, err := url.Parse(storeURL); err == nil && u.Scheme == "file" {
			q := u.Query()
			q.Set("nocreate", "true")
			u.RawQuery = q.Encode()
			storeURL = u.String()
		}
	}
	s, err := objstore.Open(ctx, storeURL, nil)
	if err != nil {
		if opts != nil && opts.MustExist && errors.Is(err, objstore.ErrBucketNotFound) {
			return nil, fmt.Errorf("%w at %s: %v", ledger.ErrNoLedger, raw, err)
		}
		return nil, fmt.Errorf("ledger: opening the store of %s: %w", raw, err)
	}
	l, err := OpenBackend(ctx, s, opts, &cfg)
	if err != nil {
		s.Close()
		return nil, err
	}
	l.owned = true
	return l, nil
}

// ParseURL splits a ledger URL into the URL of its store and the ledger's own
// parameters (shards, compact_at), which the store must not see. A bare
// bucket (s3://bucket) keeps the ledger under cairn-ledger/.
func ParseURL(raw string) (storeURL string, cfg Options, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", cfg, fmt.Errorf("%w: %v", ledger.ErrInvalidURL, err)
	}
	q := u.Query()
	for _, p := range []struct {
		name string
		to   *int
	}{{"shards", &cfg.Shards}, {"compact_at", &cfg.CompactAt}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "", cfg, fmt.Errorf("%w: %s=%q must be a positive integer", ledger.ErrInvalidURL, p.name, v)
			}
			*p.to = n
			q.Del(p.name)
		}
	}
	u.RawQuery = q.Encode()
	if u.Scheme == "s3" && strings.Trim(u.Path, "/") == "" {
		u.Path = "/" + strings.TrimSuffix(cairn.LedgerPrefix, "/")
	}
	return u.String(), cfg, nil
}

// Open opens (creating if needed) the ledger kept in s. It refuses a store
// whose capability probe shows that conditional writes are not enforced. With
// Options.MustExist a store without the ledger's descriptor is
// ledger.ErrNoLedger, found before anything is written (not even the probe).
// Closing the ledger does not close s.
func Open(ctx context.Context, s *objstore.Store, opts *ledger.Options, cfg *Options) (*ledger.Ledger, error) {
	b, err := OpenBackend(ctx, s, opts, cfg)
	if err != nil {
		return nil, err
	}
	return ledger.New(b), nil
}

// OpenBackend is Open returning the backend itself, for its own methods
// (Compact, Shards, Store); wrap it with ledger.New to use it as a
// ledger.
func OpenBackend(ctx context.Context, s *objstore.Store, opts *ledger.Options, cfg *Options) (*Backend, error) {
	c := cfg.withDefaults()
	if c.Shards > maxShards {
		return nil, fmt.Errorf("objledger: %d shards is more than the %d allowed", c.Shards, maxShards)
	}
	if opts != nil && opts.MustExist {
		_, err := s.Head(ctx, metaKey)
		if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrBucketNotFound) {
			return nil, fmt.Errorf("%w in %s (no %s)", ledger.ErrNoLedger, s, metaKey)
		}
		if err != nil {
			return nil, fmt.Errorf("objledger: %w: reading %s in %s: %w", ledger.ErrUnavailable, metaKey, s, err)
		}
	}
	l := &Backend{s: s, opts: driver.Defaults(opts), cfg: c, bases: map[string]*segment{}}
	l.d = docstore.New(s, &docstore.Options{Strategy: docstore.CAS, MaxAttempts: 1000, MaxBackoff: 100 * time.Millisecond, HistoryLen: 64})
	// Opening is retried through transient failures (a lost request, a store
	// restarting): one failed request must not stop a daemon from starting.
	var m meta
	for attempt := 1; ; attempt++ {
		err := requireCAS(ctx, s)
		if err == nil {
			m, err = l.loadMeta(ctx)
		}
		if err == nil {
			break
		}
		transient := (errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, objstore.ErrAmbiguous)) &&
			!errors.Is(err, objstore.ErrBucketNotFound) && !errors.Is(err, objstore.ErrNotSupported)
		if !transient || attempt == openAttempts || ctx.Err() != nil {
			return nil, err
		}
		if openBackoff.Wait(ctx, attempt-1) != nil {
			return nil, err
		}
	}
	l.shards = m.Shards
	l.heads = make([]cachedHead, l.shards)
	l.compacting = make([]bool, l.shards)
	l.unsure = map[int][]string{}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.hints, l.hintWake = map[int]hint{}, make(chan struct{}, 1)
	l.hintWait.Store(int64(hintLinger))
	l.wg.Go(l.hinter)
	return l, nil
}

// openAttempts bounds OpenBackend's retries of transient failures (waits of
// at most 3 s in all: openBackoff).
const openAttempts = 5

// requireCAS refuses a store that does not enforce conditional writes, naming
// the probe's failed checks.
func requireCAS(ctx context.Context, s *objstore.Store) error {
	caps, err := s.Capabilities(ctx)
	if err != nil {
		return fmt.Errorf("objledger: %w: %w", ledger.ErrUnavailable, err)
	}
	if caps.ConditionalWrites() {
		return nil
	}
	var failed []string
	if rep, err := s.Probe(ctx, nil); err == nil {
		for _, c := range rep.Checks {
			if !c.Enforced && (strings.HasPrefix(c.Name, "put-if") || strings.HasPrefix(c.Name, "racing-")) {
				failed = append(failed, fmt.Sprintf("%s (%s)", c.Name, c.Outcome))
			}
		}
	}
	if len(failed) == 0 {
		failed = []string{fmt.Sprintf("put-if-absent enforced: %v, put-if-match enforced: %v", caps.PutIfAbsent, caps.PutIfMatch)}
	}
	return fmt.Errorf("objledger: %s does not enforce conditional writes, so concurrent writers could lose records; refusing to keep a ledger there. Failed probe checks: %s: %w",
		s, strings.Join(failed, "; "), objstore.ErrNotSupported)
}

// loadMeta reads the ledger's descriptor, writing it first if absent.
func (l *Backend) loadMeta(ctx context.Context) (meta, error) {
	var m meta
	for range 3 {
		data, _, err := l.d.LoadBytes(ctx, metaKey)
		if errors.Is(err, objstore.ErrNotFound) && l.opts.MustExist {
			return m, fmt.Errorf("%w in %s (no %s)", ledger.ErrNoLedger, l.s, metaKey)
		}
		if errors.Is(err, objstore.ErrNotFound) {
			mine, _ := json.Marshal(meta{Format: formatVersion, Shards: l.cfg.Shards, Made: time.Now().UnixMilli()})
			_, _, err := l.d.UpdateJSON(ctx, metaKey, func(cur []byte, m docstore.Meta) ([]byte, error) {
				if m.Exists {
					return cur, nil // another process created it first
				}
				return mine, nil
			})
			if err != nil {
				return m, l.wrap("creating the ledger", err)
			}
			continue // read back whichever create won
		}
		if err != nil {
			return m, l.wrap("opening", err)
		}
		if err := decodeJSON(data, &m, metaKey); err != nil {
			return m, err
		}
		if m.Format < 1 || m.Format > formatVersion || m.Shards <= 0 || m.Shards > maxShards {
			return m, fmt.Errorf("objledger: %s in %s has format %d and %d shards; this cairn reads formats 1 to %d: upgrade cairn", metaKey, l.s, m.Format, m.Shards, formatVersion)
		}
		if m.Format < formatVersion {
			// Upgrade first, so that older cairn versions refuse the ledger
			// from now on (one already running keeps going: stop them first).
			_, _, err := l.d.UpdateJSON(ctx, metaKey, func(cur []byte, dm docstore.Meta) ([]byte, error) {
				var now meta
				if err := decodeJSON(cur, &now, metaKey); err != nil {
					return nil, err
				}
				if now.Format >= formatVersion {
					return cur, nil
				}
				now.Format = formatVersion
				return json.Marshal(now)
			})
			if err != nil {
				return m, l.wrap("upgrading the ledger's format", err)
			}
			continue // read back the upgraded descriptor
		}
		return m, nil
	}
	return m, fmt.Errorf("objledger: %s in %s could not be created or read", metaKey, l.s)
}

// Store returns the underlying object store.
func (l *Backend) Store() *objstore.Store { return l.s }

// Shards is the ledger's shard count.
func (l *Backend) Shards() int { return l.shards }

// Close writes the index entries Records left to lower, waits for
// background compactions and releases the store (if Open
// opened it).
func (l *Backend) Close() error {
	l.cancel()
	l.wg.Wait()
	_ = l.d.Close() // ends commits whose callers gave up at their deadline
	if l.owned {
		return l.s.Close()
	}
	return nil
}

// Ping reads the ledger's descriptor.
func (l *Backend) Ping(ctx context.Context) error {
	_, err := l.s.Head(ctx, metaKey)
	return l.wrap("ping", err)
}

func (l *Backend) now() int64 {
	if l.opts.Now != nil {
		return l.opts.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// wrap names the operation and marks store failures as ErrUnavailable (retry)
// unless they are the ledger's own refusals or a caller's cancellation.
func (l *Backend) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ledger.ErrLeaseLost), errors.Is(err, ledger.ErrSuperseded), errors.Is(err, ledger.ErrNotFound),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ledger.ErrUnavailable):
		return err
	case errors.Is(err, objstore.ErrNotSupported), errors.Is(err, objstore.ErrInvalidKey), errors.Is(err, errCorrupt):
		return fmt.Errorf("ledger (object store %s) %s: %w", l.s, op, err)
	}
	return fmt.Errorf("ledger (object store %s) %s: %w: %w", l.s, op, ledger.ErrUnavailable, err)
}

var (
	errBaseGone = errors.New("objledger: the head's base was deleted (a compaction passed it); re-read")
	errCorrupt  = errors.New("objledger: corrupt ledger document")
)

// segment returns the decoded base at key, from cache if possible.
func (l *Backend) segment(ctx context.Context, key string) (*segment, error) {
	l.mu.Lock()
	seg := l.bases[key]
	l.mu.Unlock()
	if seg != nil {
		return seg, nil
	}
	var data []byte
	var err error
	for attempt := 0; ; attempt++ {
		data, _, err = l.s.GetBytes(ctx, key)
		if err == nil || attempt >= readAttempts-1 || !transient(err) {
			break
		}
		if err := sleep(ctx, attempt); err != nil {
			return nil, err
		}
	}
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, errBaseGone
	}
	if err != nil {
		return nil, err
	}
	seg = &segment{}
	if err := decodeJSON(data, seg, key); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	if seg.Rows == nil {
		seg.Rows = map[string]*row{}
	}
	if err := validRows(seg.Rows, key); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.bases[key] = seg
	l.mu.Unlock()
	return seg, nil
}

func trashKeys(ts []trash) []string {
	ks := make([]string, len(ts))
	for i, t := range ts {
		ks[i] = t.Key
	}
	return ks
}

// validRows refuses rows a JSON decoder accepts but the ledger cannot use.
func validRows(rows map[string]*row, what string) error {
	for rid, w := range rows {
		if w == nil || (!w.Deleted && (w.Status == "" || id(w.Bucket, w.ident()) != rid)) {
			return fmt.Errorf("%w: %s: record %q is malformed", errCorrupt, what, rid)
		}
	}
	return nil
}

// forget drops bases no longer referenced by any cached head.
func (l *Backend) forget(key string) {
	l.mu.Lock()
	delete(l.bases, key)
	l.mu.Unlock()
}

// decodeHead decodes a head (with its base attached), reusing the cached
// decoding when the bytes are the ones last seen. The result is the caller's
// to change.
func (l *Backend) decodeHead(ctx context.Context, s int, data []byte) (*head, error) {
	if len(data) == 0 {
		return &head{Rows: map[string]*row{}, Work: newWorkSet()}, nil
	}
	sum := maphash.Bytes(hashSeed, data)
	l.mu.Lock()
	if c := l.heads[s]; c.h != nil && c.sum == sum && c.n == len(data) {
		own := c.h.clone() // under mu: see workSet
		l.mu.Unlock()
		return own, nil
	}
	l.mu.Unlock()
	h := &head{}
	if err := decodeJSON(data, h, headKey(s)); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	if h.Rows == nil {
		h.Rows = map[string]*row{}
	}
	if err := validRows(h.Rows, headKey(s)); err != nil {
		return nil, err
	}
	// Segments are this shard's own (compaction deletes trashed ones: never
	// anything else a damaged head might name).
	own := "shards/" + shardName(s) + "/base-"
	for _, k := range append(append([]string{h.Base}, h.Segs...), trashKeys(h.Trash)...) {
		if k != "" && (!strings.HasPrefix(k, own) || objstore.ValidateKey(k) != nil) {
			return nil, fmt.Errorf("%w: %s names %q as a base; bases of this shard are %s…", errCorrupt, headKey(s), k, own)
		}
	}
	if h.Base != "" {
		seg, err := l.segment(ctx, h.Base)
		if err != nil {
			return nil, err
		}
		h.base = seg
	}
	h.segs = make([]*segment, len(h.Segs))
	for i, k := range h.Segs {
		seg, err := l.segment(ctx, k)
		if err != nil {
			return nil, err
		}
		h.segs[i] = seg
	}
	h.deriveWork(l.segmentWork(s, h))
	mine := h.clone() // before h is shared: see workSet
	l.keep(s, sum, len(data), h)
	return mine, nil
}

// segmentWork is the work of h's segments (segmentWork), the caller's own
// copy, from the cache of shard s's last set of segments: as it is when it is
// the same set, with the newest segment laid over it when h's set succeeds it
// (a compaction's: see segWork.succeeds), computed afresh otherwise.
func (l *Backend) segmentWork(s int, h *head) workSet {
	keys, layers := h.layers()
	key := strings.Join(keys, "\n")
	var w workSet
	l.mu.Lock()
	c, ok := l.segWork[s]
	if ok && c.key == key {
		w = c.work.clone()
		l.mu.Unlock()
		return w
	}
	if ok && c.succeeds(keys, h.Seq) {
		w = c.work.clone()
	}
	l.mu.Unlock()
	if w.byID != nil {
		layerWork(w, layers[len(layers)-1].Rows)
	} else {
		w = segmentWork(layers)
	}
	l.mu.Lock()
	if l.segWork == nil {
		l.segWork = map[int]segWork{}
	}
	l.segWork[s] = segWork{key: key, keys: slices.Clone(keys), seq: h.Seq, work: w}
	own := w.clone()
	l.mu.Unlock()
	return own
}

func (l *Backend) keep(s int, sum uint64, n int, h *head) {
	l.mu.Lock()
	old := l.heads[s].h
	l.heads[s] = cachedHead{sum: sum, n: n, h: h}
	l.mu.Unlock()
	if old != nil {
		now, _ := h.layers()
		was, _ := old.layers()
		for _, k := range was {
			if !slices.Contains(now, k) {
				l.forget(k)
			}
		}
	}
}

// encodeHead encodes h and caches it as the decoding of the bytes.
func (l *Backend) encodeHead(s int, h *head) ([]byte, error) {
	data, err := l.rows.encodeHead(s, h)
	if err != nil {
		return nil, err
	}
	l.keep(s, maphash.Bytes(hashSeed, data), len(data), h)
	return data, nil
}

// load reads a document's value (nil if it does not exist), retrying
// transient failures a few times with jittered backoff (writes are retried by
// package docstore).
func (l *Backend) load(ctx context.Context, key string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		data, _, err := l.d.LoadBytes(ctx, key)
		switch {
		case err == nil:
			return data, nil
		case errors.Is(err, objstore.ErrNotFound):
			return nil, nil
		case attempt >= readAttempts-1 || !transient(err):
			return nil, err
		}
		if err := sleep(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

const readAttempts = 6

// transient reports errors worth retrying: not a refusal, a missing object,
// a bad request or the caller's cancellation.
func transient(err error) bool {
	return !errors.Is(err, objstore.ErrNotSupported) && !errors.Is(err, objstore.ErrInvalidKey) &&
		!errors.Is(err, objstore.ErrBucketNotFound) && !errors.Is(err, objstore.ErrNotFound) &&
		!errors.Is(err, objstore.ErrUnwritable) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errCorrupt)
}

// sleep waits a full-jitter backoff for attempt (5 ms doubling, capped at 1 s).
func sleep(ctx context.Context, attempt int) error { return readBackoff.Wait(ctx, attempt) }

// The waits between the attempts of a read and of opening the ledger.
var (
	readBackoff = backoff.Policy{Base: 5 * time.Millisecond, Max: time.Second}
	openBackoff = backoff.Policy{Base: 200 * time.Millisecond, Max: 2 * time.Second}
)

// view reads shard s as it is now (read-only).
func (l *Backend) view(ctx context.Context, s int) (*head, error) {
	for attempt := 0; ; attempt++ {
		data, err := l.load(ctx, headKey(s))
		if err != nil {
			return nil, err
		}
		h, err := l.decodeHead(ctx, s, data)
		if errors.Is(err, errBaseGone) && attempt < 3 {
			continue
		}
		return h, err
	}
}

// update applies op to shard s with compare-and-swap (group-committed with
// the process's other updates of the shard) and returns the head as op left
// it. op may run more than once and must only change h.
func (l *Backend) update(ctx context.Context, s int, op func(h *head, now int64) error) (*head, error) {
	// A call that is not urgent (ledger.WithLinger: the pipeline's
	// completions) rides in the shard's next urgent write (a Record's): the
	// mark is docstore.WithLinger's too.
	for attempt := 0; ; attempt++ {
		// op may run more than once, and the write that commits need not be
		// the last run's: a write whose response was lost (or that landed
		// late) can be the one docstore finds committed after later runs.
		// The caller's results (claims, outcomes, counts) live in op's
		// closure, so they must be the committed run's: each run is kept,
		// and if an earlier one committed, op runs again on that run's input
		// (it is deterministic in its head and clock), which restores its
		// results.
		type run struct {
			cur, produced []byte
			now           int64
		}
		var runs []run
		var out *head
		committed, _, err := l.d.UpdateJSON(ctx, headKey(s), func(cur []byte, _ docstore.Meta) ([]byte, error) {
			now := l.now()
			h, err := l.decodeHead(ctx, s, cur)
			if err != nil {
				return nil, err
			}
			if err := op(h, now); err != nil {
				return nil, err
			}
			data, err := l.encodeHead(s, h)
			out = h
			runs = append(runs, run{cur: bytes.Clone(cur), produced: data, now: now})
			return data, err
		})
		if errors.Is(err, errBaseGone) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n := len(runs); n > 1 && !bytes.Equal(committed, runs[n-1].produced) {
			out = nil
			for i := n - 2; i >= 0 && out == nil; i-- {
				if !bytes.Equal(committed, runs[i].produced) {
					continue
				}
				h, err := l.decodeHead(ctx, s, runs[i].cur)
				if err != nil {
					return nil, err
				}
				if err := op(h, runs[i].now); err != nil {
					return nil, err
				}
				if data, err := l.encodeHead(s, h); err != nil || !bytes.Equal(data, committed) {
					return nil, fmt.Errorf("objledger: shard %d: the committed write cannot be matched to its results: %w", s, objstore.ErrAmbiguous)
				}
				out = h
			}
			if out == nil {
				return nil, fmt.Errorf("objledger: shard %d: the committed write is none of this call's: %w", s, objstore.ErrAmbiguous)
			}
		}
		if len(out.Rows) > l.cfg.CompactAt {
			l.compactLater(s)
		}
		return out, nil
	}
}

// eachShard runs fn for every shard in s (all shards if nil) concurrently and
// returns the first error.
func (l *Backend) eachShard(shards []int, fn func(s int) error) error {
	if shards == nil {
		shards = make([]int, l.shards)
		for i := range shards {
			shards[i] = i
		}
	}
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() { errs[i] = fn(s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// noteKey is where a note (ledger.NoteKeeper) is kept.
func noteKey(name string) string { return "meta/" + name + ".json" }

// PutNote stores a note (ledger.NoteKeeper) as the object meta/NAME.json
// under the ledger's prefix; the last writer wins. Each write is conditional
// on the version it read, so an earlier attempt whose request lands late
// (the caller gave up on it) is refused instead of putting an older value
// back; a write whose outcome is unknown is judged by reading the note back,
// and a lost or refused one is tried again until ctx ends.
func (l *Backend) PutNote(ctx context.Context, name string, value []byte) error {
	key := noteKey(name)
	for attempt := 0; ; attempt++ {
		cur, info, err := l.s.GetBytes(ctx, key)
		cond := objstore.IfMatch(info.ETag)
		if errors.Is(err, objstore.ErrNotFound) {
			cond, err = objstore.IfAbsent(), nil
		} else if err == nil && bytes.Equal(cur, value) {
			return nil // this value is the note (an earlier attempt landed, or another writer wrote it)
		}
		if err == nil {
			if _, err = l.s.PutBytes(ctx, key, value, &objstore.PutOptions{If: cond, ContentType: "application/json"}); err == nil {
				return nil
			}
		}
		// A refused write lost a race with another writer's; a lost or
		// unanswered one (wrap calls it unavailable) may be tried again.
		retry := errors.Is(err, objstore.ErrPreconditionFailed) || errors.Is(l.wrap("put note", err), ledger.ErrUnavailable)
		if !retry || noteBackoff.Wait(ctx, attempt) != nil {
			return l.wrap("put note", err)
		}
	}
}

// noteBackoff spaces PutNote's attempts.
var noteBackoff = backoff.Policy{Base: 10 * time.Millisecond, Max: time.Second}

// Note reads a note (ledger.NoteKeeper). A failed read is tried again
// (noteAttempts in all) before its error is returned.
func (l *Backend) Note(ctx context.Context, name string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		data, _, err := l.s.GetBytes(ctx, noteKey(name))
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, nil
		}
		if err == nil {
			return data, nil
		}
		err = l.wrap("read note", err)
		if !errors.Is(err, ledger.ErrUnavailable) || attempt+1 == noteAttempts || noteBackoff.Wait(ctx, attempt) != nil {
			return nil, err
		}
	}
}

// noteAttempts bounds Note's reads.
const noteAttempts = 5
