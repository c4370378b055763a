package dynamoledger

import (
	"sync"

	"github.com/cairn-s3/cairn/ledger"
)

// heldRows are the rows this handle wrote when it claimed (or last renewed)
// records, by claim: Complete, Fail, Release and Renew write on them
// without reading the record first (a write conditional on the revision
// held, refused if the record changed since, which change then reads and
// judges again). Entries go when the claim ends; a claim never ended here
// (its worker gave it up unsaid) stays until the map is full, and then new
// claims are not kept (they are read first, as without the map).
type heldRows struct {
	mu sync.Mutex
	m  map[heldKey]*row
}

type heldKey struct {
	bucket, ident string
	token         int64
}

// maxHeld bounds the rows kept (~1 KB each).
const maxHeld = 1 << 16

func (h *heldRows) put(w *row) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[heldKey]*row{}
	}
	k := heldKey{w.rec.Bucket, w.ident, w.rec.Token}
	if _, ok := h.m[k]; ok || len(h.m) < maxHeld {
		h.m[k] = w
	}
}

func (h *heldRows) get(c ledger.Claim) *row {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[heldKey{c.Bucket, c.Ident, c.Token}]
}

func (h *heldRows) drop(c ledger.Claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, heldKey{c.Bucket, c.Ident, c.Token})
}

// recentRows are the rows of the records this handle last wrote or read
// whole, by record, so that a Record whose batched read is older than this
// handle's own write since (concurrent batches with events of one key)
// starts from the newer row rather than have its write refused and read
// the record again. A row here is only ever a state the record had: one
// that moved on since (another process wrote) costs that refused write and
// read, as without it. Bounded: when full, it starts again empty.
type recentRows struct {
	mu sync.Mutex
	m  map[id]*row
}

// maxRecent bounds the rows kept (~1 KB each).
const maxRecent = 1 << 14

// put keeps w (nil: the record was found missing) as i's latest row, unless
// a newer one is kept.
func (r *recentRows) put(i id, w *row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w == nil {
		delete(r.m, i)
		return
	}
	if r.m == nil || len(r.m) >= maxRecent {
		r.m = map[id]*row{}
	}
	if old := r.m[i]; old == nil || old.rev < w.rev {
		r.m[i] = w
	}
}

// fresher is the newer of cur (as the caller read it; nil: missing) and the
// row kept for i.
func (r *recentRows) fresher(i id, cur *row) *row {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.m[i]; w != nil && (cur == nil || w.rev > cur.rev) {
		return w
	}
	return cur
}

func (r *recentRows) drop(i id) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, i)
}

// claiming are the records this handle's claims are writing now: a claimer
// skips a candidate another goroutine of its handle is claiming (its write
// would be refused, and the record read again, for nothing).
type claiming struct {
	mu sync.Mutex
	m  map[id]bool
}

// take marks i as being claimed, false if it already is.
func (c *claiming) take(i id) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[i] {
		return false
	}
	if c.m == nil {
		c.m = map[id]bool{}
	}
	c.m[i] = true
	return true
}

func (c *claiming) done(i id) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, i)
}
